"""One table-driven router; every estimator of METHOD §5 is a row of data.

A routing table maps each segment to a sum of terms ``weight · z(channel | presence)``:

    segment tokens get  Σ_k  w_k · group_normalize(rewards[channel_k], present=presence_k)

``presence`` says which rows take part in the group statistics of that term:
``"all"`` (every row of the group), ``"any"`` (rows that sampled at least one token), or a
segment name (rows where that segment is present, METHOD §3). Weights multiply the
normalised values, so they never cancel. The token advantage is the segment's value on
that segment's tokens and 0 everywhere else, including every token outside the assistant
mask (tool responses, chat glue, padding).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import torch

from slca_lightning.advantages.base import AdvantageRouter, RoutedAdvantages
from slca_lightning.advantages.group_norm import check_scores, group_normalize
from slca_lightning.types import RewardOutput, Segments


@dataclass
class Term:
    """``weight · z(channel)`` with the group statistics taken over ``presence`` rows."""

    channel: str
    weight: float = 1.0
    presence: str = "any"


class ChannelRouter(AdvantageRouter):
    """Routes normalised channel rewards to segment tokens following a table.

    Statistics (``last_stats`` and ``RoutedAdvantages.stats``): per segment,
    ``adv/<segment>/{mean,std,min,max}`` of the routed value over the rows that have that
    segment; per channel read, ``adv/channel/<channel>/{mean,std}`` of its z-score (before
    any weight) over the rows in its statistics.

    Args:
        table: segment name → list of :class:`Term` (or ``(channel, weight, presence)``
            tuples). A segment with an empty list gets advantage 0 (it does not learn).
        norm_by_std: divide by the group std (False = Dr.GRPO centring).
        scale_rewards: ``"group"`` (paper), ``"batch"`` (std over the batch) or ``"none"``
            (centre only; the same as ``norm_by_std=False``).
        eps: added to the std.
    """

    def __init__(
        self,
        table: Mapping[str, Sequence[Term | tuple]],
        norm_by_std: bool = True,
        scale_rewards: Literal["group", "batch", "none"] = "group",
        eps: float = 1e-6,
    ) -> None:
        if scale_rewards not in ("group", "batch", "none"):
            raise ValueError(
                f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}"
            )
        self.table = {
            seg: [t if isinstance(t, Term) else Term(*t) for t in terms]
            for seg, terms in table.items()
        }
        self.norm_by_std = norm_by_std and scale_rewards != "none"
        self.std_scope = "batch" if scale_rewards == "batch" else "group"
        self.eps = eps
        self.last_stats: dict[str, float] = {}

    @property
    def channels(self) -> set[str]:
        """Reward channels this router reads."""
        return {t.channel for terms in self.table.values() for t in terms}

    def route(
        self, rewards: RewardOutput, segments: Segments, group_ids: torch.Tensor
    ) -> RoutedAdvantages:
        """Compute token advantages and the per-segment statistics."""
        name = type(self).__name__
        missing = sorted(self.channels - set(rewards.channels))
        if missing:
            raise ValueError(
                f"{name} needs reward channel(s) {missing}, but the reward head produced "
                f"{sorted(rewards.channels)}; add a reward head or extra channel that "
                f"computes them (e.g. RLTRReward for 'rltr', ActionReward for 'action')"
            )
        unknown = sorted(set(segments.masks) - set(self.table))
        if unknown:
            raise ValueError(
                f"{name} has no routing rule for segment(s) {unknown}; it routes "
                f"{sorted(self.table)}: use a segmenter that produces those segments"
            )
        # Everything on the device of group_ids (the module routes on CPU; reward heads
        # build their channels on CPU while segment masks may live on the accelerator).
        device = group_ids.device
        masks = {k: m.to(device) for k, m in segments.masks.items()}
        seg_present = {k: p.to(device) for k, p in segments.present.items()}
        b = group_ids.shape[0]
        shape = next(iter(masks.values())).shape if masks else (b, 0)
        if group_ids.dim() != 1 or shape[0] != b:
            raise ValueError(
                f"group_ids has shape {tuple(group_ids.shape)}, segment masks have shape "
                f"{tuple(shape)}: expected group_ids of shape ({shape[0]},)"
            )
        for ch in self.channels:
            value = rewards.channels[ch]
            if tuple(value.shape) != (b,):
                raise ValueError(
                    f"reward channel {ch!r} has shape {tuple(value.shape)}, "
                    f"group_ids has shape {tuple(group_ids.shape)}"
                )
            check_scores(value, name=f"reward channel {ch!r}")

        any_token = torch.zeros(b, dtype=torch.bool, device=group_ids.device)
        for seg_mask in masks.values():
            any_token |= seg_mask.any(dim=1)
        # (channel, presence) → (z-scores [B], rows in the statistics [B] bool or None = all)
        cache: dict[tuple[str, str], tuple[torch.Tensor, torch.Tensor | None]] = {}

        def z(term: Term) -> torch.Tensor:
            key = (term.channel, term.presence)
            if key not in cache:
                if term.presence == "all":
                    present = None
                elif term.presence == "any":
                    present = any_token
                elif term.presence in seg_present:
                    present = seg_present[term.presence].bool()
                else:
                    raise ValueError(
                        f"{name}: term presence {term.presence!r} is not 'all', 'any' or a "
                        f"segment of {sorted(seg_present)}"
                    )
                zs = group_normalize(
                    rewards.channels[term.channel].to(device).float(),
                    group_ids,
                    present,
                    norm_by_std=self.norm_by_std,
                    eps=self.eps,
                    std_scope=self.std_scope,
                )
                cache[key] = (zs, present)
            return cache[key][0]

        token_adv = torch.zeros(shape, dtype=torch.float32, device=group_ids.device)
        values: dict[str, torch.Tensor] = {}
        stats: dict[str, float] = {}
        for seg, seg_mask in masks.items():
            value = torch.zeros(b, dtype=torch.float32, device=group_ids.device)
            for term in self.table[seg]:
                value = value + term.weight * z(term)  # [B]
            values[seg] = value
            token_adv = token_adv + value[:, None] * seg_mask.to(torch.float32)  # [B, T]
            rows = seg_mask.any(dim=1)
            if bool(rows.any()):
                v = value[rows]
                stats[f"adv/{seg}/mean"] = float(v.mean())
                stats[f"adv/{seg}/std"] = float(v.std(unbiased=False))
                stats[f"adv/{seg}/min"] = float(v.min())
                stats[f"adv/{seg}/max"] = float(v.max())
        for (channel, _), (zs, present) in cache.items():  # per channel, before any weight
            rows = torch.ones_like(any_token) if present is None else present
            if bool(rows.any()):
                stats[f"adv/channel/{channel}/mean"] = float(zs[rows].mean())
                stats[f"adv/channel/{channel}/std"] = float(zs[rows].std(unbiased=False))
        self.last_stats = stats
        return RoutedAdvantages(token_adv, values, stats)

    def __call__(
        self, rewards: RewardOutput, segments: Segments, group_ids: torch.Tensor
    ) -> torch.Tensor:
        return self.route(rewards, segments, group_ids).token_advantages
