"""The five estimators of METHOD §5 as routing tables (tool / summary segment → terms).

| estimator | tool-segment tokens get     | summary-segment tokens get |
|-----------|-----------------------------|----------------------------|
| GRPO      | z(total)                    | z(total)                   |
| SLCA      | λ_tool·z(tool)              | λ_sum·z(summary)           |
| ToolPO    | z(total) + λ·z(action)      | z(total)                   |
| RLTR      | z(rltr)                     | 0                          |
| MT-GRPO   | z(tool) + λ·z(summary)      | z(summary)                 |

Presence per term: GRPO and RLTR use rows with any sampled token; ToolPO's global terms use
the whole group ("the z-score of the total over the whole group"); SLCA and MT-GRPO use the
segment presence of METHOD §3 (tool iff ≥ 2 assistant runs, summary iff ≥ 1).
"""

from __future__ import annotations

from typing import Literal

from slca_lightning.advantages.routing import ChannelRouter, Term

Scale = Literal["group", "batch", "none"]


class GRPORouter(ChannelRouter):
    """GRPO: every sampled token gets the group z-score of the total reward."""

    def __init__(self, norm_by_std: bool = True, scale_rewards: Scale = "group") -> None:
        total = [Term("total", 1.0, "any")]
        super().__init__(
            {"tool": total, "summary": total, "whole": total},
            norm_by_std=norm_by_std,
            scale_rewards=scale_rewards,
        )


class SLCARouter(ChannelRouter):
    """SLCA-GRPO: tool tokens get λ_tool·z(tool), summary tokens get λ_sum·z(summary),
    each z-score taken over the rows where that segment is present."""

    def __init__(
        self,
        tool_weight: float = 1.0,
        summary_weight: float = 1.0,
        norm_by_std: bool = True,
        scale_rewards: Scale = "group",
    ) -> None:
        super().__init__(
            {
                "tool": [Term("tool", tool_weight, "tool")],
                "summary": [Term("summary", summary_weight, "summary")],
            },
            norm_by_std=norm_by_std,
            scale_rewards=scale_rewards,
        )


class ToolPORouter(ChannelRouter):
    """ToolPO: z(total) everywhere, plus λ·z(action) on tool tokens (group-wide stats)."""

    def __init__(
        self, action_weight: float = 1.0, norm_by_std: bool = True, scale_rewards: Scale = "group"
    ) -> None:
        total = Term("total", 1.0, "all")
        super().__init__(
            {
                "tool": [total, Term("action", action_weight, "all")],
                "summary": [total],
                "whole": [total],
            },
            norm_by_std=norm_by_std,
            scale_rewards=scale_rewards,
        )


class RLTRRouter(ChannelRouter):
    """RLTR: only tool tokens learn, from z(R_rltr); summary tokens get 0."""

    def __init__(self, norm_by_std: bool = True, scale_rewards: Scale = "group") -> None:
        super().__init__(
            {"tool": [Term("rltr", 1.0, "any")], "summary": []},
            norm_by_std=norm_by_std,
            scale_rewards=scale_rewards,
        )


class MTGRPORouter(ChannelRouter):
    """MT-GRPO: tool tokens get z(tool) + λ·z(summary), summary tokens get z(summary)."""

    def __init__(
        self,
        outcome_weight: float = 1.0,
        norm_by_std: bool = True,
        scale_rewards: Scale = "group",
    ) -> None:
        summary = Term("summary", 1.0, "summary")
        super().__init__(
            {
                "tool": [Term("tool", 1.0, "tool"), Term("summary", outcome_weight, "summary")],
                "summary": [summary],
            },
            norm_by_std=norm_by_std,
            scale_rewards=scale_rewards,
        )
