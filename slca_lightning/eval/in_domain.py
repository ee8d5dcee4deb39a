"""In-domain evaluation (METHOD §8): greedy episodes on the held-out tasks of a data module.

:func:`evaluate_in_domain` runs one greedy (temperature 0) episode per held-out task with
the data module's agent-loop caps, tool simulator and tool-call format (``data.tool_format``:
each turn's calls are read the way the model writes them), scores them with the module's
reward head and returns the :class:`~slca_lightning.eval.metrics.EpisodeMetrics` values (Name F1,
ArgMatch, Process, Success@τ, validity, calls/turns/tokens per episode, redundancy).
:func:`markdown_rows` writes evaluations as a Markdown table, one row per evaluation.
While it runs, tasks done of the total, time elapsed and left go to stderr
(:func:`~slca_lightning.eval.progress.progress`, one update per batch of episodes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from slca_lightning.eval.metrics import EpisodeMetrics
from slca_lightning.eval.progress import progress as report_progress
from slca_lightning.models.fsdp import rollout_weights
from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.types import Episode

__all__ = ["InDomainResult", "evaluate_in_domain", "greedy_loop", "markdown_rows"]

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
