"""Shared fixtures of the rollout tests: the built-in tiny policy and prompts that share prefixes."""

from __future__ import annotations

import pytest
import torch

from slca_lightning.models.policy import load_policy


@pytest.fixture(scope="module")
def policy():
    """The built-in tiny Qwen2 model (random weights, seed 0)."""
    return load_policy("tiny", seed=0)


@pytest.fixture
def prefix_prompts() -> list[list[int]]:
    """Seven token-id prompts: two 120-token heads each with suffixes of 0, 5 and 10 tokens,
    and one 40-token prompt that shares nothing with them."""
    gen = torch.Generator().manual_seed(0)
    heads = [torch.randint(3, 500, (120,), generator=gen).tolist() for _ in range(2)]
    out = [
        h + torch.randint(3, 500, (r * 5,), generator=gen).tolist() for h in heads for r in range(3)
    ]
    return [*out, torch.randint(3, 500, (40,), generator=gen).tolist()]
