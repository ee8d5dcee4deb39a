"""The per-token terms of the SLCA-GRPO loss and their aggregation (METHOD §6).

- :func:`clipped_surrogate`: the PPO clipped surrogate on ``r = exp(logp − old_logp)``
  (asymmetric ``eps_low``/``eps_high``, optional dual clip);
- :func:`k3_kl`: the k3 estimator of KL(π_θ ‖ π_ref);
- :func:`aggregate`: masked per-token values → one scalar (token-mean, per-sequence means,
  Dr.GRPO's constant normaliser).

:func:`slca_lightning.losses.policy_loss` puts them together; the module docstring there says
how the whole loss departs from textbook PPO. Masked positions are neutralised before any
exponential; all arithmetic is float32 (float64 inputs stay float64).
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
