"""Episode metrics as torchmetrics ``Metric``s (METHOD §8): they accumulate across batches
and, reduced by sum, across devices.

Per episode (:func:`episode_stats`), all from the episode's own task:

- **exact** (tool accuracy): ToolPO's action score is 1 (every gold call strictly right;
  on irrelevant tasks, no call).
- **name_f1**, **key**, **value**, **process**: METHOD §4.1 on the whole response (think
  blocks stripped, the task's allowed tools), exactly as HierR's ``tool`` channel computes
  them; **arg_match** = (key + value) / 2.
- **score**: the reward total over ``λ_p + λ_r`` (None when no reward was given);
  Success@τ is the fraction of episodes with ``score ≥ τ``.
- **call attempts / valid calls**: per assistant turn, every entry of a ``<tool_call>``
  block is an attempt, as is a block that fails before its entries (bad JSON) and every
  unmatched tag; an attempt is valid when it parses as a call to an allowed tool whose
  arguments satisfy that tool's JSON schema (no schema: not checked).
- **calls**: the calls that were executed (observations of a named call; the agent loop's
  error observations for unparseable blocks and over-cap calls are not calls), the same
  count as ``rollout/tool_calls_per_episode``.
- **repeats**: executed calls identical to an earlier call of the same episode (same name,
  same canonical arguments: sorted-key JSON); redundancy = repeats / calls.
- **turns**: assistant turns; **tokens**: tokens the policy sampled (``assistant_mask``),
  the cost of the episode.
- **abstention accuracy**: over the tasks that need no call (no gold call: the suite's
  ``irrelevant`` kind), the fraction answered without one (NaN when there are none).

Every ratio is a ratio of sums (a call-weighted mean for validity and redundancy, an
episode mean elsewhere) and NaN when its denominator is 0.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch
from torchmetrics import Metric

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.schema import canonical_arguments, index_schemas, validate_arguments
from slca_lightning.rewards.process import (
    action_score,
    check_process_weights,
    first_step_calls,
    process_reward_from_parse,
)
from slca_lightning.types import Episode

__all__ = [
    "TAUS",
    "AbstentionAccuracy",
    "ArgMatch",
    "AssistantTurnsPerEpisode",
    "EpisodeMetrics",
    "EpisodeStats",
    "NameF1",
    "Process",
    "Redundancy",
    "SuccessAtTau",
    "TokensPerEpisode",
    "ToolAccuracy",
    "ToolCallValidity",
    "ToolCallsPerEpisode",
    "episode_stats",
]

#: The Success@τ thresholds of METHOD §8.
TAUS = (0.7, 0.8, 0.9, 1.0)


@dataclass
class EpisodeStats:
    """What the metrics need of one episode (see the module docstring)."""

    name_f1: float
    key: float
    value: float
    process: float
    score: float | None
    call_attempts: int
    valid_calls: int
    calls: int
    repeats: int
    turns: int
    tokens: int
    exact: float = 0.0
    irrelevant: bool = False


def _turn_validity(text: str, allowed: list[str] | None, schemas: dict) -> tuple[int, int]:
    parsed = parse_tool_calls(text, allowed)
    attempts = valid = 0
    for block in parsed.blocks:
        if not block.entries:
            attempts += 1  # failed before its entries (bad JSON, empty list, ...)
            continue
        for entry in block.entries:
            attempts += 1
            call = entry.call
            if call is None:
                continue
            schema = schemas.get(call.name)
            if schema is None or not validate_arguments(schema, call.arguments):
                valid += 1
    return attempts + parsed.denominator - len(parsed.blocks), valid


def episode_stats(
    episode: Episode,
    total: float | None = None,
    scale: float = 2.0,
    process_weights: Mapping[str, float] | None = None,
) -> EpisodeStats:
    """The per-episode quantities of the module docstring.

    Args:
        episode: the episode (its ``task`` holds the gold calls and tool schemas).
        total: the reward head's ``total`` for it (None: no Success@τ).
        scale: ``λ_p + λ_r``, the largest total.
        process_weights: METHOD §4.1 component weights (default the paper's).
    """
    task = episode.task
    allowed = list(task.allowed_tools) or None
    parsed = parse_tool_calls(episode.response_text, allowed)
    first = first_step_calls(episode.assistant_texts, allowed)
    parts = process_reward_from_parse(parsed, task.gold_calls, process_weights, first)
    schemas = index_schemas(task.tools)
    attempts = valid = 0
    for text in episode.assistant_texts:
        a, v = _turn_validity(text, allowed, schemas)
        attempts, valid = attempts + a, valid + v
    seen: set[tuple[str, str]] = set()
    calls = repeats = 0
    for turn in episode.tool_results:
        for result in turn:
            if not result.call.name:
                continue  # an error observation for something that was not a call
            calls += 1
            key = (result.call.name, canonical_arguments(result.call.arguments))
            repeats += key in seen
            seen.add(key)
    exact = action_score(parsed.calls, task.gold_calls)
    return EpisodeStats(
        exact=float(exact >= 1.0),
        name_f1=float(parts["name"]),
        key=float(parts["key"]),
        value=float(parts["value"]),
        process=float(parts["process"]),
        score=None if total is None else float(total) / scale,
        call_attempts=attempts,
        valid_calls=valid,
        calls=calls,
        repeats=repeats,
        turns=len(episode.assistant_texts),
        tokens=int(sum(bool(m) for m in episode.assistant_mask)),
        irrelevant=not task.needs_tools,
    )


def _as_stats(items: Sequence[Episode | EpisodeStats]) -> list[EpisodeStats]:
    return [x if isinstance(x, EpisodeStats) else episode_stats(x) for x in items]


class _Ratio(Metric):
    """``Σ numerator / Σ denominator`` over everything updated (NaN when Σ denominator = 0)."""

    full_state_update = False
    higher_is_better: bool | None = None

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.add_state("num", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("den", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def _terms(self, s: EpisodeStats) -> tuple[float, float]:
        raise NotImplementedError

    def update(self, items: Sequence[Episode | EpisodeStats]) -> None:
        """Add episodes (or their precomputed :class:`EpisodeStats`)."""
        for s in _as_stats(items):
            n, d = self._terms(s)
            self.num += n
            self.den += d

    def compute(self) -> torch.Tensor:
        return self.num / self.den if self.den > 0 else torch.tensor(math.nan, dtype=torch.float64)


class ToolAccuracy(_Ratio):
    """Fraction of episodes whose every gold call was made strictly correctly (ToolPO's
    action score = 1; extra calls are not penalised here, :class:`Redundancy` counts
    repeats); on an irrelevant task, no call at all."""

    higher_is_better = True

    def _terms(self, s):
        return s.exact, 1.0


class AbstentionAccuracy(_Ratio):
    """Fraction of the tasks that need no call (no gold call) answered without one."""

    higher_is_better = True

    def _terms(self, s):
        return (s.exact, 1.0) if s.irrelevant else (0.0, 0.0)


class NameF1(_Ratio):
    """Mean multiset F1 of called names against gold names (METHOD §4.1 ``name``)."""

    higher_is_better = True

    def _terms(self, s):
        return s.name_f1, 1.0


class ArgMatch(_Ratio):
    """Mean of (key + value) / 2: METHOD §8's ArgMatch."""

    higher_is_better = True

    def _terms(self, s):
        return (s.key + s.value) / 2.0, 1.0


class Process(_Ratio):
    """Mean METHOD §4.1 process reward (the HierR ``tool`` channel before the omission guard)."""

    higher_is_better = True

    def _terms(self, s):
        return s.process, 1.0


class ToolCallValidity(_Ratio):
    """Valid call attempts / call attempts, over all episodes (call-weighted)."""

    higher_is_better = True

    def _terms(self, s):
        return s.valid_calls, s.call_attempts


class ToolCallsPerEpisode(_Ratio):
    """Mean executed tool calls per episode."""

    def _terms(self, s):
        return s.calls, 1.0


class AssistantTurnsPerEpisode(_Ratio):
    """Mean assistant turns per episode."""

    def _terms(self, s):
        return s.turns, 1.0


class Redundancy(_Ratio):
    """Repeated identical calls (same name and canonical arguments, within one episode) /
    executed calls, over all episodes."""

    higher_is_better = False

    def _terms(self, s):
        return s.repeats, s.calls


class TokensPerEpisode(_Ratio):
    """Mean tokens sampled by the policy per episode (its generation cost)."""

    higher_is_better = False

    def _terms(self, s):
        return s.tokens, 1.0


class SuccessAtTau(Metric):
    """Fraction of scored episodes with ``total / (λ_p + λ_r) ≥ τ``, for each τ of ``taus``.

    ``compute()`` returns ``{"success@0.7": ..., ...}``; episodes without a score (no reward
    given) are not counted. NaN when nothing was scored.
    """

    full_state_update = False
    higher_is_better = True

    def __init__(self, taus: Sequence[float] = TAUS, **kwargs) -> None:
        super().__init__(**kwargs)
        self.taus = tuple(float(t) for t in taus)
        n = len(self.taus)
        self.add_state("hits", torch.zeros(n, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")

    def update(self, items: Sequence[Episode | EpisodeStats]) -> None:
        """Add scored episodes' stats (:func:`episode_stats` with a ``total``)."""
        tau = torch.tensor(self.taus, dtype=torch.float64)
        for s in _as_stats(items):
            if s.score is None or not math.isfinite(s.score):
                continue
            # 1e-9 slack: a perfect total of 2.0 over scale 2.0 must reach τ = 1.0 exactly
            self.hits += (s.score + 1e-9 >= tau).to(torch.float64).to(self.hits.device)
            self.count += 1.0

    def compute(self) -> dict[str, torch.Tensor]:
        rates = self.hits / self.count if self.count > 0 else torch.full_like(self.hits, math.nan)
        return {f"success@{t:g}": rates[i] for i, t in enumerate(self.taus)}


class EpisodeMetrics(torch.nn.Module):
    """All metrics of this module, updated together from episodes and their reward totals.

    ``update(episodes, totals)`` computes :func:`episode_stats` once per episode and feeds
    every metric; ``compute()`` returns flat floats (``tool_accuracy``, ``name_f1``, ``arg_match``,
    ``process``, ``success@0.7`` … ``success@1``, ``tool_call_validity``,
    ``tool_calls_per_episode``, ``abstention_accuracy``, ``assistant_turns_per_episode``,
    ``redundancy``, ``tokens_per_episode``); ``merge(other)`` adds another instance's states.

    Args:
        scale: ``λ_p + λ_r`` (the largest reward total).
        process_weights: METHOD §4.1 weights (default the paper's).
        taus: Success@τ thresholds.
        metric_kwargs: passed to every ``Metric`` (e.g. ``sync_on_compute=False``).
    """

    def __init__(
        self,
        scale: float = 2.0,
        process_weights: Mapping[str, float] | None = None,
        taus: Sequence[float] = TAUS,
        **metric_kwargs,
    ) -> None:
        super().__init__()
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"EpisodeMetrics.scale (λ_p + λ_r) must be > 0, got {scale}")
        self.scale = float(scale)
        self.process_weights = check_process_weights(process_weights)
        self.metrics = torch.nn.ModuleDict(
            {
                "tool_accuracy": ToolAccuracy(**metric_kwargs),
                "name_f1": NameF1(**metric_kwargs),
                "arg_match": ArgMatch(**metric_kwargs),
                "process": Process(**metric_kwargs),
                "success": SuccessAtTau(taus, **metric_kwargs),
                "tool_call_validity": ToolCallValidity(**metric_kwargs),
                "tool_calls_per_episode": ToolCallsPerEpisode(**metric_kwargs),
                "abstention_accuracy": AbstentionAccuracy(**metric_kwargs),
                "assistant_turns_per_episode": AssistantTurnsPerEpisode(**metric_kwargs),
                "redundancy": Redundancy(**metric_kwargs),
                "tokens_per_episode": TokensPerEpisode(**metric_kwargs),
            }
        )

    @classmethod
    def for_reward_head(cls, head, **metric_kwargs) -> EpisodeMetrics:
        """Scale and process weights read from a HierR-like head (defaults otherwise)."""
        scale = getattr(head, "lambda_process", 1.0) + getattr(head, "lambda_summary", 1.0)
        return cls(scale, getattr(head, "process_weights", None), **metric_kwargs)

    def update(self, episodes: Sequence[Episode], totals: torch.Tensor | None = None) -> None:
        """Add ``episodes``; ``totals`` (``[B]``, the reward head's ``total``) enables Success@τ."""
        if totals is not None and len(totals) != len(episodes):
            raise ValueError(f"{len(totals)} reward totals for {len(episodes)} episodes")
        stats = [
            episode_stats(
                ep, None if totals is None else float(totals[i]), self.scale, self.process_weights
            )
            for i, ep in enumerate(episodes)
        ]
        for metric in self.metrics.values():
            metric.update(stats)

    def compute(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for name, metric in self.metrics.items():
            value = metric.compute()
            if isinstance(value, dict):
                out.update({k: float(v) for k, v in value.items()})
            else:
                out[name] = float(value)
        return out

    def merge(self, other: EpisodeMetrics) -> None:
        """Add the states of ``other`` (same metrics) to this instance's."""
        for name, metric in self.metrics.items():
            metric.merge_state(other.metrics[name])
            metric._computed = None  # merge_state keeps a cached compute() (torchmetrics 1.9)

    def reset(self) -> None:
        for metric in self.metrics.values():
            metric.reset()
