"""HFEngine's shared-prefix generation: clusters, and the same samples as plain batching.

Real parts: the built-in tiny Qwen2 model, ``model.generate`` and its KV cache; no mocks.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.policy import load_policy
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine, prefix_clusters


def test_prefix_clusters_on_literal_prompts():
    p, q = list(range(100, 200)), list(range(300, 400))
    prompts = [[*p, 1], [*q, 2, 3], [7, 8, 9], [*p, 4, 5], q, p]
    clusters = prefix_clusters(prompts, min_shared=64)
    assert sorted(clusters) == sorted([([5, 0, 3], 100), ([4, 1], 100), ([2], 0)])
    assert prefix_clusters(prompts, min_shared=101)[-1] == ([0, 1, 2, 3, 4, 5], 0)
    assert prefix_clusters([], 8) == []


@pytest.fixture(scope="module")
def policy():
    return load_policy("tiny", seed=0)


def _prompts():
    gen = torch.Generator().manual_seed(0)
    heads = [torch.randint(3, 500, (120,), generator=gen).tolist() for _ in range(2)]
    prompts = [
        h + torch.randint(3, 500, (r * 5,), generator=gen).tolist() for h in heads for r in range(3)
    ]
    return [*prompts, torch.randint(3, 500, (40,), generator=gen).tolist()]


def test_greedy_generation_is_the_same_with_and_without_the_shared_prefix(policy):
    model, tok = policy
    sampling = SamplingConfig(temperature=0.0, max_new_tokens=12)
    plain = HFEngine(model, tok, share_prefix=False).generate(_prompts(), sampling)
    shared = HFEngine(model, tok, share_prefix=True).generate(_prompts(), sampling)
    assert [g.token_ids for g in shared] == [g.token_ids for g in plain]
    for a, b in zip(plain, shared):
        assert max(abs(x - y) for x, y in zip(a.logprobs, b.logprobs)) < 1e-4


def test_seeded_sampling_with_the_shared_prefix_is_reproducible(policy):
    model, tok = policy
    sampling = SamplingConfig(temperature=1.0, max_new_tokens=10, seed=3)
    first = HFEngine(model, tok, share_prefix=True).generate(_prompts(), sampling)
    again = HFEngine(model, tok, share_prefix=True).generate(_prompts(), sampling)
    assert [g.token_ids for g in first] == [g.token_ids for g in again]
    assert all(len(g.token_ids) == len(g.logprobs) for g in first)
