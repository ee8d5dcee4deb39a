"""Truncated importance weights between trainer and engine log-probs (literal tensors)."""

import math

import pytest
import torch

from slca_lightning.training.losses import logprob_mismatch, policy_loss, truncated_is_weight


def test_truncated_is_weight_is_exp_delta_capped_and_zero_off_mask():
    trainer = torch.tensor([[-1.0, -2.0, -0.5]])
    engine = torch.tensor([[-1.5, -1.0, -3.0]])
    mask = torch.tensor([[True, True, False]])
    w = truncated_is_weight(trainer, engine, mask, cap=1.5)
    # exp(0.5)=1.6487 -> capped 1.5; exp(-1)=0.3679; off-mask -> 0
    assert torch.allclose(w, torch.tensor([[1.5, math.exp(-1.0), 0.0]]))
    assert not w.requires_grad


def test_logprob_mismatch_is_mean_abs_delta_on_mask():
    a = torch.tensor([[-1.0, -2.0, -0.5]])
    b = torch.tensor([[-1.5, -1.0, -3.0]])
    mask = torch.tensor([[True, True, False]])
    assert logprob_mismatch(a, b, mask) == pytest.approx(0.75)
    assert logprob_mismatch(a, b, torch.zeros_like(mask)) == 0.0


def test_is_weights_scale_each_tokens_surrogate():
    logp = torch.tensor([[-1.0, -1.0]], requires_grad=True)
    adv = torch.tensor([1.0])
    mask = torch.tensor([[True, True]])
    w = torch.tensor([[2.0, 0.0]])
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, is_weights=w)
    loss.backward()
    # token-mean of -(w·r·A) with r = 1: -(2 + 0) / 2; d/dlogp = -w·r·A / 2
    assert loss.item() == pytest.approx(-1.0)
    assert torch.allclose(logp.grad, torch.tensor([[-1.0, 0.0]]))


def test_bad_cap_and_shape_are_named():
    x = torch.zeros(1, 2)
    m = torch.ones(1, 2, dtype=torch.bool)
    with pytest.raises(ValueError, match="tis_cap"):
        truncated_is_weight(x, x, m, cap=0.0)
    with pytest.raises(ValueError, match="engine_logprobs"):
        truncated_is_weight(x, torch.zeros(1, 3), m, cap=2.0)
