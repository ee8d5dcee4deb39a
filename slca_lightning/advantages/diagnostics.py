"""Advantage diagnostics: how much the summary reward leaks into tool-token credit, and which
rows carry any policy-gradient signal at all."""

from __future__ import annotations

import math

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


#: Below this root-mean-square tool-token advantage a step has no tool credit to speak of,
#: and :func:`summary_leakage` reports NaN: a ratio over a norm of rounding noise ran to
#: 5e4 in one ToolPO step of the credit-assignment study.
MIN_TOOL_CREDIT_RMS = 1e-3


def summary_leakage(
    router,
    rewards,
    segments,
    group_ids: torch.Tensor,
    token_advantages: torch.Tensor,
    lambda_summary: float = 1.0,
    exclude: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> float:
    """How much of the tool-token credit moves when the summary reward is reshuffled.

    A counterfactual, unlike the correlation of :func:`advantage_contamination` (which is
    also non-zero when tool and summary quality are genuinely correlated): the ``summary``
    channel is permuted at random inside each group (rows of ``exclude``, e.g. omitted ones,
    keep theirs), ``total`` moves by ``lambda_summary`` times the change, the tool channel
    stays, and the router runs again. The result is

        ‖A'_tool − A_tool‖₂ / ‖A_tool‖₂   over the tool-segment tokens,

    0 for an estimator whose tool tokens never read the summary reward (SLCA, RLTR),
    positive for GRPO, ToolPO and MT-GRPO.

    Args:
        router: the :class:`~slca_lightning.advantages.base.AdvantageRouter` that produced
            ``token_advantages``.
        rewards, segments, group_ids: its inputs.
        token_advantages: ``FloatTensor[B, T]``, its output.
        lambda_summary: weight of the summary channel in ``total`` (HierR's ``λ_r``).
        exclude: ``BoolTensor[B]`` rows whose summary is not a judged reward (kept as is).
        generator: seeds the permutations.

    Returns:
        The ratio, or NaN when the tool tokens carry no credit (root-mean-square advantage
        at most :data:`MIN_TOOL_CREDIT_RMS`) or there is no ``summary`` channel.
    """
    if "summary" not in rewards.channels or "tool" not in segments.masks:
        return float("nan")
    tool_mask = segments.masks["tool"].to(token_advantages.device)
    base = token_advantages[tool_mask]
    norm = float(base.norm())
    if base.numel() == 0 or norm <= MIN_TOOL_CREDIT_RMS * base.numel() ** 0.5:
        return float("nan")  # no tool credit to move: the ratio would be noise over ~0
    summary = rewards.channels["summary"].detach().cpu().clone()
    keep = torch.zeros_like(summary, dtype=torch.bool) if exclude is None else exclude.cpu()
    gids = group_ids.cpu()
    shuffled = summary.clone()
    for g in torch.unique(gids):
        rows = torch.nonzero((gids == g) & ~keep).flatten()
        if len(rows) > 1:
            perm = torch.randperm(len(rows), generator=generator)
            shuffled[rows] = summary[rows[perm]]
    channels = dict(rewards.channels)
    device = rewards.channels["summary"].device
    channels["summary"] = shuffled.to(device)
    if "total" in channels:
        channels["total"] = channels["total"] + lambda_summary * (shuffled - summary).to(device)
    counterfactual = type(rewards)(
        channels=channels, components=rewards.components, flags=rewards.flags
    )
    saved = getattr(router, "last_stats", None)
    moved = router.route(counterfactual, segments, group_ids).token_advantages
    if saved is not None:
        router.last_stats = saved  # the counterfactual's statistics are not the step's
    delta = moved.to(token_advantages.device)[tool_mask] - base
    return float(delta.norm()) / norm


def signal_rows(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: rows with a nonzero advantage on at least one token of ``mask``.

    A row without one carries no policy-gradient signal (its clipped-ratio loss and that
    loss's gradient are exactly 0): every row of a group whose rewards are all equal.
    """
    return ((advantages != 0) & mask.bool()).any(dim=1)


def no_signal_message(step: int, calls_per_episode: float | None) -> str:
    """The warning of a step in which no row carries signal, with its likely cause."""
    if calls_per_episode is not None and calls_per_episode == 0:
        cause = (
            "the policy made no tool call in any episode, so every group scored the same; "
            "warm-start it with SFT on tool-calling demonstrations first (slca_lightning.models.sft; the built-in models' '-sft' names are warm-started)"
        )
    else:
        cause = (
            "every group's rewards were equal (all solved or all failed the same way); "
            "raise data.group_size or the sampling temperature, or check the reward head"
        )
    return f"step {step}: every advantage is 0, so this step has no policy-gradient signal: {cause}"


def routing_diagnostics(
    router,
    rewards,
    segments,
    group_ids: torch.Tensor,
    token_advantages: torch.Tensor,
    lambda_summary: float = 1.0,
    generator: torch.Generator | None = None,
) -> dict[str, float]:
    """``adv/contamination`` and ``adv/summary_leakage`` of one step (when the step has tool
    tokens and a summary channel; a figure that is NaN, e.g. no tool token at all, is left
    out). Rows whose call was omitted are excluded from the leakage probe."""
    out: dict[str, float] = {}
    if "tool" not in segments.masks or "summary" not in rewards.channels:
        return out
    c = advantage_contamination(
        rewards.channels["summary"], token_advantages, segments.masks["tool"]
    )
    if not math.isnan(c):
        out["adv/contamination"] = c
    leak = summary_leakage(
        router,
        rewards,
        segments,
        group_ids,
        token_advantages,
        lambda_summary=lambda_summary,
        exclude=rewards.flags.get("omitted"),
        generator=generator,
    )
    if not math.isnan(leak):
        out["adv/summary_leakage"] = leak
    return out


def constant_channels(
    channels: dict[str, torch.Tensor], watched: set[str], streaks: dict[str, int], warn_at: int
) -> list[str]:
    """Update ``streaks`` (steps in a row each watched channel has not varied across the
    batch) and return a warning for each channel whose streak just reached ``warn_at``: a
    channel that never varies is usually a missing flag or a broken reward (PITFALLS §9)."""
    messages = []
    for name, value in channels.items():
        if name not in watched:
            continue
        flat = value.numel() < 2 or float(value.max() - value.min()) == 0.0
        streak = streaks.get(name, 0) + 1 if flat else 0
        streaks[name] = streak
        if streak == warn_at:
            first = float(value.flatten()[0]) if value.numel() else 0.0
            messages.append(
                f"reward channel {name!r} has been constant ({first}) for {streak} steps: its "
                "advantages are all 0; check the reward head"
            )
    return messages
