"""Unit tests of slca_lightning.logprobs.chunked: chunked token log-probs and entropies
against a float64 reference, their gradients, and that no float32 ``[B, T, V]`` exists."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils._python_dispatch import TorchDispatchMode

from slca_lightning.logprobs.chunked import (
    token_entropy,
    token_logprobs,
    token_logprobs_from_hidden,
)


def close(actual, expected, tol=1e-6):
    torch.testing.assert_close(
        torch.as_tensor(actual, dtype=torch.float32),
        torch.as_tensor(expected, dtype=torch.float32),
        atol=tol,
        rtol=0,
    )


# --------------------------------------------------------------------------------------
# token_logprobs
# --------------------------------------------------------------------------------------


def _reference(logits, targets):
    logp_all = torch.log_softmax(logits.float(), dim=-1)  # [B, T, V]
    chosen = logp_all.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return chosen, entropy


def _random(B=3, T=7, V=50, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(B, T, V, generator=g)).to(dtype)
    targets = torch.randint(0, V, (B, T), generator=g)
    return logits, targets


class _MaxFloat32(TorchDispatchMode):
    """Records the largest float32 tensor any aten op produces."""

    def __init__(self):
        super().__init__()
        self.max_numel = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor) and t.dtype == torch.float32:
                self.max_numel = max(self.max_numel, t.numel())
        return out


class TestTokenLogprobs:
    @pytest.mark.parametrize("chunk_size", [1, 4, 21, 1000])
    def test_matches_log_softmax_float32(self, chunk_size):
        logits, targets = _random()
        out = token_logprobs(logits, targets, chunk_size=chunk_size)
        assert out.dtype == torch.float32 and out.shape == (3, 7)
        close(out, _reference(logits, targets)[0], tol=1e-5)

    def test_matches_log_softmax_bf16(self):
        logits, targets = _random(dtype=torch.bfloat16)
        out = token_logprobs(logits, targets, chunk_size=4)
        assert logits.dtype == torch.bfloat16  # not up-cast in place
        assert out.dtype == torch.float32
        close(out, _reference(logits, targets)[0], tol=1e-5)

    def test_gradient_matches_autograd_float32(self):
        logits, targets = _random()
        weights = torch.randn(3, 7)
        a = logits.clone().requires_grad_()
        b = logits.clone().requires_grad_()
        (ga,) = torch.autograd.grad((token_logprobs(a, targets, chunk_size=4) * weights).sum(), a)
        (gb,) = torch.autograd.grad((_reference(b, targets)[0] * weights).sum(), b)
        close(ga, gb, tol=1e-5)

    def test_gradient_bf16_keeps_dtype(self):
        logits, targets = _random(dtype=torch.bfloat16)
        weights = torch.randn(3, 7)
        a = logits.clone().requires_grad_()
        b = logits.clone().requires_grad_()
        (ga,) = torch.autograd.grad((token_logprobs(a, targets, chunk_size=4) * weights).sum(), a)
        (gb,) = torch.autograd.grad((_reference(b, targets)[0] * weights).sum(), b)
        assert ga.dtype == torch.bfloat16
        torch.testing.assert_close(ga.float(), gb.float(), atol=1e-2, rtol=1e-2)

    def test_gradcheck_float64(self):
        g = torch.Generator().manual_seed(1)
        logits = torch.randn(2, 3, 5, dtype=torch.float64, generator=g, requires_grad=True)
        targets = torch.randint(0, 5, (2, 3), generator=g)
        assert torch.autograd.gradcheck(
            lambda z: token_logprobs(z, targets, chunk_size=2), (logits,)
        )
        assert torch.autograd.gradcheck(
            lambda z: token_logprobs(z, targets, chunk_size=4, return_entropy=True), (logits,)
        )

    def test_entropy_matches_and_is_differentiable(self):
        logits, targets = _random()
        a = logits.clone().requires_grad_()
        b = logits.clone().requires_grad_()
        lp, ent = token_logprobs(a, targets, chunk_size=5, return_entropy=True)
        ref_lp, ref_ent = _reference(b, targets)
        close(lp, ref_lp, tol=1e-5)
        close(ent, ref_ent, tol=1e-5)
        close(token_entropy(logits, chunk_size=5), ref_ent, tol=1e-5)
        w1, w2 = torch.randn(3, 7), torch.randn(3, 7)
        (ga,) = torch.autograd.grad((lp * w1 + ent * w2).sum(), a)
        (gb,) = torch.autograd.grad((ref_lp * w1 + ref_ent * w2).sum(), b)
        close(ga, gb, tol=1e-5)

    def test_non_contiguous_slice(self):
        logits, targets = _random(T=9)
        big = logits.clone().requires_grad_()
        sliced = big[:, 2:6]  # what a causal-LM caller passes: not viewable as [B*T, V]
        out = token_logprobs(sliced, targets[:, 2:6], chunk_size=3)
        close(out, _reference(logits[:, 2:6], targets[:, 2:6])[0], tol=1e-5)
        out.sum().backward()
        assert big.grad[:, :2].abs().max() == 0 and big.grad[:, 6:].abs().max() == 0

    def test_never_builds_float32_bt_v(self):
        B, T, V, chunk = 3, 8, 64, 4
        logits, targets = _random(B, T, V, dtype=torch.bfloat16)
        logits.requires_grad_()
        with _MaxFloat32() as naive:
            _reference(logits, targets)[0].sum().backward()
        assert naive.max_numel >= B * T * V  # the probe does see the naive tensor
        logits.grad = None
        with _MaxFloat32() as probe:
            lp, ent = token_logprobs(logits, targets, chunk_size=chunk, return_entropy=True)
            (lp + ent).sum().backward()
        assert probe.max_numel <= chunk * V
        assert logits.grad.dtype == torch.bfloat16

    def test_input_validation(self):
        logits, targets = _random()
        with pytest.raises(ValueError, match=r"targets has shape \(3, 6\)"):
            token_logprobs(logits, targets[:, :6])
        with pytest.raises(ValueError, match="chunk_size"):
            token_logprobs(logits, targets, chunk_size=0)
        with pytest.raises(TypeError, match="integer"):
            token_logprobs(logits, targets.float())

    @settings(max_examples=25, deadline=None)
    @given(
        B=st.integers(1, 3),
        T=st.integers(1, 6),
        V=st.integers(2, 17),
        chunk=st.integers(1, 9),
        seed=st.integers(0, 10_000),
    )
    def test_property_matches_reference(self, B, T, V, chunk, seed):
        logits, targets = _random(B, T, V, seed=seed)
        lp, ent = token_logprobs(logits, targets, chunk_size=chunk, return_entropy=True)
        ref_lp, ref_ent = _reference(logits, targets)
        close(lp, ref_lp, tol=1e-5)
        close(ent, ref_ent, tol=1e-5)


class TestTokenLogprobsFromHidden:
    def _inputs(self, dtype=torch.float32):
        g = torch.Generator().manual_seed(3)
        hidden = torch.randn(2, 5, 8, generator=g).to(dtype)
        weight = (0.5 * torch.randn(40, 8, generator=g)).to(dtype)
        bias = (0.1 * torch.randn(40, generator=g)).to(dtype)
        targets = torch.randint(0, 40, (2, 5), generator=g)
        return hidden, weight, bias, targets

    def test_matches_full_logits(self):
        hidden, weight, bias, targets = self._inputs()
        lp = token_logprobs_from_hidden(hidden, weight, targets, chunk_size=3)
        close(lp, _reference(hidden @ weight.t(), targets)[0], tol=1e-5)
        lp_b, ent = token_logprobs_from_hidden(
            hidden, weight, targets, chunk_size=4, lm_head_bias=bias, return_entropy=True
        )
        ref_lp, ref_ent = _reference(hidden @ weight.t() + bias, targets)
        close(lp_b, ref_lp, tol=1e-5)
        close(ent, ref_ent, tol=1e-5)

    def test_gradients_match(self):
        hidden, weight, bias, targets = self._inputs()
        params = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        ref_params = [t.clone().requires_grad_() for t in (hidden, weight, bias)]
        lp, ent = token_logprobs_from_hidden(
            params[0], params[1], targets, chunk_size=3, lm_head_bias=params[2], return_entropy=True
        )
        ref_lp, ref_ent = _reference(ref_params[0] @ ref_params[1].t() + ref_params[2], targets)
        w = torch.randn(2, 5)
        grads = torch.autograd.grad((lp * w + 0.3 * ent).sum(), params)
        ref_grads = torch.autograd.grad((ref_lp * w + 0.3 * ref_ent).sum(), ref_params)
        for g, rg in zip(grads, ref_grads, strict=True):
            close(g, rg, tol=1e-5)

    def test_never_builds_full_logits(self):
        hidden, weight, _, targets = self._inputs()
        hidden.requires_grad_()
        weight.requires_grad_()
        with _MaxFloat32() as probe:
            token_logprobs_from_hidden(hidden, weight, targets, chunk_size=2).sum().backward()
        assert probe.max_numel < 2 * 5 * 40  # B·T·V
        assert hidden.grad.shape == hidden.shape and weight.grad.shape == weight.shape

    def test_bf16(self):
        hidden, weight, _, targets = self._inputs(torch.bfloat16)
        lp = token_logprobs_from_hidden(hidden, weight, targets, chunk_size=3)
        assert lp.dtype == torch.float32
        close(lp, _reference(hidden @ weight.t(), targets)[0], tol=1e-5)

    def test_shape_errors(self):
        hidden, weight, _, targets = self._inputs()
        with pytest.raises(ValueError, match=r"lm_head_weight has shape \(40, 7\)"):
            token_logprobs_from_hidden(hidden, weight[:, :7], targets)
        with pytest.raises(ValueError, match=r"targets has shape \(2, 4\)"):
            token_logprobs_from_hidden(hidden, weight, targets[:, :4])
