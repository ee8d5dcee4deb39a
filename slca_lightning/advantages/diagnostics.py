"""Advantage contamination: how much the summary reward leaks into tool-token credit."""

from __future__ import annotations

import torch


def advantage_contamination(
    summary_reward: torch.Tensor, token_advantages: torch.Tensor, tool_mask: torch.Tensor
) -> float:
    """Pearson correlation, across rows that have tool tokens, between the summary reward and
    the mean advantage on the row's tool tokens.

    Near 0 for SLCA by construction (tool tokens only see the tool channel); clearly
    non-zero for GRPO, whose tool tokens carry z(total) and so the summary reward.

    Args:
        summary_reward: ``FloatTensor[B]``.
        token_advantages: ``FloatTensor[B, T]``.
        tool_mask: ``BoolTensor[B, T]``.

    Returns:
        The correlation, or NaN when fewer than two rows have tool tokens or either side
        is constant.
    """
    counts = tool_mask.sum(dim=1)  # [B]
    rows = counts > 0
    if int(rows.sum()) < 2:
        return float("nan")
    mean_adv = (token_advantages * tool_mask).sum(dim=1)[rows] / counts[rows]  # [B']
    r = summary_reward[rows].to(torch.float64)
    a = mean_adv.to(torch.float64)
    r, a = r - r.mean(), a - a.mean()
    denom = r.norm() * a.norm()
    if float(denom) < 1e-12:
        return float("nan")
    return float((r * a).sum() / denom)
