"""Data types that flow through slca_lightning: tasks → episodes → rollout batch → rewards.

Shape legend (used in docstrings and inline comments across the package):

- ``B``: rows of a rollout batch = prompts_per_step × group_size (one row per episode).
- ``T``: padded token length of a row (prompt + response, left-aligned, right-padded).
- ``V``: vocabulary size.
- ``G``: group size (rollouts of one prompt); rows of one group share a ``group_id``.

Token-aligned tensors (``[B, T]``) are aligned with ``input_ids``: position ``t`` holds a
quantity about token ``input_ids[b, t]`` (its log-probability given ``input_ids[b, :t]``,
its advantage, whether the policy sampled it). Position 0 is never a sampled token.

Masks are ``torch.bool``; log-probabilities and advantages are ``torch.float32`` even when
the policy runs in bf16. Every dataclass is mutable: Lightning moves dataclasses between
devices field by field and refuses frozen ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields, is_dataclass
from typing import Any

import torch

__all__ = [
    "Episode",
    "RewardOutput",
    "RolloutBatch",
    "Segments",
    "Task",
    "ToolCall",
    "ToolResult",
]


@dataclass
class ToolCall:
    """One function call: a tool name and its JSON-object arguments."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass
class ToolResult:
    """The observation returned for one :class:`ToolCall`.

    Attributes:
        call: the call that produced it.
        content: the text shown to the policy inside ``<tool_response>``.
        is_error: True when the observation is an error (validation, backend failure).
        error_kind: a short machine-readable reason, e.g. ``"unknown_tool"``,
            ``"missing_arguments"``, ``"backend_error"``, ``"timeout"``; None when fine.
        latency_s: wall time spent producing it.
    """

    call: ToolCall
    content: str
    is_error: bool = False
    error_kind: str | None = None
    latency_s: float = 0.0


@dataclass
class Task:
    """One prompt with its tools and its gold calls.

    Attributes:
        task_id: a stable identifier (used for seeding, caching and logging).
        messages: the chat prompt (``[{"role": ..., "content": ...}, ...]``).
        tools: the JSON schemas of the available tools, OpenAI ``{"type": "function",
            "function": {...}}`` form.
        allowed_tools: names a call may use (METHOD §4.1 checks names against it).
        gold_calls: the reference calls, one list per step; parallel calls share a step.
        question: the user question shown to the summary judge.
        subset: ``"tool_call"`` or ``"irrelevant"`` (gold = no call).
        gold_format: ``"nested"`` (steps of calls with arguments) or ``"flat"`` (a flat
            list of names, as in some released rows: each name becomes its own step with
            no arguments).
        metadata: anything else the loader kept (source, line number, ...).
    """

    task_id: str
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = field(default_factory=list)
    allowed_tools: list[str] = field(default_factory=list)
    gold_calls: list[list[ToolCall]] = field(default_factory=list)
    question: str = ""
    subset: str = "tool_call"
    gold_format: str = "nested"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def needs_tools(self) -> bool:
        """True when the gold asks for at least one call."""
        return any(len(step) > 0 for step in self.gold_calls)


@dataclass
class Episode:
    """One multi-turn rollout of a task, kept as token ids end to end.

    ``response_ids`` is everything after the prompt: the sampled ids of every assistant
    turn plus the rendered ids of the tool turns between them. ``assistant_mask`` and
    ``logprobs`` have the same length as ``response_ids``; the mask is 1 only on sampled
    tokens, and ``logprobs`` holds the sampler's log-probability there (0 elsewhere).

    Attributes:
        task: the task this episode answers.
        group_id: rows with the same id were sampled from the same prompt.
        prompt_ids: the rendered prompt ids.
        response_ids: see above.
        assistant_mask: see above.
        logprobs: see above.
        assistant_texts: the decoded text of each assistant turn, in order.
        tool_results: for each assistant turn, the observations of its calls
            (an empty list for a turn without calls, e.g. the final summary).
        finish_reason: ``"stop"`` (the model ended), ``"length"`` (token cap),
            ``"max_turns"`` (turn cap).
        policy_version: the optimiser-step count of the weights that sampled it.
    """

    task: Task
    group_id: int = 0
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    assistant_mask: list[bool] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    assistant_texts: list[str] = field(default_factory=list)
    tool_results: list[list[ToolResult]] = field(default_factory=list)
    finish_reason: str = "stop"
    policy_version: int = 0

    @property
    def response_text(self) -> str:
        """All assistant turns joined by newlines (what the process reward scores)."""
        return "\n".join(self.assistant_texts)

    @property
    def has_tool_response(self) -> bool:
        """True when at least one tool observation was appended to the episode."""
        return any(len(results) > 0 for results in self.tool_results)

    @property
    def final_reply(self) -> str:
        """The text after the last tool response: assistant turns after the last turn
        whose calls got observations, joined (the whole response when there were none)."""
        last = -1
        for i, results in enumerate(self.tool_results):
            if results:
                last = i
        return "\n".join(self.assistant_texts[last + 1 :])

    @property
    def truncated(self) -> bool:
        """True when the episode was cut by the token or turn cap."""
        return self.finish_reason in ("length", "max_turns")


@dataclass
class RolloutBatch:
    """A padded batch of episodes ready for the loss.

    Attributes:
        input_ids: ``LongTensor[B, T]``, prompt then response, right-padded.
        attention_mask: ``BoolTensor[B, T]``, 1 on real tokens.
        assistant_mask: ``BoolTensor[B, T]``, 1 only on tokens the policy sampled.
        group_ids: ``LongTensor[B]``, rows of one prompt share an id (any int64 values).
        old_logprobs: ``FloatTensor[B, T]`` log-probs under the sampling policy, or None.
        ref_logprobs: ``FloatTensor[B, T]`` log-probs under the reference, or None.
        truncated: ``BoolTensor[B]``, the episode hit a cap.
        episodes: the source episodes, row-aligned (not moved between devices).
        stats: rollout-side figures for logging (times, counts), keyed ``rollout/...``.
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    assistant_mask: torch.Tensor
    group_ids: torch.Tensor
    old_logprobs: torch.Tensor | None = None
    ref_logprobs: torch.Tensor | None = None
    truncated: torch.Tensor | None = None
    episodes: list[Episode] = field(default_factory=list)
    stats: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        b, t = self.input_ids.shape
        for name in ("attention_mask", "assistant_mask", "old_logprobs", "ref_logprobs"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (b, t):
                raise ValueError(
                    f"RolloutBatch.{name} has shape {tuple(value.shape)}, "
                    f"but input_ids has shape {(b, t)}"
                )
        for name in ("group_ids", "truncated"):
            value = getattr(self, name)
            if value is not None and tuple(value.shape) != (b,):
                raise ValueError(
                    f"RolloutBatch.{name} has shape {tuple(value.shape)}, expected ({b},)"
                )

    @property
    def batch_size(self) -> int:
        return int(self.input_ids.shape[0])


@dataclass
class Segments:
    """Which tokens belong to which segment.

    Attributes:
        masks: segment name → ``BoolTensor[B, T]``; at least ``"tool"`` and ``"summary"``;
            the masks are disjoint and their union is the assistant mask.
        present: segment name → ``BoolTensor[B]``; whether the row takes part in that
            segment's channel (METHOD §3: ``tool`` iff K ≥ 2 runs, ``summary`` iff K ≥ 1).
    """

    masks: dict[str, torch.Tensor]
    present: dict[str, torch.Tensor]


@dataclass
class RewardOutput:
    """Per-row rewards split into channels.

    Attributes:
        channels: channel name → ``FloatTensor[B]``; at least ``"tool"``, ``"summary"``
            and ``"total"`` (plus e.g. ``"action"`` for ToolPO, ``"rltr"`` for RLTR).
        components: name → ``FloatTensor[B]``, parts kept for logging (fmt, name, ...).
        flags: name → ``BoolTensor[B]``, e.g. ``"omitted"``, ``"judge_failed"``.
    """

    channels: dict[str, torch.Tensor]
    components: dict[str, torch.Tensor] = field(default_factory=dict)
    flags: dict[str, torch.Tensor] = field(default_factory=dict)

    def log_dict(self, prefix: str = "reward") -> dict[str, float]:
        """Mean of every channel, component and flag, keyed ``{prefix}/{name}``."""
        out: dict[str, float] = {}
        for group in (self.channels, self.components, self.flags):
            for name, value in group.items():
                if value.numel():
                    out[f"{prefix}/{name}"] = float(value.float().mean())
        return out


def to_device(obj: Any, device: torch.device | str) -> Any:
    """Move every tensor field of a dataclass (recursively through dicts) to ``device``."""
    if isinstance(obj, torch.Tensor):
        return obj.to(device)
    if isinstance(obj, dict):
        return {k: to_device(v, device) for k, v in obj.items()}
    if is_dataclass(obj) and not isinstance(obj, type):
        for f in fields(obj):
            value = getattr(obj, f.name)
            if isinstance(value, (torch.Tensor, dict)):
                setattr(obj, f.name, to_device(value, device))
        return obj
    return obj
