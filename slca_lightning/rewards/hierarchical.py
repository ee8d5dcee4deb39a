"""HierR: the paper's hierarchical reward (METHOD §4), one row per episode.

For each episode:

1. **process** (the ``tool`` channel): the rule-based score of the whole response
   against the gold calls, ``0.10·fmt + 0.25·name + 0.15·key + 0.20·value + 0.30·parallel``
   (:func:`~slca_lightning.rewards.process.process_reward`, weights configurable), on
   the whole response with think blocks stripped.
2. **summary**: 0 when the episode has no tool response (judge not called); else the
   final reply (the text after the last tool response, think tags stripped, trimmed) is
   scored by the judge, except that a reply shorter than ``min_reply_chars`` scores 0
   without calling it. A failed verdict scores 0. All judge requests of the batch go out
   in one ``judge.score`` call.
3. **omission guard**: if the gold needs a call (``task.needs_tools``) and the response
   has no ``<tool_call>``/``</tool_call>`` tag at all (outside think blocks):
   ``tool = 0``, ``summary = total = omission_penalty`` (−0.5), flag ``omitted``; the
   judge is not called. Under SLCA the whole penalty thus lands on the summary channel.
4. otherwise ``total = lambda_process·process + lambda_summary·summary`` (∈ [0, 2] with
   the defaults).

Departure available (off by default, METHOD §4.3 "known flaw"): with
``credit_abstention=True``, on a task whose gold has no call,

- a rollout with no ``<tool_call>`` tag (a correct abstention) has ``fmt := 1`` (nothing
  malformed was written for a task that needs no call), so ``process = 1``, and ``summary
  :=`` the judge's score of its reply (the whole response, think-stripped;
  ``tool_results = []``; still 0 without a judge call when shorter than
  ``min_reply_chars``); rows whose reply went to the judge carry ``abstention_credited``;
- a rollout that does call (any tag) gets ``summary := 0`` without a judge call: its reply
  follows a call the task did not want, whatever it says.

So on such a task every correct abstention totals at least ``λ_p`` while every rollout
that calls totals at most ``λ_p · (1 − w_fmt)`` (a call block that does not parse, so
name, key, value and parallel still score 1) for every judge output: a correct abstention
outranks any call. Under the paper's rule (off) an abstention totals ``0.9·λ_p`` and a
wrong call with a good-sounding summary up to ``0.45·λ_p + λ_r``, so RL pushes toward
calling tools the task does not need.
"""

from __future__ import annotations

import math
from collections import Counter

import torch

from slca_lightning.calls.env_errors import report_env_error
from slca_lightning.calls.parsing import parse_tool_calls, strip_think
from slca_lightning.rewards.base import (
    ChannelReward,
    RewardHead,
    check_finite,
    task_question,
    validate_reward_output,
)
from slca_lightning.rewards.judges import JudgeRequest, JudgeVerdict, SummaryJudge
from slca_lightning.rewards.process import (
    check_process_weights,
    first_step_calls,
    process_reward_from_parse,
)
from slca_lightning.rewards.rltr import RLTRReward
from slca_lightning.rewards.rule_judge import RuleJudge
from slca_lightning.rewards.toolpo import ActionReward
from slca_lightning.types import Episode, RewardOutput

__all__ = ["PROCESS_COMPONENTS", "HierarchicalReward"]

#: The process-reward parts logged as components.
PROCESS_COMPONENTS = ("fmt", "name", "key", "value", "parallel")


class HierarchicalReward(RewardHead):
    """METHOD §4's HierR: process (``tool``), judged ``summary``, omission guard, ``total``.

    Output:
        channels: ``tool`` (process, 0 on omitted rows), ``summary``, ``total``, plus one
            channel per extra :class:`ChannelReward` (default: ToolPO's ``action`` and
            RLTR's ``rltr``, so every router of METHOD §5 finds its channel).
        components: ``fmt``, ``name``, ``key``, ``value``, ``parallel`` (the process parts
            as computed, also on omitted rows) and the extras' components.
        flags: ``omitted``, ``judge_called``, ``judge_failed``, ``abstention_credited``.

    After each call :attr:`last_stats` holds the batch's counts (``judge_calls``,
    ``judge_failures``, ``judge_batches``, ``omitted``, ``abstention_credited``, and
    ``judge_errors/<ExceptionType>``: exceptions ``judge.score`` raised, environment errors
    logged once per type and never a crash: the batch is then scored one request at a time,
    and a request that raises again gets a failed verdict);
    :attr:`num_judge_calls` and :attr:`num_judge_failures` accumulate over calls.

    Args:
        judge: the summary judge (default :class:`RuleJudge`).
        process_weights: weights of fmt/name/key/value/parallel, summing to 1 (default
            METHOD §4.1's); checked here, so a bad config fails at construction.
        lambda_process: ``λ_p`` in the total.
        lambda_summary: ``λ_r`` in the total.
        omission_penalty: total (and summary) of an omitted rollout.
        min_reply_chars: final replies shorter than this score 0 without the judge.
        extra_channels: extra channels (default ``[ActionReward(), RLTRReward()]``, both
            rule-based and offline: RLTR's default verifier is
            :class:`~slca_lightning.rewards.rltr.GoldCoverageVerifier`; ``[]`` for none).
        credit_abstention: rank a correct abstention above any call on a task that needs
            none (see the module docstring); off by default, as in the paper.
    """

    def __init__(
        self,
        judge: SummaryJudge | None = None,
        process_weights: dict[str, float] | None = None,
        lambda_process: float = 1.0,
        lambda_summary: float = 1.0,
        omission_penalty: float = -0.5,
        min_reply_chars: int = 10,
        extra_channels: list[ChannelReward] | None = None,
        credit_abstention: bool = False,
    ) -> None:
        for name, value in (
            ("lambda_process", lambda_process),
            ("lambda_summary", lambda_summary),
            ("omission_penalty", omission_penalty),
        ):
            if not math.isfinite(value):
                raise ValueError(f"HierarchicalReward.{name} must be finite, got {value}")
        self.judge = judge if judge is not None else RuleJudge()
        self.process_weights = check_process_weights(process_weights)
        self.lambda_process = lambda_process
        self.lambda_summary = lambda_summary
        self.omission_penalty = omission_penalty
        self.min_reply_chars = min_reply_chars
        self.extra_channels = (
            [ActionReward(), RLTRReward()] if extra_channels is None else list(extra_channels)
        )
        self.credit_abstention = credit_abstention
        reserved = {"tool", "summary", "total"}
        for channel in self.extra_channels:
            if channel.name in reserved:
                raise ValueError(f"extra channel name {channel.name!r} clashes with HierR's own")
            reserved.add(channel.name)
        self.last_stats: dict[str, int] = {}
        self.num_judge_calls = 0
        self.num_judge_failures = 0

    @property
    def channel_names(self) -> set[str]:
        """``tool``, ``summary``, ``total`` and the extra channels' names."""
        return {"tool", "summary", "total", *(c.name for c in self.extra_channels)}

    def _reply_request(self, episode: Episode) -> JudgeRequest | None:
        """The judge request for this episode's final reply; None when it is too short."""
        reply = strip_think(episode.final_reply).strip()
        if len(reply) < self.min_reply_chars:
            return None
        results = [r.content for turn in episode.tool_results for r in turn]
        return JudgeRequest(
            question=task_question(episode.task),
            tool_results=results,
            reply=reply,
            reference=episode.task.metadata.get("reference_reply"),
        )

    def __call__(self, episodes: list[Episode]) -> RewardOutput:
        """Score ``episodes``; every tensor of the output has shape ``[B]``."""
        b = len(episodes)
        tool = [0.0] * b
        summary = [0.0] * b
        components = {k: [0.0] * b for k in PROCESS_COMPONENTS}
        omitted = [False] * b
        credited = [False] * b
        judge_rows: list[int] = []
        requests: list[JudgeRequest] = []

        for i, ep in enumerate(episodes):
            task = ep.task
            text = ep.response_text
            parsed = parse_tool_calls(text, task.allowed_tools)
            first = first_step_calls(ep.assistant_texts, task.allowed_tools)
            parts = process_reward_from_parse(parsed, task.gold_calls, self.process_weights, first)
            for k in PROCESS_COMPONENTS:
                components[k][i] = float(parts[k])
            has_call_tag = parsed.denominator > 0
            if task.needs_tools and not has_call_tag:
                omitted[i] = True
                summary[i] = self.omission_penalty
                continue
            abstains = self.credit_abstention and not task.needs_tools and not has_call_tag
            if abstains:
                components["fmt"][i] = 1.0
                parts["process"] += self.process_weights["fmt"] * (1.0 - parts["fmt"])
            tool[i] = float(parts["process"])
            request = None
            if self.credit_abstention and not task.needs_tools and has_call_tag:
                request = None  # a call the task did not want: its reply earns nothing
            elif ep.has_tool_response:
                request = self._reply_request(ep)
            elif abstains:
                request = self._reply_request(ep)
                credited[i] = request is not None
            if request is not None:
                judge_rows.append(i)
                requests.append(request)

        judge_called = [False] * b
        judge_failed = [False] * b
        judge_errors: Counter[str] = Counter()
        if requests:
            try:
                verdicts = self.judge.score(requests)
            except Exception as exc:  # an environment error, never a crash: score one by
                report_env_error(exc, "the summary judge", judge_errors)  # one, and only
                verdicts = []  # the requests that raise again get failed verdicts
                for request in requests:
                    try:
                        verdicts += self.judge.score([request])[:1]
                    except Exception as again:
                        report_env_error(again, "the summary judge", judge_errors)
                        verdicts.append(JudgeVerdict(0.0, failed=True))
            if len(verdicts) != len(requests):
                raise ValueError(
                    f"{type(self.judge).__name__}.score returned {len(verdicts)} verdicts "
                    f"for {len(requests)} requests"
                )
            for i, verdict in zip(judge_rows, verdicts, strict=True):
                judge_called[i] = True
                if verdict.failed:
                    judge_failed[i] = True
                    continue
                score = float(verdict.score)
                if not (math.isfinite(score) and 0.0 <= score <= 1.0):
                    raise ValueError(
                        f"judge score {score} outside [0, 1] at row {i} "
                        f"(task_id={episodes[i].task.task_id!r}); a judge must return a "
                        "score in [0, 1] or a failed verdict"
                    )
                summary[i] = score

        total = [
            self.omission_penalty
            if omitted[i]
            else self.lambda_process * tool[i] + self.lambda_summary * summary[i]
            for i in range(b)
        ]

        def f32(values: list[float]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.float32)

        def flag(values: list[bool]) -> torch.Tensor:
            return torch.tensor(values, dtype=torch.bool)

        channels = {"tool": f32(tool), "summary": f32(summary), "total": f32(total)}
        comps = {k: f32(v) for k, v in components.items()}
        for channel in self.extra_channels:
            values, extra = channel(episodes)
            check_finite(channel.name, values, episodes)
            channels[channel.name] = values.to(torch.float32)
            for name, value in extra.items():
                if name in comps:
                    raise ValueError(f"component {name!r} of channel {channel.name!r} clashes")
                comps[name] = value.to(torch.float32)

        output = RewardOutput(
            channels=channels,
            components=comps,
            flags={
                "omitted": flag(omitted),
                "judge_called": flag(judge_called),
                "judge_failed": flag(judge_failed),
                "abstention_credited": flag(credited),
            },
        )
        validate_reward_output(output, episodes)

        n_calls, n_failed = sum(judge_called), sum(judge_failed)
        self.num_judge_calls += n_calls
        self.num_judge_failures += n_failed
        self.last_stats = {
            "judge_calls": n_calls,
            "judge_failures": n_failed,
            "judge_batches": int(bool(requests)),
            "omitted": sum(omitted),
            "abstention_credited": sum(credited),
        }
        for name, count in judge_errors.items():  # exceptions judge.score raised, by type
            self.last_stats[f"judge_errors/{name}"] = count
        return output
