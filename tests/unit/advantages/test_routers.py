"""Literal-tensor tests for every router, and the no-contamination property of SLCA.

One group of four rows, T = 6; assistant masks (1 = sampled):
    row 0: 0 1 1 0 1 1   K = 2 runs: tool {1, 2},    summary {4, 5}
    row 1: 0 1 0 1 1 0   K = 2 runs: tool {1},       summary {3, 4}
    row 2: 0 0 0 1 1 1   K = 1 run:  summary only    {3, 4, 5}
    row 3: 0 1 0 1 0 1   K = 3 runs: tool {1, 3},    summary {5}
Expected values are the hand-computed z-scores of the channel rewards below.
"""

import pytest
import torch

from slca_lightning.advantages import (
    ChannelRouter,
    GRPORouter,
    MTGRPORouter,
    RLTRRouter,
    SLCARouter,
    Term,
    ToolPORouter,
)
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.types import RewardOutput, Segments

MASK = torch.tensor(
    [
        [0, 1, 1, 0, 1, 1],
        [0, 1, 0, 1, 1, 0],
        [0, 0, 0, 1, 1, 1],
        [0, 1, 0, 1, 0, 1],
    ],
    dtype=torch.bool,
)
GROUPS = torch.zeros(4, dtype=torch.long)
TOOL = torch.tensor([1.0, 0.0, 0.0, 0.5])
SUMMARY = torch.tensor([0.2, 0.8, 0.5, 0.5])
REWARDS = RewardOutput(
    channels={
        "tool": TOOL,
        "summary": SUMMARY,
        "total": TOOL + SUMMARY,
        "action": torch.tensor([1.0, 0.0, 0.0, 0.5]),
        "rltr": torch.tensor([0.5, -0.2, 1.0, 0.8]),
    }
)
Z_TOTAL = [1.08838, -0.251165, -1.255823, 0.418608]
Z_TOOL = [0.999998, -0.999998, 0.0, 0.0]  # row 2 has no tool segment: not present
Z_SUM = [-1.22474, 1.22474, 0.0, 0.0]
Z_ACTION = [1.30558, -0.783348, -0.783348, 0.261116]
Z_RLTR = [-0.047601, -1.380428, 0.904418, 0.523611]


def expected(tool_vals, sum_vals):
    """Token advantages: tool value on tool tokens, summary value on summary tokens."""
    seg = mask_run_segments(MASK)
    tool = torch.tensor(tool_vals)[:, None] * seg.masks["tool"]
    summ = torch.tensor(sum_vals)[:, None] * seg.masks["summary"]
    return tool + summ


def run(router):
    return router(REWARDS, mask_run_segments(MASK), GROUPS)


def close(a, b):
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_grpo_gives_every_token_the_total_zscore():
    close(run(GRPORouter()), expected(Z_TOTAL, Z_TOTAL))


def test_slca_routes_tool_and_summary_channels_separately():
    close(run(SLCARouter()), expected(Z_TOOL, Z_SUM))


def test_slca_weights_apply_after_normalisation():
    adv = run(SLCARouter(tool_weight=2.0, summary_weight=0.5))
    close(adv, expected([2 * v for v in Z_TOOL], [0.5 * v for v in Z_SUM]))


def test_toolpo_adds_action_term_on_tool_tokens_only():
    tool_vals = [t + a for t, a in zip(Z_TOTAL, Z_ACTION)]
    close(run(ToolPORouter()), expected(tool_vals, Z_TOTAL))
    tool_vals = [t + 0.5 * a for t, a in zip(Z_TOTAL, Z_ACTION)]
    close(run(ToolPORouter(action_weight=0.5)), expected(tool_vals, Z_TOTAL))


def test_rltr_only_tool_tokens_learn():
    close(run(RLTRRouter()), expected(Z_RLTR, [0.0] * 4))


def test_mtgrpo_adds_outcome_to_tool_tokens():
    tool_vals = [t + 0.5 * s for t, s in zip(Z_TOOL, Z_SUM)]
    close(run(MTGRPORouter(outcome_weight=0.5)), expected(tool_vals, Z_SUM))


@pytest.mark.parametrize(
    "router", [GRPORouter(), SLCARouter(), ToolPORouter(), RLTRRouter(), MTGRPORouter()]
)
def test_every_router_is_zero_outside_the_assistant_mask(router):
    adv = run(router)
    assert adv.shape == MASK.shape and adv.dtype == torch.float32
    assert torch.equal(adv[~MASK], torch.zeros(int((~MASK).sum())))
    assert any(k.startswith("adv/") for k in router.last_stats)


def test_norm_by_std_false_centres_only():
    adv = run(SLCARouter(norm_by_std=False))
    close(adv, expected([0.5, -0.5, 0.0, 0.0], [-0.3, 0.3, 0.0, 0.0]))


def test_stats_report_segment_advantages():
    router = SLCARouter()
    run(router)
    assert router.last_stats["adv/tool/max"] == pytest.approx(Z_TOOL[0], abs=1e-5)
    assert router.last_stats["adv/summary/min"] == pytest.approx(Z_SUM[0], abs=1e-5)


def test_missing_channel_names_router_and_channel():
    rewards = RewardOutput(channels={"tool": TOOL, "summary": SUMMARY, "total": TOOL})
    with pytest.raises(ValueError, match=r"RLTRRouter needs reward channel\(s\) \['rltr'\]"):
        RLTRRouter()(rewards, mask_run_segments(MASK), GROUPS)


def test_segment_without_rule_is_an_error():
    segs = Segments(masks={"whole": MASK}, present={"whole": MASK.any(1)})
    with pytest.raises(ValueError, match="no routing rule for segment"):
        SLCARouter()(REWARDS, segs, GROUPS)
    # GRPO accepts the single whole segment
    close(GRPORouter()(REWARDS, segs, GROUPS), torch.tensor(Z_TOTAL)[:, None] * MASK)


def test_mismatched_reward_shape_names_both_shapes():
    rewards = RewardOutput(channels={"total": torch.zeros(3)})
    with pytest.raises(ValueError, match=r"\(3,\).*\(4,\)"):
        GRPORouter()(rewards, mask_run_segments(MASK), GROUPS)


def test_nan_reward_names_the_row():
    rewards = RewardOutput(channels={"total": torch.tensor([0.0, 1.0, 0.5, float("nan")])})
    with pytest.raises(ValueError, match="at row 3"):
        GRPORouter()(rewards, mask_run_segments(MASK), GROUPS)


def test_empty_batch_and_group_of_one_give_zero_not_nan():
    empty = torch.zeros(0, 5, dtype=torch.bool)
    r0 = RewardOutput(channels={c: torch.zeros(0) for c in ("tool", "summary", "total")})
    adv = SLCARouter()(r0, mask_run_segments(empty), torch.zeros(0, dtype=torch.long))
    assert adv.shape == (0, 5)
    singles = torch.arange(4)  # G = 1: every row its own group
    for router in (GRPORouter(), SLCARouter(), MTGRPORouter()):
        adv = router(REWARDS, mask_run_segments(MASK), singles)
        assert torch.equal(adv, torch.zeros_like(adv))


def test_custom_table_is_one_config_away():
    router = ChannelRouter({"tool": [Term("tool", 1.0, "tool")], "summary": []})
    close(router(REWARDS, mask_run_segments(MASK), GROUPS), expected(Z_TOOL, [0.0] * 4))


# --- no advantage contamination -----------------------------------------------------


def _random_batch(seed, groups=3, g=6, t=40):
    gen = torch.Generator().manual_seed(seed)
    mask = torch.rand(groups * g, t, generator=gen) < 0.6
    mask[:, 0] = False
    tool = torch.rand(groups * g, generator=gen)
    summary = torch.rand(groups * g, generator=gen)
    gids = torch.arange(groups).repeat_interleave(g) * 1_000_003
    return mask, tool, summary, gids


def _adv(router, mask, tool, summary, gids):
    rewards = RewardOutput(channels={"tool": tool, "summary": summary, "total": tool + summary})
    return router(rewards, mask_run_segments(mask), gids)


@pytest.mark.parametrize("seed", range(5))
def test_summary_reward_never_reaches_tool_tokens(seed):
    mask, tool, summary, gids = _random_batch(seed)
    tool_tokens = mask_run_segments(mask).masks["tool"]
    assert bool(tool_tokens.any())
    new_summary = summary.flip(0) * 3.0 - 1.0  # change only the summary rewards
    slca_a = _adv(SLCARouter(), mask, tool, summary, gids)
    slca_b = _adv(SLCARouter(), mask, tool, new_summary, gids)
    assert torch.equal(slca_a[tool_tokens], slca_b[tool_tokens])  # bit-identical
    grpo_a = _adv(GRPORouter(), mask, tool, summary, gids)
    grpo_b = _adv(GRPORouter(), mask, tool, new_summary, gids)
    assert not torch.equal(grpo_a[tool_tokens], grpo_b[tool_tokens])


@pytest.mark.parametrize("seed", range(5))
def test_tool_reward_never_reaches_summary_tokens(seed):
    mask, tool, summary, gids = _random_batch(seed)
    summary_tokens = mask_run_segments(mask).masks["summary"]
    new_tool = 1.0 - tool
    slca_a = _adv(SLCARouter(), mask, tool, summary, gids)
    slca_b = _adv(SLCARouter(), mask, new_tool, summary, gids)
    assert torch.equal(slca_a[summary_tokens], slca_b[summary_tokens])
    grpo_a = _adv(GRPORouter(), mask, tool, summary, gids)
    grpo_b = _adv(GRPORouter(), mask, new_tool, summary, gids)
    assert not torch.equal(grpo_a[summary_tokens], grpo_b[summary_tokens])
