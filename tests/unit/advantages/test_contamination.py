"""The advantage-contamination figure: near 0 for SLCA, clearly positive for GRPO."""

import math

import torch

from slca_lightning.advantages import GRPORouter, SLCARouter, advantage_contamination
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.types import RewardOutput


def test_contamination_is_small_for_slca_and_large_for_grpo():
    """Tool and summary rewards drawn independently: SLCA's tool credit is a function of the
    tool reward alone, so its correlation with the summary reward is sampling noise."""
    gen = torch.Generator().manual_seed(0)
    groups, g, t = 32, 8, 30
    mask = torch.zeros(groups * g, t, dtype=torch.bool)
    mask[:, 2:10] = True  # tool turn
    mask[:, 15:25] = True  # summary turn
    tool = (torch.rand(groups * g, generator=gen) > 0.5).float()
    summary = torch.rand(groups * g, generator=gen)
    gids = torch.arange(groups).repeat_interleave(g)
    rewards = RewardOutput(channels={"tool": tool, "summary": summary, "total": tool + summary})
    segs = mask_run_segments(mask)
    slca = advantage_contamination(summary, SLCARouter()(rewards, segs, gids), segs.masks["tool"])
    grpo = advantage_contamination(summary, GRPORouter()(rewards, segs, gids), segs.masks["tool"])
    assert abs(slca) < 0.15, slca
    assert grpo > 0.4, grpo


def test_contamination_literal_values():
    summary = torch.tensor([0.0, 1.0, 2.0])
    mask = torch.tensor([[1, 0], [1, 1], [0, 1]], dtype=torch.bool)
    adv = torch.tensor([[1.0, 9.0], [2.0, 4.0], [0.0, 5.0]])  # masked means 1, 3, 5
    assert abs(advantage_contamination(summary, adv, mask) - 1.0) < 1e-12
    assert abs(advantage_contamination(-summary, adv, mask) + 1.0) < 1e-12


def test_contamination_is_nan_when_undefined():
    mask = torch.tensor([[1, 0], [0, 0]], dtype=torch.bool)
    assert math.isnan(advantage_contamination(torch.zeros(2), torch.ones(2, 2), mask))
