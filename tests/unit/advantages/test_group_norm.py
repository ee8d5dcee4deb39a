"""Literal-tensor tests for the presence-filtered group z-score (METHOD §5)."""

import math

import pytest
import torch

from slca_lightning.advantages import group_normalize

S2 = math.sqrt(2.0) / 2.0  # z-score of a 2-row group: ±(0.5 / sqrt(0.5))


def test_single_group_bessel_std():
    adv = group_normalize(torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0, 0, 0]))
    # mean 2, Bessel std 1 -> (-1, 0, 1) / (1 + 1e-6)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 1.0]) / (1 + 1e-6))


def test_several_groups_are_independent():
    scores = torch.tensor([0.0, 1.0, 10.0, 30.0, 4.0])
    groups = torch.tensor([7, 7, 2, 2, 9])
    adv = group_normalize(scores, groups)
    # groups of two: ±sqrt(2)/2; singleton group 9 -> 0
    expected = torch.tensor([-S2, S2, -S2, S2, 0.0])
    torch.testing.assert_close(adv, expected, atol=1e-5, rtol=0)


def test_presence_filter_excludes_rows_from_stats_and_zeroes_them():
    scores = torch.tensor([1.0, 2.0, 100.0, 3.0])
    present = torch.tensor([True, True, False, True])
    adv = group_normalize(scores, torch.zeros(4, dtype=torch.long), present)
    torch.testing.assert_close(adv, torch.tensor([-1.0, 0.0, 0.0, 1.0]) / (1 + 1e-6))


def test_group_with_one_present_row_gets_zero():
    scores = torch.tensor([5.0, 1.0, 2.0])
    present = torch.tensor([True, False, False])
    adv = group_normalize(scores, torch.tensor([1, 1, 1]), present)
    assert torch.equal(adv, torch.zeros(3))


def test_singleton_group_gets_zero_not_grpo_fallback():
    adv = group_normalize(torch.tensor([0.7]), torch.tensor([3]))
    assert torch.equal(adv, torch.zeros(1))


def test_all_equal_group_gets_exact_zero():
    # 0.1 is not representable: a naive mean would leave a rounding residue / eps blow-up
    adv = group_normalize(torch.full((7,), 0.1), torch.zeros(7, dtype=torch.long))
    assert torch.equal(adv, torch.zeros(7))


def test_long_group_ids_are_not_used_as_indices():
    big = torch.tensor([2**62, 2**62, -(2**40), -(2**40)])
    adv = group_normalize(torch.tensor([0.0, 1.0, 1.0, 0.0]), big)
    torch.testing.assert_close(adv, torch.tensor([-S2, S2, S2, -S2]), atol=1e-5, rtol=0)


def test_norm_by_std_false_only_centres():
    adv = group_normalize(
        torch.tensor([1.0, 2.0, 6.0]), torch.zeros(3, dtype=torch.long), norm_by_std=False
    )
    torch.testing.assert_close(adv, torch.tensor([-2.0, -1.0, 3.0]))


def test_batch_std_scope_divides_by_batch_std():
    scores = torch.tensor([0.0, 2.0, 10.0, 14.0])
    groups = torch.tensor([0, 0, 1, 1])
    adv = group_normalize(scores, groups, std_scope="batch")
    batch_std = scores.std().item()  # Bessel over all 4 rows
    expected = torch.tensor([-1.0, 1.0, -2.0, 2.0]) / (batch_std + 1e-6)
    torch.testing.assert_close(adv, expected)


def test_empty_batch_gives_empty_zeros():
    adv = group_normalize(torch.zeros(0), torch.zeros(0, dtype=torch.long))
    assert adv.shape == (0,) and adv.dtype == torch.float32


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_reward_names_the_row(bad):
    with pytest.raises(ValueError, match="at row 2"):
        group_normalize(torch.tensor([0.0, 1.0, bad]), torch.zeros(3, dtype=torch.long))


def test_mismatched_shapes_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(3,\).*\(2,\)"):
        group_normalize(torch.zeros(3), torch.zeros(2, dtype=torch.long))
    with pytest.raises(ValueError, match=r"present has shape \(2,\).*\(3,\)"):
        group_normalize(
            torch.zeros(3), torch.zeros(3, dtype=torch.long), torch.ones(2, dtype=torch.bool)
        )


def test_output_is_float32_and_finite_for_tiny_spread():
    adv = group_normalize(torch.tensor([1.0, 1.0 + 1e-7]), torch.zeros(2, dtype=torch.long))
    assert adv.dtype == torch.float32 and bool(torch.isfinite(adv).all())


def test_weight_negatives_scales_only_negative_advantages():
    from slca_lightning.advantages import weight_negatives

    adv = torch.tensor([[-2.0, 0.0, 1.5], [0.5, -0.1, 0.0]])
    out = weight_negatives(adv, 0.25)
    assert torch.equal(out, torch.tensor([[-0.5, 0.0, 1.5], [0.5, -0.025, 0.0]]))
    assert weight_negatives(adv, 1.0) is adv  # the paper: untouched
    assert torch.equal(weight_negatives(adv, 0.0), torch.tensor([[0.0, 0.0, 1.5], [0.5, 0.0, 0.0]]))
    for bad in (-0.5, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="negative_weight must be a finite number >= 0"):
            weight_negatives(adv, bad)
