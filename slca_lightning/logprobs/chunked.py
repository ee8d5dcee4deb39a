"""Chunked token log-probabilities: ``log π(chosen token)`` without a float32 ``[B, T, V]``.

:func:`token_logprobs` takes ``gathered logit − logsumexp`` one chunk of rows at a time, so
the float32 ``[B, T, V]`` tensor a plain ``log_softmax(logits.float())`` builds never exists
(ARCHITECTURE, "The training step", point 4). Its backward (a custom autograd Function)
recomputes the softmax chunk by chunk from the saved logits, kept in their own dtype, and
the saved per-token logsumexp. :func:`token_logprobs_from_hidden` goes one step further
and never builds the logits either, projecting hidden states through the LM head one chunk
at a time. Reductions run in float32 (float64 inputs, as used by ``gradcheck``, in float64).
"""

from __future__ import annotations

from collections.abc import Iterator

import torch
import torch.utils.checkpoint
from torch import Tensor

__all__ = ["DEFAULT_CHUNK_SIZE", "token_entropy", "token_logprobs", "token_logprobs_from_hidden"]

#: Default number of rows (token positions) of the flattened ``[B*T, V]`` logits handled
#: at once. Peak extra memory is about ``3 · chunk_size · V · 4`` bytes (the float32
#: chunk, its softmax and, in backward, its gradient).
DEFAULT_CHUNK_SIZE = 1024


# --------------------------------------------------------------------------------------
# Chunked token log-probabilities
# --------------------------------------------------------------------------------------


def _row_chunks(logits: Tensor, chunk_size: int) -> Iterator[tuple[slice, Tensor]]:
    """Yield ``(rows, chunk)`` pairs covering the flattened ``[B*T, V]`` view of ``logits``.

    ``rows`` indexes the flattened ``[B*T]`` output; ``chunk`` is a *view* of ``logits``
    (no copy). When ``logits`` cannot be viewed as ``[B*T, V]`` (e.g. it is a slice
    ``logits[:, a:b]`` of a bigger tensor) the chunks follow each row ``b`` separately, so
    the full tensor is never copied either way.
    """
    B, T, V = logits.shape
    try:
        flat = logits.view(B * T, V)  # [B, T, V] -> [B*T, V], no copy
    except RuntimeError:
        flat = None
    if flat is not None:
        for start in range(0, B * T, chunk_size):
            stop = min(start + chunk_size, B * T)
            yield slice(start, stop), flat[start:stop]
        return
    for b in range(B):
        row = logits[b]  # [T, V] view
        for start in range(0, T, chunk_size):
            stop = min(start + chunk_size, T)
            yield slice(b * T + start, b * T + stop), row[start:stop]


def _acc_dtype(dtype: torch.dtype) -> torch.dtype:
    """Accumulation dtype: float32, or float64 for float64 inputs (so gradcheck works)."""
    return torch.promote_types(dtype, torch.float32)


class _ChunkedTokenLogprob(torch.autograd.Function):
    """``log softmax(logits)[target]`` (and optionally the entropy), chunked over rows.

    Forward saves ``logits`` in their own dtype (it is the input, so this costs nothing
    extra), the per-token float32 logsumexp and, with entropy, the per-token float32
    entropy. Backward recomputes ``log π = z − logsumexp`` and ``π`` one chunk at a time:

    - d logp / d z = onehot(target) − π
    - d H / d z = −π · (log π + H)

    and writes the gradient in the logits' dtype.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, targets: Tensor, chunk_size: int, with_entropy: bool):
        B, T, _ = logits.shape
        N = B * T
        acc = _acc_dtype(logits.dtype)
        flat_targets = targets.reshape(N)  # [B, T] -> [B*T]
        logp = torch.empty(N, dtype=acc, device=logits.device)  # [B*T]
        lse = torch.empty(N, dtype=acc, device=logits.device)  # [B*T]
        entropy = torch.empty(N, dtype=acc, device=logits.device) if with_entropy else None
        for rows, chunk in _row_chunks(logits, chunk_size):
            z = chunk.to(acc)  # [C, V] in float32 (float64 if given), C ≤ chunk_size
            chunk_lse = torch.logsumexp(z, dim=-1)  # [C, V] -> [C]
            chosen = z.gather(-1, flat_targets[rows].unsqueeze(-1)).squeeze(-1)  # [C, V] -> [C]
            lse[rows] = chunk_lse
            logp[rows] = chosen - chunk_lse
            if with_entropy:
                log_pi = z - chunk_lse.unsqueeze(-1)  # [C, V]
                entropy[rows] = -(log_pi.exp() * log_pi).sum(-1)  # [C, V] -> [C]
                del log_pi
            del z
        ctx.chunk_size = chunk_size
        ctx.with_entropy = with_entropy
        ctx.set_materialize_grads(False)
        ctx.save_for_backward(logits, flat_targets, lse, entropy)
        logp = logp.view(B, T)  # [B*T] -> [B, T]
        if not with_entropy:
            return logp
        return logp, entropy.view(B, T)  # [B*T] -> [B, T]

    @staticmethod
    def backward(ctx, *grads: Tensor | None):
        logits, flat_targets, lse, entropy = ctx.saved_tensors
        g_logp = grads[0]
        g_ent = grads[1] if ctx.with_entropy else None
        if g_logp is None and g_ent is None:
            return None, None, None, None
        B, T, V = logits.shape
        acc = lse.dtype
        grad = torch.empty((B, T, V), dtype=logits.dtype, device=logits.device)
        grad_flat = grad.view(B * T, V)  # [B, T, V] -> [B*T, V]
        g_logp = None if g_logp is None else g_logp.reshape(B * T).to(acc)  # [B, T] -> [B*T]
        g_ent = None if g_ent is None else g_ent.reshape(B * T).to(acc)  # [B, T] -> [B*T]
        for rows, chunk in _row_chunks(logits, ctx.chunk_size):
            log_pi = chunk.to(acc) - lse[rows].unsqueeze(-1)  # new [C, V], never aliases logits
            pi = log_pi.exp()  # [C, V]
            # g = π · (−g_logp − g_ent · (log π + H)) + g_logp · onehot, built in log_pi's buffer
            if g_ent is not None:
                g = log_pi.add_(entropy[rows].unsqueeze(-1)).mul_(-g_ent[rows].unsqueeze(-1))
            else:
                g = log_pi.zero_()
            if g_logp is not None:
                gl = g_logp[rows].unsqueeze(-1)  # [C, 1]
                g.sub_(gl).mul_(pi)
                g.scatter_add_(-1, flat_targets[rows].unsqueeze(-1), gl)  # + g_logp · onehot
            else:
                g.mul_(pi)
            grad_flat[rows] = g  # cast to the logits' dtype on copy
            del log_pi, pi, g
        return grad, None, None, None


def _check_logits_targets(logits: Tensor, targets: Tensor, chunk_size: int) -> None:
    if logits.dim() != 3:
        raise ValueError(f"logits must be [B, T, V], got shape {tuple(logits.shape)}")
    if tuple(targets.shape) != tuple(logits.shape[:2]):
        raise ValueError(
            f"targets has shape {tuple(targets.shape)} but logits has shape "
            f"{tuple(logits.shape)}; expected targets of shape {tuple(logits.shape[:2])}"
        )
    if not logits.is_floating_point():
        raise TypeError(f"logits must be a floating-point tensor, got {logits.dtype}")
    if targets.dtype not in (torch.int64, torch.int32):
        raise TypeError(f"targets must be an integer tensor of token ids, got {targets.dtype}")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be ≥ 1, got {chunk_size}")


def token_logprobs(
    logits: Tensor,
    targets: Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Log-probability of each chosen token, without a float32 ``[B, T, V]`` tensor.

    ``log π(targets[b, t]) = logits[b, t, targets[b, t]] − logsumexp(logits[b, t])``,
    computed ``chunk_size`` rows of the flattened ``[B*T, V]`` logits at a time in
    float32. The logits are not copied or up-cast as a whole: bf16 logits stay bf16 and
    only one ``[chunk_size, V]`` float32 chunk exists at a time, in forward and in
    backward (which recomputes the softmax chunk by chunk from the saved logits and the
    saved per-token logsumexp). The gradient w.r.t. ``logits`` has their dtype.

    No shifting is done here: ``logits[b, t]`` must be the distribution that scored
    ``targets[b, t]`` (for a causal LM, pass ``logits[:, :-1]`` with ``input_ids[:, 1:]``).

    Args:
        logits: `[B, T, V]` unnormalised scores, any floating dtype, may be a
            non-contiguous slice.
        targets: `[B, T]` token ids (int64/int32) in ``[0, V)``; padded positions must
            hold a valid id (e.g. the pad id) and be masked downstream.
        chunk_size: rows of ``[B*T, V]`` processed at once.
        return_entropy: also return the per-token entropy ``H = −Σ_v π_v log π_v`` of
            the same distributions, computed in the same chunked pass. The entropy is
            **differentiable** (its gradient ``−π·(log π + H)`` is added in the same
            chunked backward), so it can carry an entropy bonus.

    Returns:
        `[B, T]` float32 log-probabilities (float64 for float64 logits); with
        ``return_entropy`` a tuple ``(logprobs, entropy)`` of two such tensors.
    """
    _check_logits_targets(logits, targets, chunk_size)
    return _ChunkedTokenLogprob.apply(logits, targets.long(), int(chunk_size), bool(return_entropy))


def token_entropy(logits: Tensor, chunk_size: int = DEFAULT_CHUNK_SIZE) -> Tensor:
    """Per-token entropy of ``softmax(logits)``, chunked like :func:`token_logprobs`.

    Differentiable (same chunked backward). Use ``token_logprobs(...,
    return_entropy=True)`` when the log-probabilities are needed too: it is one pass.

    Args:
        logits: `[B, T, V]` unnormalised scores, any floating dtype.
        chunk_size: rows of ``[B*T, V]`` processed at once.

    Returns:
        `[B, T]` float32 entropies (nats).
    """
    dummy_targets = torch.zeros(logits.shape[:2], dtype=torch.long, device=logits.device)
    _, entropy = token_logprobs(logits, dummy_targets, chunk_size, return_entropy=True)
    return entropy


def token_logprobs_from_hidden(
    hidden: Tensor,
    lm_head_weight: Tensor,
    targets: Tensor,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    lm_head_bias: Tensor | None = None,
    return_entropy: bool = False,
) -> Tensor | tuple[Tensor, Tensor]:
    """Token log-probabilities straight from the last hidden states, never building ``[B, T, V]``.

    For each chunk of ``chunk_size`` rows of the flattened ``[B*T, H]`` hidden states the
    logits ``h @ W.T (+ b)`` are computed (in the hidden states' dtype) and passed to
    :func:`token_logprobs`. Each chunk runs under non-reentrant activation checkpointing,
    so what autograd keeps between forward and backward is the hidden states and the
    weight (already alive), not the chunk's logits: backward recomputes them one chunk at
    a time. Gradients flow to ``hidden``, ``lm_head_weight`` and ``lm_head_bias``.

    Args:
        hidden: `[B, T, H]` last hidden states (aligned with ``targets``: row ``t``
            scores ``targets[b, t]``).
        lm_head_weight: `[V, H]` output-embedding matrix (``lm_head.weight``).
        targets: `[B, T]` token ids.
        chunk_size: rows projected at once.
        lm_head_bias: optional `[V]` bias.
        return_entropy: also return the per-token entropy (differentiable).

    Returns:
        `[B, T]` float32 log-probabilities, or ``(logprobs, entropy)`` with
        ``return_entropy``.
    """
    if hidden.dim() != 3:
        raise ValueError(f"hidden must be [B, T, H], got shape {tuple(hidden.shape)}")
    if lm_head_weight.dim() != 2 or lm_head_weight.shape[1] != hidden.shape[-1]:
        raise ValueError(
            f"lm_head_weight has shape {tuple(lm_head_weight.shape)} but hidden has shape "
            f"{tuple(hidden.shape)}; expected [V, {hidden.shape[-1]}]"
        )
    if tuple(targets.shape) != tuple(hidden.shape[:2]):
        raise ValueError(
            f"targets has shape {tuple(targets.shape)} but hidden has shape {tuple(hidden.shape)}"
        )
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be ≥ 1, got {chunk_size}")
    B, T, H = hidden.shape
    flat_hidden = hidden.reshape(B * T, H)  # [B, T, H] -> [B*T, H]
    flat_targets = targets.reshape(B * T).long()  # [B, T] -> [B*T]

    def _chunk(h: Tensor, w: Tensor, bias: Tensor | None, tgt: Tensor):
        z = h @ w.t()  # [C, H] @ [H, V] -> [C, V]
        if bias is not None:
            z = z + bias
        out = token_logprobs(z.unsqueeze(0), tgt.unsqueeze(0), chunk_size, return_entropy)
        return out if return_entropy else (out,)

    need_grad = torch.is_grad_enabled() and (
        hidden.requires_grad
        or lm_head_weight.requires_grad
        or (lm_head_bias is not None and lm_head_bias.requires_grad)
    )
    logps, ents = [], []
    for start in range(0, B * T, chunk_size):
        stop = min(start + chunk_size, B * T)
        args = (flat_hidden[start:stop], lm_head_weight, lm_head_bias, flat_targets[start:stop])
        if need_grad:
            outs = torch.utils.checkpoint.checkpoint(_chunk, *args, use_reentrant=False)
        else:
            outs = _chunk(*args)
        logps.append(outs[0].squeeze(0))  # [1, C] -> [C]
        if return_entropy:
            ents.append(outs[1].squeeze(0))
    if B * T == 0:
        empty = hidden.new_zeros((B, T), dtype=torch.float32)
        return (empty, empty.clone()) if return_entropy else empty
    logp = torch.cat(logps).view(B, T)  # [B*T] -> [B, T]
    if return_entropy:
        return logp, torch.cat(ents).view(B, T)
    return logp
