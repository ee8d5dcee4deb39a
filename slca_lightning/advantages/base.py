"""The advantage-router interface: per-row channel rewards → per-token advantages."""

from __future__ import annotations

from abc import ABC, abstractmethod

import torch

from slca_lightning.types import RewardOutput, Segments


class AdvantageRouter(ABC):
    """Turns channel rewards into token advantages, routing each channel to its segments.

    After each call, ``last_stats`` holds per-segment advantage statistics
    (``adv/<segment>/{mean,std,min,max}``) for logging.
    """

    last_stats: dict[str, float]

    @abstractmethod
    def __call__(
        self, rewards: RewardOutput, segments: Segments, group_ids: torch.Tensor
    ) -> torch.Tensor:
        """Return ``FloatTensor[B, T]`` token advantages, 0 outside the assistant mask."""
