"""The clipped policy-gradient loss of SLCA-GRPO (METHOD §6).

What is computed
----------------
For a mini-batch of ``B`` rows of ``T`` token-aligned positions, the loss is

    loss = agg(surrogate + kl_coef · k3) − entropy_coef · agg(entropy)

where ``surrogate`` is the per-token PPO clipped surrogate on the ratio
``r = π_θ / π_old = exp(logp − old_logp)``, ``k3`` is the per-token estimator of
KL(π_θ ‖ π_ref), ``exp(ref − logp) − (ref − logp) − 1``, and ``agg`` reduces the
masked per-token values to a scalar (token-mean over the whole mini-batch by default,
the paper's choice; the sequence-level means of GRPO and Dr.GRPO are options).

The per-token terms (:func:`clipped_surrogate`, :func:`k3_kl`) and the aggregation
(:func:`aggregate`) come first, then :func:`policy_loss`, which puts them together. The
log-probabilities it takes come from :mod:`slca_lightning.logprobs` (chunked: no float32
``[B, T, V]``).

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

__all__ = [
    "AGGREGATION_ALIASES",
    "AGGREGATION_MODES",
    "aggregate",
    "clipped_surrogate",
    "k3_kl",
    "logprob_mismatch",
    "policy_loss",
    "truncated_is_weight",
]

AGGREGATION_MODES: tuple[str, ...] = (
    "token-mean",
    "seq-mean-token-mean",
    "seq-mean-token-sum",
    "seq-mean-token-sum-norm",
)
AGGREGATION_ALIASES: dict[str, str] = {
    "grpo": "seq-mean-token-mean",
    "dr_grpo": "seq-mean-token-sum-norm",
    "dapo": "token-mean",
    "bnpo": "token-mean",
}


# --------------------------------------------------------------------------------------
# Per-token loss terms
# --------------------------------------------------------------------------------------


def _check_mask(mask: Tensor, shape: torch.Size, name: str = "mask") -> None:
    if mask.dtype != torch.bool:
        raise TypeError(f"{name} must be torch.bool (use {name}.bool()), got {mask.dtype}")
    if mask.shape != shape:
        raise ValueError(
            f"{name} has shape {tuple(mask.shape)} but logprobs has shape {tuple(shape)}"
        )


def _broadcast_advantages(advantages: Tensor, shape: torch.Size) -> Tensor:
    """Return float32 advantages of ``shape`` `[B, T]` from `[B]`, `[B, 1]` or `[B, T]`."""
    if advantages.dim() == 1 and advantages.shape[0] == shape[0]:
        advantages = advantages.unsqueeze(-1)  # [B] -> [B, 1]
    if (
        advantages.dim() != 2
        or advantages.shape[0] != shape[0]
        or advantages.shape[1] not in (1, shape[1])
    ):
        raise ValueError(
            f"advantages has shape {tuple(advantages.shape)} but logprobs has shape "
            f"{tuple(shape)}; expected [B], [B, 1] or [B, T]"
        )
    return advantages.float().expand(shape)  # [B, 1|T] -> [B, T]


def _masked_fraction(flags: Tensor, mask: Tensor) -> Tensor:
    """Fraction of masked positions where ``flags`` is True (0 when nothing is masked)."""
    n = mask.sum().clamp_min(1)
    return (flags & mask).sum().float() / n


def _masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    n = mask.sum().clamp_min(1)
    return torch.where(mask, values, torch.zeros_like(values)).sum() / n


def clipped_surrogate(
    logprobs: Tensor,
    old_logprobs: Tensor,
    advantages: Tensor,
    mask: Tensor,
    eps_low: float = 0.2,
    eps_high: float = 0.2,
    dual_clip: float | None = None,
) -> tuple[Tensor, dict[str, Tensor]]:
    """Per-token PPO clipped surrogate loss, optionally dual-clipped.

    With ``r = exp(logprobs − old_logprobs)``::

        loss = −min(r·A, clip(r, 1 − eps_low, 1 + eps_high)·A)
        loss = min(loss, −c·A)          where A < 0, if dual_clip = c is given

    Positions outside ``mask`` get loss 0 and zero gradient (their inputs are replaced by
    0 before the exponential, so ``-inf``/NaN padding is harmless).

    Args:
        logprobs: `[B, T]` log π_θ of the taken tokens (differentiable).
        old_logprobs: `[B, T]` log π_old (treated as constants).
        advantages: `[B]`, `[B, 1]` or `[B, T]` advantages (constants).
        mask: `[B, T]` bool, True on tokens that carry loss.
        eps_low: lower clip, ratio floor ``1 − eps_low``.
        eps_high: upper clip, ratio ceiling ``1 + eps_high``.
        dual_clip: ``c > 1`` bounding the loss of negative-advantage tokens at ``−c·A``;
            None disables it.

    Returns:
        ``(per_token_loss, stats)``: `[B, T]` float32 loss (0 off-mask) and 0-d detached
        tensors computed over masked tokens: ``clip_frac_low`` (A < 0 and
        r < 1 − eps_low), ``clip_frac_high`` (A > 0 and r > 1 + eps_high), ``clip_frac``
        (either), ``dual_clip_frac`` (A < 0 and the dual clip is the active bound),
        ``ratio_mean``.
    """
    shape = logprobs.shape
    if old_logprobs.shape != shape:
        raise ValueError(
            f"old_logprobs has shape {tuple(old_logprobs.shape)} but logprobs has shape {tuple(shape)}"
        )
    _check_mask(mask, shape)
    if dual_clip is not None and dual_clip <= 1.0:
        raise ValueError(f"dual_clip must be > 1 (e.g. 3.0), got {dual_clip}")
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low and eps_high must be ≥ 0, got {eps_low}, {eps_high}")
    zero = torch.zeros((), dtype=torch.float32, device=logprobs.device)
    adv = torch.where(mask, _broadcast_advantages(advantages.detach(), shape), zero)  # [B, T]
    log_ratio = torch.where(mask, logprobs.float() - old_logprobs.detach().float(), zero)  # [B, T]
    ratio = torch.exp(log_ratio)  # [B, T], exactly 1 off-mask
    clipped_ratio = ratio.clamp(1.0 - eps_low, 1.0 + eps_high)  # [B, T]
    loss = torch.maximum(-adv * ratio, -adv * clipped_ratio)  # −min(r·A, clip(r)·A), [B, T]
    neg = adv < 0  # [B, T]
    if dual_clip is not None:
        cap = -dual_clip * adv  # [B, T], > 0 where A < 0
        dual_active = neg & (loss > cap)  # [B, T]
        loss = torch.where(neg, torch.minimum(loss, cap), loss)
    else:
        dual_active = torch.zeros_like(mask)
    loss = torch.where(mask, loss, zero)  # [B, T]

    with torch.no_grad():
        r = ratio.detach()
        low = neg & (r < 1.0 - eps_low)
        high = (adv > 0) & (r > 1.0 + eps_high)
        stats = {
            "clip_frac_low": _masked_fraction(low, mask),
            "clip_frac_high": _masked_fraction(high, mask),
            "clip_frac": _masked_fraction(low | high, mask),
            "dual_clip_frac": _masked_fraction(dual_active, mask),
            "ratio_mean": _masked_mean(r, mask),
        }
    return loss, stats


def k3_kl(logprobs: Tensor, ref_logprobs: Tensor) -> Tensor:
    """Per-token k3 estimator of KL(π_θ ‖ π_ref) (Schulman's "approximating KL").

    ``k3 = exp(ref − logp) − (ref − logp) − 1``, which is ≥ 0, is 0 where the two
    log-probabilities are equal, and is unbiased for the KL under samples from π_θ.

    Args:
        logprobs: `[B, T]` log π_θ (differentiable).
        ref_logprobs: `[B, T]` log π_ref (constants).

    Returns:
        `[B, T]` float32 per-token estimates (no masking: mask when aggregating).
    """
    if ref_logprobs.shape != logprobs.shape:
        raise ValueError(
            f"ref_logprobs has shape {tuple(ref_logprobs.shape)} but logprobs has shape "
            f"{tuple(logprobs.shape)}"
        )
    delta = ref_logprobs.detach().float() - logprobs.float()  # [B, T]
    return torch.exp(delta) - delta - 1.0  # [B, T]


# --------------------------------------------------------------------------------------
# Aggregation
# --------------------------------------------------------------------------------------


def _resolve_mode(mode: str) -> str:
    resolved = AGGREGATION_ALIASES.get(mode, mode)
    if resolved not in AGGREGATION_MODES:
        valid = ", ".join([*AGGREGATION_MODES, *AGGREGATION_ALIASES])
        raise ValueError(f"unknown aggregation mode {mode!r}; valid modes: {valid}")
    return resolved


def aggregate(
    per_token: Tensor,
    mask: Tensor,
    mode: str = "token-mean",
    max_len: int | None = None,
) -> Tensor:
    """Reduce a masked `[B, T]` per-token quantity to a scalar.

    Modes (aliases in brackets):

    - ``token-mean`` [``dapo``, ``bnpo``]: sum over every masked token of the
      mini-batch / their count (the paper's default).
    - ``seq-mean-token-mean`` [``grpo``]: mean of each row over its masked tokens, then
      mean over the rows that have ≥ 1 masked token. (TRL's ``grpo`` divides by all
      ``B`` rows instead; the two agree when no row is empty.)
    - ``seq-mean-token-sum``: sum of each row, then mean over all ``B`` rows.
    - ``seq-mean-token-sum-norm`` [``dr_grpo``]: total masked sum / (``B · max_len``),
      ``max_len`` defaulting to ``T`` (Dr.GRPO's constant normaliser; pass the
      generation cap to make it independent of padding).

    Off-mask values are ignored even when they are inf/NaN (selected away, not
    multiplied by 0). An all-False mask gives exactly 0.0, with a defined (zero)
    gradient.

    Args:
        per_token: `[B, T]` values (any float dtype; reduced in float32).
        mask: `[B, T]` bool.
        mode: one of the modes or aliases above.
        max_len: normaliser length for ``seq-mean-token-sum-norm``.

    Returns:
        0-d float32 tensor.

    Raises:
        ValueError: on an unknown mode (listing the valid ones), mismatched shapes, or a
            non-positive ``max_len``.
    """
    resolved = _resolve_mode(mode)
    if per_token.dim() != 2:
        raise ValueError(f"per_token must be [B, T], got shape {tuple(per_token.shape)}")
    if mask.shape != per_token.shape:
        raise ValueError(
            f"mask has shape {tuple(mask.shape)} but per_token has shape {tuple(per_token.shape)}"
        )
    if mask.dtype != torch.bool:
        raise TypeError(f"mask must be torch.bool (use mask.bool()), got {mask.dtype}")
    B, T = per_token.shape
    values = torch.where(
        mask, per_token.float(), torch.zeros((), device=per_token.device)
    )  # [B, T]
    if resolved == "token-mean":
        return values.sum() / mask.sum().clamp_min(1)  # [B, T] -> []
    row_sum = values.sum(-1)  # [B, T] -> [B]
    if resolved == "seq-mean-token-mean":
        row_count = mask.sum(-1)  # [B, T] -> [B]
        row_mean = row_sum / row_count.clamp_min(1)  # [B]
        has_tokens = row_count > 0  # [B]
        return row_mean.sum() / has_tokens.sum().clamp_min(1)  # [B] -> []
    if resolved == "seq-mean-token-sum":
        return row_sum.sum() / max(B, 1)  # [B] -> []
    # seq-mean-token-sum-norm
    length = T if max_len is None else int(max_len)
    if length <= 0 and B * T > 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    return row_sum.sum() / max(B * length, 1)  # [B] -> []


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
