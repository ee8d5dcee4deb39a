"""ToolPO's action reward (METHOD §5): the fraction of gold calls made strictly correctly.

A predicted call is correct when its name matches a gold call exactly, every gold key is
present and the values loosely match; matching is greedy one-to-one
(:func:`~slca_lightning.rewards.process.action_score`). Only calls of valid
``<tool_call>`` blocks count; ``<think>`` text is stripped first.
"""

from __future__ import annotations

import torch

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.rewards.base import ChannelReward, check_finite
from slca_lightning.rewards.process import action_score
from slca_lightning.types import Episode

__all__ = ["ActionReward"]


class ActionReward(ChannelReward):
    """Channel ``"action"``: strictly correct calls / gold calls, in [0, 1], per episode.

    Args:
        name: the channel's key (default ``"action"``).
    """

    def __init__(self, name: str = "action") -> None:
        self.name = name

    def score_episode(self, episode: Episode) -> float:
        """The action score of one episode."""
        task = episode.task
        parsed = parse_tool_calls(episode.response_text, task.allowed_tools)
        gold_steps, _ = normalize_gold_calls(task.gold_calls)
        return float(action_score(parsed.calls, gold_steps))

    def __call__(self, episodes: list[Episode]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Return ``(FloatTensor[B] of action scores, {})``."""
        values = torch.tensor([self.score_episode(ep) for ep in episodes], dtype=torch.float32)
        check_finite(self.name, values, episodes)
        return values, {}
