"""The counterfactual summary-leakage diagnostic, router inputs on mixed devices, and the
ABC's default ``route``.

One group of four rows (the masks of ``test_routers.py``): rows 0, 1, 3 have tool tokens.
"""

import math

import pytest
import torch

from slca_lightning.advantages import (
    AdvantageRouter,
    GRPORouter,
    MTGRPORouter,
    RLTRRouter,
    RoutedAdvantages,
    SLCARouter,
    ToolPORouter,
    summary_leakage,
)
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.types import RewardOutput

MASK = torch.tensor(
    [[0, 1, 1, 0, 1, 1], [0, 1, 0, 1, 1, 0], [0, 0, 0, 1, 1, 1], [0, 1, 0, 1, 0, 1]],
    dtype=torch.bool,
)
GROUPS = torch.zeros(4, dtype=torch.long)
TOOL = torch.tensor([1.0, 0.0, 0.0, 0.5])
SUMMARY = torch.tensor([0.2, 0.8, 0.5, 0.1])


def rewards(summary=SUMMARY):
    return RewardOutput(
        channels={
            "tool": TOOL,
            "summary": summary,
            "total": TOOL + summary,
            "action": TOOL.clone(),
            "rltr": torch.tensor([0.5, -0.2, 1.0, 0.8]),
        }
    )


def leakage(router, seed=0, summary=SUMMARY, exclude=None):
    segs = mask_run_segments(MASK)
    r = rewards(summary)
    adv = router(r, segs, GROUPS)
    gen = torch.Generator().manual_seed(seed)
    return summary_leakage(router, r, segs, GROUPS, adv, exclude=exclude, generator=gen)


@pytest.mark.parametrize("router", [SLCARouter(), RLTRRouter()])
def test_routers_whose_tool_tokens_ignore_the_summary_leak_exactly_zero(router):
    for seed in range(5):
        assert leakage(router, seed) == 0.0


@pytest.mark.parametrize("router", [GRPORouter(), ToolPORouter(), MTGRPORouter()])
def test_routers_that_mix_the_summary_into_tool_credit_leak(router):
    values = [leakage(router, seed) for seed in range(8)]
    assert max(values) > 0.1  # some permutation (not the identity) moves tool credit


def test_leakage_is_the_relative_change_of_grpo_tool_advantages_by_hand():
    """Two rows with tool tokens in one group: the permutation that swaps their summaries
    flips GRPO's z(total) exactly when tool + summary swap order; compute it by hand."""
    mask = torch.tensor([[1, 0, 1], [1, 0, 1]], dtype=torch.bool)
    segs = mask_run_segments(mask)  # tool = token 0, summary = token 2, both rows
    groups = torch.zeros(2, dtype=torch.long)
    tool, summ = torch.tensor([0.0, 0.5]), torch.tensor([1.0, 0.0])
    r = RewardOutput(channels={"tool": tool, "summary": summ, "total": tool + summ})
    router = GRPORouter()
    adv = router(r, segs, groups)  # totals 1.0, 0.5 -> z = +0.7071, -0.7071
    # both permutations of two rows; find a seed that swaps and one that does not
    outcomes = set()
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        outcomes.add(round(summary_leakage(router, r, segs, groups, adv, generator=g), 5))
    # swapped: totals 0.0, 1.5 -> z = -0.7071, +0.7071: delta = 2·0.7071 per token,
    # ‖delta‖ / ‖adv‖ = 2.0; identity: 0.0
    assert outcomes == {0.0, 2.0}


def test_excluded_rows_keep_their_summary():
    """With every row but one excluded, nothing can be permuted: leakage 0 even for GRPO."""
    exclude = torch.tensor([True, True, False, True])
    assert leakage(GRPORouter(), exclude=exclude) == 0.0


def test_leakage_restores_the_routers_step_statistics():
    router = GRPORouter()
    segs = mask_run_segments(MASK)
    r = rewards()
    adv = router(r, segs, GROUPS)
    stats = dict(router.last_stats)
    summary_leakage(router, r, segs, GROUPS, adv, generator=torch.Generator().manual_seed(3))
    assert router.last_stats == stats


def test_leakage_is_nan_without_tool_credit():
    segs = mask_run_segments(torch.tensor([[0, 1, 1]], dtype=torch.bool))  # summary only
    r = RewardOutput(
        channels={"tool": torch.zeros(1), "summary": torch.ones(1), "total": torch.ones(1)}
    )
    adv = GRPORouter()(r, segs, torch.zeros(1, dtype=torch.long))
    assert math.isnan(summary_leakage(GRPORouter(), r, segs, torch.zeros(1, dtype=torch.long), adv))


def test_router_moves_masks_and_channels_to_the_group_ids_device():
    """The module routes with CPU group ids while segment masks may sit on the accelerator
    (a ``meta`` tensor stands in for it here: a device mismatch would raise)."""
    segs = mask_run_segments(MASK)
    segs.masks = {k: v.to("meta") for k, v in segs.masks.items()}
    segs.present = {k: v.to("meta") for k, v in segs.present.items()}
    with pytest.raises(NotImplementedError):
        # meta tensors cannot be copied to CPU: proves the router converts them first
        SLCARouter()(rewards(), segs, GROUPS)
    segs = mask_run_segments(MASK)
    ref = SLCARouter()(rewards(), segs, GROUPS)
    r = rewards()
    r.channels = {k: v.double() for k, v in r.channels.items()}
    assert torch.equal(SLCARouter()(r, segs, GROUPS), ref)


def test_abc_route_wraps_call_for_custom_routers():
    class Constant(AdvantageRouter):
        """Every sampled token gets 1 (a custom router implementing only ``__call__``)."""

        def __call__(self, rewards, segments, group_ids):
            self.last_stats = {"adv/const": 1.0}
            return sum(m.float() for m in segments.masks.values())

    routed = Constant().route(rewards(), mask_run_segments(MASK), GROUPS)
    assert isinstance(routed, RoutedAdvantages)
    assert torch.equal(routed.token_advantages, MASK.float())
    assert routed.stats == {"adv/const": 1.0}


def test_routers_log_statistics_per_channel_read():
    """ToolPO reads two channels (total, action): each gets its own z-score statistics,
    besides the per-segment ones; the action z-scores of TOOL over the whole group."""
    routed = ToolPORouter().route(rewards(), mask_run_segments(MASK), GROUPS)
    assert {"adv/channel/total/mean", "adv/channel/action/std", "adv/tool/mean"} <= set(
        routed.stats
    )
    z = (TOOL - TOOL.mean()) / (TOOL.std() + 1e-6)
    assert routed.stats["adv/channel/action/mean"] == pytest.approx(float(z.mean()), abs=1e-6)
    assert routed.stats["adv/channel/action/std"] == pytest.approx(
        float(z.std(unbiased=False)), rel=1e-5
    )
    slca = SLCARouter().route(rewards(), mask_run_segments(MASK), GROUPS).stats
    assert "adv/channel/action/mean" not in slca and "adv/channel/summary/mean" in slca


def test_leakage_is_nan_when_tool_credit_is_rounding_noise():
    """A step whose tool tokens carry ~no credit (here GRPO's, scaled to an RMS of ~1e-5)
    reports NaN, not the huge ratio of a permutation's change over ~0."""
    segs = mask_run_segments(MASK)
    r = rewards()
    router = GRPORouter()
    adv = router(r, segs, GROUPS) * 1e-5
    gen = torch.Generator().manual_seed(0)
    assert math.isnan(summary_leakage(router, r, segs, GROUPS, adv, generator=gen))
    # at full scale the same step is a finite ratio
    full = summary_leakage(router, r, segs, GROUPS, adv * 1e5, generator=gen)
    assert math.isfinite(full)
