"""Token log-probabilities and the clipped policy-gradient loss of SLCA-GRPO (METHOD §6).

What is computed
----------------
For a mini-batch of ``B`` rows of ``T`` token-aligned positions, the loss is

    loss = agg(surrogate + kl_coef · k3) − entropy_coef · agg(entropy)

where ``surrogate`` is the per-token PPO clipped surrogate on the ratio
``r = π_θ / π_old = exp(logp − old_logp)``, ``k3`` is the per-token estimator of
KL(π_θ ‖ π_ref), ``exp(ref − logp) − (ref − logp) − 1``, and ``agg`` reduces the
masked per-token values to a scalar (token-mean over the whole mini-batch by default,
the paper's choice; the sequence-level means of GRPO and Dr.GRPO are options).

The per-token terms and the aggregation live in :mod:`slca_lightning.loss_terms` (re-exported
here). The log-probabilities come from :func:`slca_lightning.logprobs.token_logprobs` (re-exported here), which takes ``log π`` of the
chosen token as ``gathered logit − logsumexp`` one chunk of rows at a time, so that the
float32 ``[B, T, V]`` tensor a plain ``log_softmax(logits.float())`` builds never exists
(ARCHITECTURE, "The training step", point 4). Its backward recomputes the softmax chunk
by chunk from the saved logits (kept in their own dtype) and the saved per-token
logsumexp. :func:`token_logprobs_from_hidden` goes one step further and never builds the
logits either, projecting hidden states through the LM head one chunk at a time.

How it departs from textbook PPO
--------------------------------
- No value function and no GAE: advantages are given (group-normalised, possibly
  per-segment, see :mod:`slca_lightning.advantages`); the loss is the policy term only.
- The KL to the frozen reference is a loss term (k3 estimator, coefficient ~0.001),
  not a per-token reward penalty. It is *not* multiplied by the importance ratio (TRL's
  ``use_bias_correction_kl`` does that; we do not).
- The clip range may be asymmetric (``eps_low`` ≠ ``eps_high``, as in DAPO's
  clip-higher), and an optional dual clip (Ye et al., 2020) bounds the loss of
  negative-advantage tokens at ``−c·A`` when the ratio runs away above ``c``.
- Aggregation over tokens is configurable (token-mean, per-sequence mean, Dr.GRPO's
  constant normaliser) instead of a plain batch mean of per-sample losses.
- Masked positions are neutralised before any exponential (their inputs are replaced by
  zeros), so padding holding ``-inf`` or NaN cannot leak NaN into the loss or its
  gradient; an all-masked batch gives a loss of exactly 0.0 with a defined (zero) grad.

All arithmetic is done in float32, whatever the dtype of the inputs (float64 logits, as
used by ``gradcheck``, are the one exception: they are reduced in float64). Token-aligned
tensors are ``[B, T]``; masks are ``torch.bool``.
"""

from __future__ import annotations

import torch
from torch import Tensor

from slca_lightning.logprobs import (
    token_entropy,
    token_logprobs,
    token_logprobs_from_hidden,
)
from slca_lightning.loss_terms import (
    AGGREGATION_ALIASES,
    AGGREGATION_MODES,
    _broadcast_advantages,
    _check_mask,
    _masked_mean,
    _resolve_mode,
    aggregate,
    clipped_surrogate,
    k3_kl,
)

__all__ = [
    "AGGREGATION_ALIASES",
    "AGGREGATION_MODES",
    "aggregate",
    "clipped_surrogate",
    "k3_kl",
    "logprob_mismatch",
    "policy_loss",
    "token_entropy",
    "token_logprobs",
    "token_logprobs_from_hidden",
    "truncated_is_weight",
]


# --------------------------------------------------------------------------------------
# The full policy loss
# --------------------------------------------------------------------------------------


def truncated_is_weight(
    trainer_logprobs: Tensor, engine_logprobs: Tensor, mask: Tensor, cap: float
) -> Tensor:
    """Truncated importance weight ``min(exp(trainer − engine), cap)`` per token (constants).

    Corrects for the rollout engine (e.g. vLLM) sampling from a slightly different
    distribution than the trainer's ``π_old``. Off-mask positions get weight 0.

    Args:
        trainer_logprobs: `[B, T]` log π_old recomputed by the trainer.
        engine_logprobs: `[B, T]` log-probs the engine reported while sampling.
        mask: `[B, T]` bool, the sampled (assistant) tokens.
        cap: the truncation ``C > 0``.
    """
    if cap <= 0:
        raise ValueError(f"tis_cap must be > 0, got {cap}")
    for name, t in (("engine_logprobs", engine_logprobs), ("mask", mask)):
        if t.shape != trainer_logprobs.shape:
            raise ValueError(
                f"{name} has shape {tuple(t.shape)} but trainer_logprobs has shape "
                f"{tuple(trainer_logprobs.shape)}"
            )
    zero = torch.zeros((), dtype=torch.float32, device=trainer_logprobs.device)
    delta = torch.where(mask, trainer_logprobs.float() - engine_logprobs.float(), zero)
    return torch.where(mask, delta.exp().clamp(max=cap), zero).detach()  # [B, T]


def logprob_mismatch(a: Tensor, b: Tensor, mask: Tensor) -> float:
    """Mean ``|a − b|`` over the masked tokens (0.0 when none): trainer vs engine log-probs."""
    if not bool(mask.any()):
        return 0.0
    return float((a.float() - b.float())[mask].abs().mean())


def _first_bad_row(advantages: Tensor) -> int | None:
    bad = ~torch.isfinite(advantages.detach())
    if advantages.dim() > 1:
        bad = bad.flatten(1).any(-1)  # [B, ...] -> [B]
    rows = bad.nonzero()
    return None if rows.numel() == 0 else int(rows[0, 0])


def policy_loss(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    ref_logprobs: Tensor | None = None,
    kl_coef: float = 0.0,
    entropy: Tensor | None = None,
    entropy_coef: float = 0.0,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
    aggregation: str = "token-mean",
    max_len: int | None = None,
    is_weights: Tensor | None = None,
) -> tuple[Tensor, dict[str, float]]:
    """SLCA-GRPO policy loss: ``agg(surrogate + kl_coef·k3) − entropy_coef·agg(entropy)``.

    ``surrogate`` is :func:`clipped_surrogate`, ``k3`` is :func:`k3_kl` against the
    reference, and ``agg`` is :func:`aggregate` with ``aggregation`` (the same mode
    reduces the entropy bonus). Inputs at off-mask positions are replaced by zeros
    before anything is computed, so padding cannot produce NaN.

    Args:
        logprobs: `[B, T]` log π_θ of the taken tokens (differentiable).
        old_logprobs: `[B, T]` log π_old (constants; equal to ``logprobs.detach()``
            on-policy, which makes the ratio exactly 1).
        advantages: `[B]`, `[B, 1]` or `[B, T]` advantages (constants).
        mask: `[B, T]` bool, True on tokens that carry loss (sampled tokens).
        ref_logprobs: `[B, T]` log π_ref, required when ``kl_coef != 0``.
        kl_coef: weight of the k3 term (METHOD §6: 0.001).
        entropy: `[B, T]` per-token entropy (e.g. from ``token_logprobs(...,
            return_entropy=True)``), required when ``entropy_coef != 0``.
        entropy_coef: weight of the entropy bonus (METHOD §6: 0).
        eps_low: lower clip range.
        eps_high: upper clip range.
        dual_clip: dual-clip constant ``c > 1`` or None.
        aggregation: a mode or alias of :func:`aggregate` (default ``token-mean``).
        max_len: normaliser for ``seq-mean-token-sum-norm``.
        is_weights: `[B, T]` constant per-token weights of the surrogate (the truncated
            importance weight of :func:`truncated_is_weight`); None = 1.

    Returns:
        ``(loss, metrics)``: a 0-d float32 loss and Python floats ``loss``,
        ``pg_loss`` (aggregated surrogate alone), ``clip_frac_low``,
        ``clip_frac_high``, ``clip_frac``, ``dual_clip_frac``, ``ratio_mean``,
        ``num_tokens``, plus ``kl_mean`` (token mean of k3) when ``ref_logprobs`` is
        given and ``entropy_mean`` when ``entropy`` is given.

    Raises:
        ValueError: mismatched shapes (naming both), non-finite advantages (naming the
            first bad row), a missing ``ref_logprobs``/``entropy`` for a non-zero
            coefficient, or an unknown aggregation mode.
    """
    shape = logprobs.shape
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(shape)}")
    for name, tensor in (
        ("old_logprobs", old_logprobs),
        ("ref_logprobs", ref_logprobs),
        ("entropy", entropy),
        ("mask", mask),
        ("is_weights", is_weights),
    ):
        if tensor is not None and tensor.shape != shape:
            raise ValueError(
                f"{name} has shape {tuple(tensor.shape)} but logprobs has shape {tuple(shape)}"
            )
    _check_mask(mask, shape)
    adv = _broadcast_advantages(advantages, shape)  # shape check first, then values
    bad_row = _first_bad_row(advantages)
    if bad_row is not None:
        raise ValueError(
            f"advantages contain NaN or inf; first bad row is {bad_row} "
            f"(value(s) {advantages[bad_row].detach().flatten()[:8].tolist()})"
        )
    if kl_coef != 0.0 and ref_logprobs is None:
        raise ValueError(f"kl_coef={kl_coef} needs ref_logprobs")
    if entropy_coef != 0.0 and entropy is None:
        raise ValueError(f"entropy_coef={entropy_coef} needs entropy")
    _resolve_mode(aggregation)

    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)

    def _clean(x: Tensor) -> Tensor:
        return torch.where(mask, x.float(), zero)  # [B, T], off-mask -> 0

    logp = _clean(logprobs)
    per_token, stats = clipped_surrogate(
        logp,
        _clean(old_logprobs),
        adv,
        mask,
        eps_low=eps_low,
        eps_high=eps_high,
        dual_clip=dual_clip,
    )  # [B, T]
    if is_weights is not None:
        per_token = per_token * _clean(is_weights.detach())
    pg_loss = aggregate(per_token, mask, aggregation, max_len)
    metrics: dict[str, Tensor] = dict(stats)
    if ref_logprobs is not None:
        kl = k3_kl(logp, _clean(ref_logprobs))  # [B, T]
        metrics["kl_mean"] = _masked_mean(kl.detach(), mask)
        if kl_coef != 0.0:
            per_token = per_token + kl_coef * kl
    loss = aggregate(per_token, mask, aggregation, max_len)
    if entropy is not None:
        ent = _clean(entropy)
        metrics["entropy_mean"] = _masked_mean(ent.detach(), mask)
        if entropy_coef != 0.0:
            loss = loss - entropy_coef * aggregate(ent, mask, aggregation, max_len)
    metrics["pg_loss"] = pg_loss.detach()
    metrics["loss"] = loss.detach()
    metrics["num_tokens"] = mask.sum()
    return loss, {k: float(v) for k, v in metrics.items()}
