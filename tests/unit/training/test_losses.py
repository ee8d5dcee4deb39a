"""Unit tests of slca_lightning.training.losses: literal tensors with hand-computed values."""

from __future__ import annotations

import math

import pytest
import torch

from slca_lightning.training.losses import (
    AGGREGATION_ALIASES,
    AGGREGATION_MODES,
    aggregate,
    clipped_surrogate,
    k3_kl,
    policy_loss,
)

LN2 = math.log(2.0)
K3_LN2 = 2.0 - LN2 - 1.0  # k3 at ref − logp = ln 2: e^{ln 2} − ln 2 − 1 = 0.306853

T_ = True
F_ = False


def lit(*rows):
    return torch.tensor(rows, dtype=torch.float32)


def ratios_to_logprobs(*ratios):
    """Log-probs whose ratio to an old log-prob of 0 is exactly ``ratios``."""
    return torch.log(torch.tensor(ratios, dtype=torch.float32)).unsqueeze(0)  # [1, T]


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32),
        torch.as_tensor(expected, dtype=torch.float32),
        atol=tol,
        rtol=0,
    )


# --------------------------------------------------------------------------------------
# clipped_surrogate
# --------------------------------------------------------------------------------------


class TestClippedSurrogate:
    def test_positive_advantage_clips_high_only(self):
        # ratios 1, 1.5, 0.5 with A = +2, eps 0.2:
        #   r=1   -> −min(2, 2)        = −2
        #   r=1.5 -> −min(3, 1.2·2)    = −2.4   (high clip)
        #   r=0.5 -> −min(1, 0.8·2)    = −1     (unclipped side)
        lp = ratios_to_logprobs(1.0, 1.5, 0.5).requires_grad_()
        loss, stats = clipped_surrogate(
            lp, torch.zeros(1, 3), torch.tensor([2.0]), torch.ones(1, 3, dtype=torch.bool)
        )
        close(loss, [[-2.0, -2.4, -1.0]])
        close(stats["clip_frac_high"], 1 / 3)
        close(stats["clip_frac_low"], 0.0)
        close(stats["ratio_mean"], 1.0)
        (grad,) = torch.autograd.grad(loss.sum(), lp)
        # d(−A·r)/d logp = −A·r; the clipped token has no gradient
        close(grad, [[-2.0, 0.0, -1.0]])

    def test_negative_advantage_clips_low_only(self):
        # A = −1: r=1 -> 1; r=1.5 -> −min(−1.5, −1.2) = 1.5; r=0.5 -> −min(−0.5, −0.8) = 0.8
        lp = ratios_to_logprobs(1.0, 1.5, 0.5).requires_grad_()
        loss, stats = clipped_surrogate(
            lp, torch.zeros(1, 3), torch.tensor([-1.0]), torch.ones(1, 3, dtype=torch.bool)
        )
        close(loss, [[1.0, 1.5, 0.8]])
        close(stats["clip_frac_low"], 1 / 3)
        close(stats["clip_frac_high"], 0.0)
        close(stats["clip_frac"], 1 / 3)
        (grad,) = torch.autograd.grad(loss.sum(), lp)
        close(grad, [[1.0, 1.5, 0.0]])

    def test_asymmetric_eps(self):
        # eps_low 0.1, eps_high 0.3: A=+1, r=1.5 -> −1.3; A=−1, r=0.5 -> 0.9
        lp = torch.log(lit([1.5, 1.0], [1.0, 0.5]))
        adv = torch.tensor([1.0, -1.0])
        mask = torch.ones(2, 2, dtype=torch.bool)
        loss, stats = clipped_surrogate(lp, torch.zeros(2, 2), adv, mask, eps_low=0.1, eps_high=0.3)
        close(loss, [[-1.3, -1.0], [1.0, 0.9]])
        close(stats["clip_frac_high"], 0.25)
        close(stats["clip_frac_low"], 0.25)

    def test_dual_clip_caps_negative_advantage_loss(self):
        # A = −1, c = 3: r=4 -> −min(−4, −1.2) = 4 -> min(4, 3) = 3 (dual clip active)
        lp = ratios_to_logprobs(1.0, 4.0, 0.5).requires_grad_()
        mask = torch.ones(1, 3, dtype=torch.bool)
        loss, stats = clipped_surrogate(
            lp, torch.zeros(1, 3), torch.tensor([-1.0]), mask, dual_clip=3.0
        )
        close(loss, [[1.0, 3.0, 0.8]])
        close(stats["dual_clip_frac"], 1 / 3)
        (grad,) = torch.autograd.grad(loss.sum(), lp)
        close(grad, [[1.0, 0.0, 0.0]])
        # without the dual clip the runaway token costs its full ratio
        loss, stats = clipped_surrogate(lp, torch.zeros(1, 3), torch.tensor([-1.0]), mask)
        close(loss, [[1.0, 4.0, 0.8]])
        close(stats["dual_clip_frac"], 0.0)

    def test_dual_clip_leaves_positive_advantages_alone(self):
        lp = ratios_to_logprobs(1.0, 4.0, 0.5)
        mask = torch.ones(1, 3, dtype=torch.bool)
        loss, _ = clipped_surrogate(lp, torch.zeros(1, 3), torch.tensor([1.0]), mask, dual_clip=3.0)
        close(loss, [[-1.0, -1.2, -0.5]])

    def test_per_token_advantages(self):
        lp = ratios_to_logprobs(1.0, 1.5, 0.5)
        adv = lit([2.0, -1.0, -1.0])
        loss, _ = clipped_surrogate(lp, torch.zeros(1, 3), adv, torch.ones(1, 3, dtype=torch.bool))
        close(loss, [[-2.0, 1.5, 0.8]])

    def test_masked_tokens_get_zero_loss_and_are_not_counted(self):
        lp = ratios_to_logprobs(1.0, 1.5, 0.5).requires_grad_()
        old = torch.tensor([[0.0, 0.0, -math.inf]])  # garbage in padding
        mask = torch.tensor([[T_, T_, F_]])
        loss, stats = clipped_surrogate(lp, old, torch.tensor([2.0]), mask)
        close(loss, [[-2.0, -2.4, 0.0]])
        close(stats["clip_frac_high"], 0.5)
        close(stats["ratio_mean"], 1.25)
        (grad,) = torch.autograd.grad(loss.sum(), lp)
        assert torch.isfinite(grad).all()

    def test_rejects_bad_dual_clip_and_shapes(self):
        lp = torch.zeros(1, 3)
        mask = torch.ones(1, 3, dtype=torch.bool)
        with pytest.raises(ValueError, match="dual_clip"):
            clipped_surrogate(lp, lp, torch.ones(1), mask, dual_clip=0.5)
        with pytest.raises(ValueError, match=r"\(1, 2\).*\(1, 3\)"):
            clipped_surrogate(lp, torch.zeros(1, 2), torch.ones(1), mask)


# --------------------------------------------------------------------------------------
# k3_kl
# --------------------------------------------------------------------------------------


class TestK3:
    def test_zero_when_equal(self):
        lp = lit([-0.5, -1.0, -3.0])
        close(k3_kl(lp, lp.clone()), [[0.0, 0.0, 0.0]])

    def test_literal_values(self):
        # ref − logp = ln 2, −1, 1: 2 − ln2 − 1, e^{−1} + 1 − 1, e − 1 − 1
        lp = lit([0.0, 0.0, 0.0])
        ref = lit([LN2, -1.0, 1.0])
        close(k3_kl(lp, ref), [[K3_LN2, math.exp(-1.0), math.e - 2.0]])

    def test_nonnegative_and_grad(self):
        lp = lit([0.0, -1.0, -2.0]).requires_grad_()
        ref = lit([LN2, -1.0, -1.0])
        kl = k3_kl(lp, ref)
        assert (kl >= 0).all()
        (grad,) = torch.autograd.grad(kl.sum(), lp)
        # d/d logp [e^{ref−logp} − (ref−logp) − 1] = 1 − e^{ref−logp}
        close(grad, [[1.0 - 2.0, 0.0, 1.0 - math.e]])

    def test_shape_mismatch(self):
        with pytest.raises(ValueError, match=r"\(1, 2\).*\(1, 3\)"):
            k3_kl(torch.zeros(1, 3), torch.zeros(1, 2))


# --------------------------------------------------------------------------------------
# aggregate
# --------------------------------------------------------------------------------------

VALUES = lit([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])
MASK = torch.tensor([[T_, T_, F_], [T_, F_, F_]])


class TestAggregate:
    @pytest.mark.parametrize(
        ("mode", "expected"),
        [
            ("token-mean", 7 / 3),  # (1 + 2 + 4) / 3 tokens
            ("seq-mean-token-mean", 2.75),  # mean(1.5, 4)
            ("seq-mean-token-sum", 3.5),  # mean(3, 4)
            ("seq-mean-token-sum-norm", 7 / 6),  # 7 / (2 rows · T=3)
        ],
    )
    def test_modes(self, mode, expected):
        close(aggregate(VALUES, MASK, mode), expected)

    def test_token_mean_is_default(self):
        close(aggregate(VALUES, MASK), 7 / 3)

    def test_dr_grpo_max_len(self):
        close(aggregate(VALUES, MASK, "seq-mean-token-sum-norm", max_len=7), 0.5)  # 7 / (2·7)

    @pytest.mark.parametrize(
        ("mode", "expected"),
        [
            ("token-mean", 7 / 3),
            ("seq-mean-token-mean", 2.75),  # the empty row is left out of the mean
            ("seq-mean-token-sum", 7 / 3),  # (3 + 4 + 0) / 3 rows
            ("seq-mean-token-sum-norm", 7 / 9),  # 7 / (3 · 3)
        ],
    )
    def test_empty_row(self, mode, expected):
        values = torch.cat([VALUES, lit([7.0, 8.0, 9.0])])
        mask = torch.cat([MASK, torch.tensor([[F_, F_, F_]])])
        close(aggregate(values, mask, mode), expected)

    @pytest.mark.parametrize(("alias", "target"), sorted(AGGREGATION_ALIASES.items()))
    def test_aliases(self, alias, target):
        close(aggregate(VALUES, MASK, alias), aggregate(VALUES, MASK, target))

    def test_alias_table(self):
        assert AGGREGATION_ALIASES == {
            "grpo": "seq-mean-token-mean",
            "dr_grpo": "seq-mean-token-sum-norm",
            "dapo": "token-mean",
            "bnpo": "token-mean",
        }

    def test_unknown_mode_lists_valid_ones(self):
        with pytest.raises(ValueError, match="unknown aggregation mode 'mean'") as info:
            aggregate(VALUES, MASK, "mean")
        for mode in (*AGGREGATION_MODES, *AGGREGATION_ALIASES):
            assert mode in str(info.value)

    @pytest.mark.parametrize("mode", [*AGGREGATION_MODES, *AGGREGATION_ALIASES])
    def test_all_zero_mask_gives_zero_with_grad(self, mode):
        values = VALUES.clone().requires_grad_()
        mask = torch.zeros(2, 3, dtype=torch.bool)
        out = aggregate(values, mask, mode)
        assert out.item() == 0.0
        (grad,) = torch.autograd.grad(out, values)
        assert torch.equal(grad, torch.zeros(2, 3))

    @pytest.mark.parametrize("mode", AGGREGATION_MODES)
    def test_off_mask_inf_and_nan_are_ignored(self, mode):
        values = VALUES.clone()
        values[0, 2] = math.inf
        values[1, 1] = math.nan
        values.requires_grad_()
        out = aggregate(values, MASK, mode)
        close(out, aggregate(VALUES, MASK, mode))
        (grad,) = torch.autograd.grad(out, values)
        assert torch.isfinite(grad).all()
        assert grad[0, 2] == 0 and grad[1, 1] == 0

    def test_shape_and_dtype_errors(self):
        with pytest.raises(ValueError, match=r"\(2, 2\).*\(2, 3\)"):
            aggregate(VALUES, torch.ones(2, 2, dtype=torch.bool))
        with pytest.raises(TypeError, match="bool"):
            aggregate(VALUES, MASK.long())


# --------------------------------------------------------------------------------------
# policy_loss
# --------------------------------------------------------------------------------------


def _policy_inputs():
    lp = ratios_to_logprobs(1.0, 1.5, 0.5).requires_grad_()  # ratios to old = 0
    return lp, torch.zeros(1, 3), torch.tensor([1.0]), torch.ones(1, 3, dtype=torch.bool)


class TestPolicyLoss:
    def test_surrogate_only(self):
        # A = 1: per-token [−1, −1.2, −0.5], token-mean −0.9
        lp, old, adv, mask = _policy_inputs()
        loss, m = policy_loss(lp, old, adv, mask)
        close(loss, -0.9)
        close(m["pg_loss"], -0.9)
        close(m["loss"], -0.9)
        assert m["clip_frac_high"] == pytest.approx(1 / 3)
        assert m["clip_frac_low"] == 0.0
        assert m["ratio_mean"] == pytest.approx(1.0)
        assert m["num_tokens"] == 3.0
        assert "kl_mean" not in m and "entropy_mean" not in m
        assert all(isinstance(v, float) for v in m.values())

    def test_with_kl(self):
        lp, old, adv, mask = _policy_inputs()
        ref = lp.detach() + LN2  # k3 = 2 − ln2 − 1 on every token
        loss, m = policy_loss(lp, old, adv, mask, ref_logprobs=ref, kl_coef=0.1)
        close(loss, -0.9 + 0.1 * K3_LN2)
        assert m["kl_mean"] == pytest.approx(K3_LN2, abs=1e-6)
        assert m["pg_loss"] == pytest.approx(-0.9, abs=1e-6)

    def test_kl_metric_reported_even_at_zero_coef(self):
        lp, old, adv, mask = _policy_inputs()
        loss, m = policy_loss(lp, old, adv, mask, ref_logprobs=lp.detach() + LN2)
        close(loss, -0.9)
        assert m["kl_mean"] == pytest.approx(K3_LN2, abs=1e-6)

    def test_with_entropy_bonus(self):
        lp, old, adv, mask = _policy_inputs()
        ent = lit([1.0, 2.0, 3.0]).requires_grad_()
        loss, m = policy_loss(lp, old, adv, mask, entropy=ent, entropy_coef=0.01)
        close(loss, -0.9 - 0.01 * 2.0)
        assert m["entropy_mean"] == pytest.approx(2.0)
        (grad,) = torch.autograd.grad(loss, ent)
        close(grad, [[-0.01 / 3] * 3])

    def test_aggregation_and_dual_clip_pass_through(self):
        # two rows: [−1, −1.2, −0.5] (A=+1, all tokens) and A=−1 with r=4 dual-clipped at 3,
        # then masked to its first two tokens: [1, 3]
        lp = torch.cat([ratios_to_logprobs(1.0, 1.5, 0.5), ratios_to_logprobs(1.0, 4.0, 0.5)])
        adv = torch.tensor([1.0, -1.0])
        mask = torch.tensor([[T_, T_, T_], [T_, T_, F_]])
        loss, m = policy_loss(lp, torch.zeros(2, 3), adv, mask, dual_clip=3.0, aggregation="grpo")
        close(loss, (-0.9 + 2.0) / 2)
        assert m["dual_clip_frac"] == pytest.approx(1 / 5)
        loss, _ = policy_loss(lp, torch.zeros(2, 3), adv, mask, dual_clip=3.0)
        close(loss, (-2.7 + 4.0) / 5)

    def test_zero_mask_is_zero_not_nan(self):
        lp, old, adv, _ = _policy_inputs()
        mask = torch.zeros(1, 3, dtype=torch.bool)
        for mode in AGGREGATION_MODES:
            loss, m = policy_loss(
                lp, old, adv, mask, ref_logprobs=old, kl_coef=0.1, aggregation=mode
            )
            assert loss.item() == 0.0
            assert all(math.isfinite(v) for v in m.values())
            (grad,) = torch.autograd.grad(loss, lp)
            assert torch.equal(grad, torch.zeros(1, 3))

    def test_padding_garbage_does_not_leak(self):
        lp = torch.tensor([[-0.5, -1.0, 0.0]], requires_grad=True)
        old = torch.tensor([[-0.5, -1.0, -math.inf]])
        ref = torch.tensor([[-0.5, -1.0, math.nan]])
        mask = torch.tensor([[T_, T_, F_]])
        loss, m = policy_loss(lp, old, torch.tensor([1.0]), mask, ref_logprobs=ref, kl_coef=0.1)
        close(loss, -1.0)
        (grad,) = torch.autograd.grad(loss, lp)
        assert torch.isfinite(grad).all()
        assert all(math.isfinite(v) for v in m.values())

    @pytest.mark.parametrize(
        ("name", "kwargs"),
        [
            ("old_logprobs", {"old_logprobs": torch.zeros(1, 2)}),
            ("ref_logprobs", {"ref_logprobs": torch.zeros(1, 2)}),
            ("entropy", {"entropy": torch.zeros(1, 2)}),
            ("mask", {"mask": torch.ones(1, 2, dtype=torch.bool)}),
        ],
    )
    def test_shape_mismatch_names_both_shapes(self, name, kwargs):
        lp, old, adv, mask = _policy_inputs()
        args = {"logprobs": lp, "old_logprobs": old, "advantages": adv, "mask": mask, **kwargs}
        with pytest.raises(
            ValueError, match=rf"{name} has shape \(1, 2\) but logprobs has shape \(1, 3\)"
        ):
            policy_loss(**args)

    def test_advantage_shape_mismatch(self):
        lp, old, _, mask = _policy_inputs()
        with pytest.raises(ValueError, match=r"advantages has shape \(2,\).*\(1, 3\)"):
            policy_loss(lp, old, torch.ones(2), mask)

    @pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
    def test_nonfinite_advantages_name_first_bad_row(self, bad):
        lp = torch.zeros(4, 3)
        adv = torch.tensor([0.5, 1.0, bad, bad])
        with pytest.raises(ValueError, match="first bad row is 2"):
            policy_loss(lp, lp, adv, torch.ones(4, 3, dtype=torch.bool))
        adv_tok = torch.zeros(4, 3)
        adv_tok[1, 2] = bad
        with pytest.raises(ValueError, match="first bad row is 1"):
            policy_loss(lp, lp, adv_tok, torch.ones(4, 3, dtype=torch.bool))

    def test_missing_ref_or_entropy(self):
        lp, old, adv, mask = _policy_inputs()
        with pytest.raises(ValueError, match="ref_logprobs"):
            policy_loss(lp, old, adv, mask, kl_coef=0.1)
        with pytest.raises(ValueError, match="entropy"):
            policy_loss(lp, old, adv, mask, entropy_coef=0.1)

    def test_unknown_aggregation(self):
        lp, old, adv, mask = _policy_inputs()
        with pytest.raises(ValueError, match="valid modes"):
            policy_loss(lp, old, adv, mask, aggregation="sum")

    def test_non_bool_mask_rejected(self):
        lp, old, adv, mask = _policy_inputs()
        with pytest.raises(TypeError, match="bool"):
            policy_loss(lp, old, adv, mask.long())

    def test_on_policy_ratio_is_one(self):
        lp, _, adv, mask = _policy_inputs()
        loss, m = policy_loss(lp, lp.detach(), adv, mask)
        assert m["ratio_mean"] == 1.0 and m["clip_frac"] == 0.0
        close(loss, -1.0)
        (grad,) = torch.autograd.grad(loss, lp)
        close(grad, [[-1 / 3] * 3])  # −A/N per token
