"""The advantage-router interface: per-row channel rewards → per-token advantages."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field

import torch

from slca_lightning.types import RewardOutput, Segments


@dataclass
class RoutedAdvantages:
    """What a router computed: token advantages plus the per-row segment values."""

    token_advantages: torch.Tensor  # [B, T]
    segment_values: dict[str, torch.Tensor] = field(default_factory=dict)  # segment -> [B]
    stats: dict[str, float] = field(default_factory=dict)


class AdvantageRouter(ABC):
    """Turns channel rewards into token advantages, routing each channel to its segments.

    After each call, ``last_stats`` holds per-segment advantage statistics
    (``adv/<segment>/{mean,std,min,max}``) for logging.
    """

    last_stats: dict[str, float] = {}  # noqa: RUF012 (overwritten per instance)

    @property
    def channels(self) -> set[str]:
        """Reward channels this router reads (checked against the reward head at fit start;
        empty = not declared, nothing checked)."""
        return set()

    def route(
        self, rewards: RewardOutput, segments: Segments, group_ids: torch.Tensor
    ) -> RoutedAdvantages:
        """Token advantages with their statistics (what the module calls).

        The default wraps :meth:`__call__` and :attr:`last_stats`, so a custom router only
        has to implement ``__call__``.
        """
        adv = self(rewards, segments, group_ids)
        return RoutedAdvantages(adv, {}, dict(getattr(self, "last_stats", {}) or {}))

    @abstractmethod
    def __call__(
        self, rewards: RewardOutput, segments: Segments, group_ids: torch.Tensor
    ) -> torch.Tensor:
        """Return ``FloatTensor[B, T]`` token advantages, 0 outside the assistant mask."""
