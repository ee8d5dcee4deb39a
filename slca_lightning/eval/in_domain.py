"""In-domain evaluation (METHOD §8): greedy episodes on the held-out tasks of a data module.

:func:`evaluate_in_domain` runs one greedy (temperature 0) episode per held-out task with
the data module's agent-loop caps, tool simulator and tool-call format (``data.tool_format``:
each turn's calls are read the way the model writes them), scores them with the module's
reward head and returns the :class:`~slca_lightning.eval.metrics.EpisodeMetrics` values (Name F1,
ArgMatch, Process, Success@τ, validity, calls/turns/tokens per episode, redundancy).
:func:`markdown_rows` writes evaluations as a Markdown table, one row per evaluation, and
:func:`console_table` the key columns of it that fit a terminal's width.
:func:`cap_warning` says when most episodes were cut by a token cap (their scores are of
cut-off replies), and :func:`write_episodes` writes the episodes as JSON lines (transcripts).
While it runs, tasks done of the total, time elapsed and left go to stderr
(:func:`~slca_lightning.eval.progress.progress`, one update per batch of episodes).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from slca_lightning.eval.metrics import EpisodeMetrics, episode_stats
from slca_lightning.eval.progress import progress as report_progress
from slca_lightning.models.fsdp import rollout_weights
from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.types import Episode

__all__ = [
    "CONSOLE_COLUMNS",
    "InDomainResult",
    "cap_warning",
    "capped_episodes",
    "console_table",
    "evaluate_in_domain",
    "greedy_loop",
    "markdown_rows",
    "write_episodes",
]

#: Columns of the in-domain table, in order (others follow alphabetically).
COLUMNS = (
    "tool_accuracy",
    "success@0.9",
    "success@0.7",
    "success@0.8",
    "success@1",
    "name_f1",
    "arg_match",
    "process",
    "tool_call_validity",
    "tool_calls_per_episode",
    "abstention_accuracy",
    "assistant_turns_per_episode",
    "redundancy",
    "tokens_per_episode",
)

#: The columns :func:`console_table` shows, most important first (the README's table), with
#: their short headers; a second judge's ``<name>/summary`` follows ``tool_calls_per_episode``.
CONSOLE_COLUMNS: dict[str, str] = {
    "tool_accuracy": "tool_accuracy",
    "success@0.9": "success@0.9",
    "name_f1": "name_f1",
    "arg_match": "arg_match",
    "process": "process",
    "tool_calls_per_episode": "calls/ep",
    "tool_call_validity": "validity",
    "abstention_accuracy": "abstention",
}


@dataclass
class InDomainResult:
    """Metric values of one in-domain evaluation, with the episodes they came from."""

    metrics: dict[str, float]
    episodes: list[Episode] = field(default_factory=list)


def greedy_loop(datamodule: Any, policy: Any, tokenizer: Any, batch_size: int = 32) -> AgentLoop:
    """An agent loop with ``datamodule``'s caps, simulator and tool-call format, sampling
    greedily from ``policy``."""
    if getattr(datamodule, "loop", None) is None:
        datamodule.connect(policy, tokenizer)
    loop = datamodule.loop
    return AgentLoop(
        HFEngine(policy, tokenizer, max_batch_size=batch_size),
        tokenizer,
        datamodule.simulator,
        replace(datamodule.sampling, temperature=0.0, seed=0),
        max_turns=loop.max_turns,
        max_calls_per_turn=loop.max_calls_per_turn,
        max_response_tokens=loop.max_response_tokens,
        max_tool_response_tokens=loop.max_tool_response_tokens,
        render_check="off",
        tool_format=getattr(datamodule, "tool_format", None),
    )


def evaluate_in_domain(
    policy: Any,
    tokenizer: Any,
    reward_head: Any,
    datamodule: Any,
    num_tasks: int | None = 32,
    batch_size: int = 32,
    progress: bool = True,
    **metric_kwargs: Any,
) -> InDomainResult:
    """Greedy episodes on the first ``num_tasks`` held-out tasks (None: all), scored.

    Args:
        policy, tokenizer: the model to evaluate.
        reward_head: scores the episodes (its ``total`` gives Success@τ).
        datamodule: a :class:`~slca_lightning.rollout.datamodule.RolloutDataModule` (tasks,
            caps, simulator; connected here when it is not yet).
        num_tasks: held-out tasks evaluated, one episode each.
        batch_size: episodes generated together.
        progress: report tasks done, time elapsed and left on stderr while running.
        metric_kwargs: passed to :class:`EpisodeMetrics` (e.g. ``sync_on_compute=False``).

    Returns:
        The metrics (empty when the source has no held-out task) and the episodes.
    """
    if num_tasks is not None and num_tasks < 1:
        raise ValueError(f"num_tasks must be ≥ 1 or None, got {num_tasks}")
    tasks = datamodule.source.heldout()
    tasks = tasks if num_tasks is None else tasks[:num_tasks]
    if not tasks:
        return InDomainResult({})
    loop = greedy_loop(datamodule, policy, tokenizer, batch_size)
    metrics = EpisodeMetrics.for_reward_head(reward_head, **metric_kwargs)
    episodes: list[Episode] = []
    was_training = getattr(policy, "training", False)
    policy.eval()
    try:
        with (
            rollout_weights(policy),
            report_progress("in_domain", len(tasks), "tasks", enabled=progress) as update,
        ):
            for start in range(0, len(tasks), batch_size):
                chunk = loop.run(tasks[start : start + batch_size], group_size=1)
                rewards = reward_head(chunk)
                metrics.update(chunk, rewards.channels["total"])
                episodes += chunk
                update(len(chunk))
    finally:
        policy.train(was_training)
    return InDomainResult(metrics.compute(), episodes)


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "nan" if math.isnan(value) else f"{value:.3f}"
    return str(value)


def markdown_rows(rows: list[tuple[str, dict[str, float]]]) -> str:
    """``[(label, metrics), ...]`` → a Markdown table, one row per label (known columns
    first, in :data:`COLUMNS` order)."""
    seen = {k for _, m in rows for k in m}
    keys = [k for k in COLUMNS if k in seen] + sorted(seen - set(COLUMNS))
    lines = ["| evaluation | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for label, m in rows:
        lines.append(f"| {label} | " + " | ".join(_fmt(m.get(k, math.nan)) for k in keys) + " |")
    return "\n".join(lines)


def console_table(rows: list[tuple[str, dict[str, float]]], width: int = 100) -> str:
    """The key columns of :func:`markdown_rows`'s table as aligned plain text no wider than
    ``width`` characters: :data:`CONSOLE_COLUMNS` in order, each second judge's
    ``<name>/summary`` after ``calls/ep``, as many as fit (the full table is the Markdown)."""
    seen = {k for _, m in rows for k in m}
    order = list(CONSOLE_COLUMNS)
    judges = sorted(k for k in seen if k.endswith("/summary"))
    at = order.index("tool_calls_per_episode") + 1
    order[at:at] = judges
    labels = [str(label) for label, _ in rows]
    columns = [("evaluation", labels, "<")]
    used = max(map(len, ["evaluation", *labels]))
    for key in order:
        if key not in seen:
            continue
        header = CONSOLE_COLUMNS.get(key, key)
        cells = [_fmt(m.get(key, math.nan)) for _, m in rows]
        size = max(map(len, [header, *cells]))
        if used + 2 + size > width:
            break
        columns.append((header, cells, ">"))
        used += 2 + size
    sizes = [max(map(len, [h, *cells])) for h, cells, _ in columns]
    lines = []
    for i in range(-1, len(rows)):
        parts = [
            f"{(h if i < 0 else cells[i]):{align}{size}}"
            for (h, cells, align), size in zip(columns, sizes)
        ]
        lines.append("  ".join(parts).rstrip())
    return "\n".join(lines)


def capped_episodes(episodes: Sequence[Episode], max_new_tokens: int | None = None) -> dict:
    """How many of ``episodes`` a token cap cut (``finish_reason == "length"``): ``{"capped":
    k, "episodes": n, "reply_cap": j}``, ``j`` of them cut inside a reply that reached
    ``max_new_tokens`` (the per-turn cap; the rest ran out of the episode's token budget)."""
    capped = [ep for ep in episodes if ep.finish_reason == "length"]
    reply = 0
    if max_new_tokens:
        for ep in capped:
            run = 0  # sampled tokens of the last assistant turn
            for sampled in reversed(ep.assistant_mask):
                if not sampled:
                    break
                run += 1
            reply += run >= max_new_tokens
    return {"capped": len(capped), "episodes": len(episodes), "reply_cap": reply}


def cap_warning(
    episodes: Sequence[Episode],
    max_new_tokens: int | None,
    max_response_tokens: int | None = None,
    raise_reply: str = "data.max_new_tokens",
    raise_episode: str = "data.max_response_tokens",
) -> str | None:
    """One line when more than half of ``episodes`` hit a token cap, naming the setting to
    raise (``raise_reply`` for the per-reply cap ``max_new_tokens``, ``raise_episode`` for
    the episode budget ``max_response_tokens``); None otherwise."""
    count = capped_episodes(episodes, max_new_tokens)
    k, n = count["capped"], count["episodes"]
    if not n or 2 * k <= n:
        return None
    if 2 * count["reply_cap"] >= k:
        cap, setting = f"the {max_new_tokens}-token reply cap", raise_reply
    else:
        cap = f"the {max_response_tokens}-token episode budget" if max_response_tokens else None
        cap, setting = cap or "the episode's token budget", raise_episode
    return (
        f"{k} of {n} episodes ({100 * k / n:.0f} %) hit {cap}: their scores are of cut-off "
        f"replies; raise {setting}"
    )


def write_episodes(path: str, episodes: Sequence[Episode], rewards: Any) -> None:
    """One JSON line per episode, what a transcript needs: task id, kind, question, gold
    calls, assistant turns, observations, channel rewards (``rewards.channels``, row ``i`` =
    ``episodes[i]``) and whether the calls were exactly right."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        for i, ep in enumerate(episodes):
            row = {
                "task_id": ep.task.task_id,
                "kind": ep.task.metadata.get("kind", ep.task.subset),
                "question": ep.task.question,
                "gold": [[[c.name, c.arguments] for c in step] for step in ep.task.gold_calls],
                "turns": list(ep.assistant_texts),
                "observations": [[r.content for r in turn] for turn in ep.tool_results],
                "finish_reason": ep.finish_reason,
                "rewards": {k: float(v[i]) for k, v in rewards.channels.items()},
                "exact": bool(episode_stats(ep).exact),
            }
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
