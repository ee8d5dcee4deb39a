"""Test-only reward heads."""

from __future__ import annotations

import torch

from slca_lightning.rewards import RewardHead
from slca_lightning.types import RewardOutput


class TokenParityReward(RewardHead):
    """A deterministic reward of the sampled tokens themselves (test boundary).

    The random tiny model never produces a correct tool call, so HierR would give every row
    of a group the same reward and every advantage would be 0. This head scores each row by
    the share of even token ids in its sampled response (tool channel) and of ids divisible by three
    (summary channel): varied within a group, and a pure function of what was sampled, so
    a resumed run must reproduce it exactly.
    """

    channel_names = frozenset({"tool", "summary", "total"})

    def __call__(self, episodes):
        tool, summary = [], []
        for ep in episodes:
            sampled = [t for t, m in zip(ep.response_ids, ep.assistant_mask) if m]
            tool.append(sum(t % 2 == 0 for t in sampled) / max(len(sampled), 1))
            summary.append(sum(t % 3 == 0 for t in sampled) / max(len(sampled), 1))
        tool_t, summary_t = torch.tensor(tool), torch.tensor(summary)
        return RewardOutput(
            channels={"tool": tool_t, "summary": summary_t, "total": tool_t + summary_t}
        )
