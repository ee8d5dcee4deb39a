"""``grouped_logprobs`` (one shared prompt per rollout group) equals the plain batch.

Real parts: the built-in tiny Qwen2 model and its KV cache; no mocks.
"""

from __future__ import annotations

import pytest
import torch

from slca_lightning.logprobs.causal_lm import grouped_logprobs, sequence_logprobs
from slca_lightning.models.policy import load_policy


@pytest.fixture(scope="module")
def model():
    policy, _ = load_policy("tiny", seed=0)
    return policy.eval()


def _batch():
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(3, 200, (7, 40), generator=gen)
    ids[:3, :25] = ids[0, :25]  # group 7: a 25-token shared prompt
    ids[3:6, :25] = ids[3, :25]  # group 3: another one
    am = torch.ones(7, 40, dtype=torch.long)
    am[1, 30:] = 0
    am[4, 35:] = 0
    am[5, 28:] = 0
    am[6, 20:] = 0  # group 9: a single row (plain path)
    ids[am == 0] = 0
    return ids, am, torch.tensor([7, 7, 7, 3, 3, 3, 9])


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_values_and_entropy_match_the_plain_batch(model, temperature):
    ids, am, groups = _batch()
    lp, ent = sequence_logprobs(model, ids, am, temperature=temperature, return_entropy=True)
    glp, gent = grouped_logprobs(
        model, ids, am, groups, temperature=temperature, return_entropy=True, min_prefix=8
    )
    assert glp.shape == lp.shape == (7, 40)
    torch.testing.assert_close(glp, lp, atol=1e-5, rtol=0)
    torch.testing.assert_close(gent, ent, atol=1e-5, rtol=0)
    assert bool((glp[am == 0] == 0).all())  # padding stays 0


def test_gradients_match_the_plain_batch(model):
    ids, am, groups = _batch()
    model.zero_grad()
    sequence_logprobs(model, ids, am).sum().backward()
    plain = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    grouped_logprobs(model, ids, am, groups, min_prefix=8).sum().backward()
    for a, p in zip(plain, model.parameters()):
        assert float((a - p.grad).norm()) <= 1e-4 * max(float(a.norm()), 1e-6)
    model.zero_grad()


def test_short_prefix_falls_back_to_the_plain_path(model):
    ids, am, groups = _batch()
    lp = sequence_logprobs(model, ids, am)
    torch.testing.assert_close(grouped_logprobs(model, ids, am, groups, min_prefix=1000), lp)
