"""RLTR's planner reward (METHOD §5): does the tool sequence cover the query?

    R = R_comp + R_repeat + R_error          (R = −1 when the output is malformed)
    R_comp   = fraction of N verifier verdicts saying the calls cover the query   ∈ [0, 1]
    R_repeat = −0.1 × (calls identical to the call right before them)
    R_error  = −0.2 × (invalid calls)

"Calls" are the calls of the valid ``<tool_call>`` blocks of the whole response, in order
(parallel calls of one block in their written order), after stripping ``<think>`` text.
Two calls are identical when their names and canonical arguments (sorted-key JSON) are.
Invalid calls and malformedness come from the parser
(:class:`~slca_lightning.calls.parsing.ParseResult` ``.n_invalid_calls`` / ``.malformed``).
The verifier is pluggable: :class:`GoldCoverageVerifier` is deterministic and offline,
:class:`LLMCompletenessVerifier` asks an LLM N times. Under RLTR only the tool tokens learn
from this channel (the summariser is frozen).
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from collections import Counter
from typing import Any

import torch

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.chat_backends.base import ChatBackend, chat_batch_tolerant
from slca_lightning.rewards.base import ChannelReward, check_finite, task_question
from slca_lightning.types import Episode, Task, ToolCall

__all__ = [
    "DEFAULT_COMPLETENESS_PROMPT",
    "CompletenessVerifier",
    "GoldCoverageVerifier",
    "LLMCompletenessVerifier",
    "RLTRReward",
    "canonical_call",
    "count_consecutive_repeats",
]


def canonical_call(call: ToolCall) -> str:
    """A call's identity: its name and sorted-key JSON arguments."""
    args = json.dumps(call.arguments, sort_keys=True, ensure_ascii=False, default=str)
    return f"{call.name}\x00{args}"


def count_consecutive_repeats(calls: list[ToolCall]) -> int:
    """How many calls are identical (:func:`canonical_call`) to the call right before them."""
    keys = [canonical_call(c) for c in calls]
    return sum(keys[i] == keys[i - 1] for i in range(1, len(keys)))


class CompletenessVerifier(ABC):
    """Judges whether a sequence of tool calls covers everything a task's query needs.

    Attributes:
        n: the default number of verdicts per episode.
    """

    n: int = 1

    @abstractmethod
    def verdicts(self, task: Task, calls: list[ToolCall], n: int) -> list[bool]:
        """Return ``n`` verdicts (True = the calls cover the query)."""

    def verdicts_batch(self, items: list[tuple[Task, list[ToolCall]]], n: int) -> list[list[bool]]:
        """Verdicts for several episodes; the default loops over :meth:`verdicts`."""
        return [self.verdicts(task, calls, n) for task, calls in items]


class GoldCoverageVerifier(CompletenessVerifier):
    """Deterministic verifier: covers iff every gold call name appears among the predicted
    calls, counted as a multiset (two gold ``search`` calls need two predicted ones).

    Arguments are not compared. A task with no gold call is always covered. The same
    verdict is returned ``n`` times, so ``R_comp`` is 0 or 1.
    """

    def verdicts(self, task: Task, calls: list[ToolCall], n: int) -> list[bool]:
        """``n`` copies of the gold-name-coverage verdict."""
        gold_steps, _ = normalize_gold_calls(task.gold_calls)
        need = Counter(c.name for step in gold_steps for c in step)
        have = Counter(c.name for c in calls)
        covered = all(have[name] >= k for name, k in need.items())
        return [covered] * n


DEFAULT_COMPLETENESS_PROMPT = """You check the plan of an AI assistant that calls tools.

[User query]
{question}

[Available tools]
{tools}

[Tool calls the assistant made, in order]
{calls}

Do these tool calls gather everything needed to fully answer every part of the query?
Think briefly, then answer on the last line with <answer>yes</answer> or <answer>no</answer>."""

_ANSWER_RE = re.compile(r"<answer>\s*(yes|no)\s*</answer>", re.IGNORECASE)


class LLMCompletenessVerifier(CompletenessVerifier):
    """Asks an LLM ``n`` times whether the tool sequence covers the query (yes/no).

    Each sample is one user message (``prompt_template`` with ``{question}``, ``{tools}``
    and ``{calls}`` substituted); the verdict is the last ``<answer>yes|no</answer>`` tag.
    A backend exception or a missing answer gives False and is counted in
    ``num_failures``. All samples of all episodes go out in one ``chat_batch``; if it
    raises, the requests are retried one by one.

    Args:
        backend: the verifier model's chat backend.
        n: verdicts per episode.
        temperature: sampling temperature (> 0 so that the n samples differ).
        max_tokens: cap on output tokens.
        prompt_template: the user prompt (default :data:`DEFAULT_COMPLETENESS_PROMPT`).
    """

    def __init__(
        self,
        backend: ChatBackend,
        n: int = 4,
        temperature: float = 0.7,
        max_tokens: int | None = 512,
        prompt_template: str = DEFAULT_COMPLETENESS_PROMPT,
    ) -> None:
        if n < 1:
            raise ValueError(f"LLMCompletenessVerifier needs n ≥ 1, got {n}")
        self.backend = backend
        self.n = n
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.prompt_template = prompt_template
        self.num_calls = 0
        self.num_failures = 0

    def build_messages(self, task: Task, calls: list[ToolCall]) -> list[dict[str, Any]]:
        """The chat messages of one verdict request."""
        tools = ", ".join(task.allowed_tools) or "(none listed)"
        lines = [
            json.dumps({"name": c.name, "arguments": c.arguments}, ensure_ascii=False, default=str)
            for c in calls
        ]
        prompt = (
            self.prompt_template.replace("{question}", task_question(task))
            .replace("{tools}", tools)
            .replace("{calls}", "\n".join(lines) or "(no tool calls)")
        )
        return [{"role": "user", "content": prompt}]

    @staticmethod
    def parse_answer(text: Any) -> bool | None:
        """True / False from the last answer tag; None when there is none."""
        if not isinstance(text, str):
            return None
        answers = _ANSWER_RE.findall(text)
        return answers[-1].lower() == "yes" if answers else None

    def verdicts(self, task: Task, calls: list[ToolCall], n: int) -> list[bool]:
        """``n`` sampled verdicts for one episode."""
        return self.verdicts_batch([(task, calls)], n)[0]

    def verdicts_batch(self, items: list[tuple[Task, list[ToolCall]]], n: int) -> list[list[bool]]:
        """All ``len(items) × n`` samples in one ``chat_batch``; never raises."""
        if not items:
            return []
        batch = [self.build_messages(task, calls) for task, calls in items for _ in range(n)]
        kw = {"temperature": self.temperature, "max_tokens": self.max_tokens}
        outputs = chat_batch_tolerant(self.backend, batch, **kw)
        parsed = [self.parse_answer(o) for o in outputs]
        self.num_calls += len(parsed)
        self.num_failures += sum(p is None for p in parsed)
        flat = [bool(p) for p in parsed]
        return [flat[i * n : (i + 1) * n] for i in range(len(items))]


class RLTRReward(ChannelReward):
    """Channel ``"rltr"``: R_comp + R_repeat + R_error per episode, −1 when malformed.

    Components (``FloatTensor[B]``): ``rltr_comp``, ``rltr_repeat``, ``rltr_error`` (all
    0 on malformed rows, where the verifier is not asked) and ``rltr_malformed`` (1.0 on
    malformed rows).

    One of :class:`~slca_lightning.rewards.hierarchical.HierarchicalReward`'s default extra
    channels: with the default verifier it is a rule over the parsed calls and the gold
    (no model call), cheap enough to compute on every batch whichever router runs.

    Args:
        verifier: the completeness verifier (default :class:`GoldCoverageVerifier`).
        n: verdicts per episode (None: the verifier's own ``n``).
        repeat_penalty: per consecutive repeated call (paper: −0.1).
        error_penalty: per invalid call (paper: −0.2).
        malformed_reward: the whole reward of a malformed output (paper: −1).
        name: the channel's key.
    """

    def __init__(
        self,
        verifier: CompletenessVerifier | None = None,
        n: int | None = None,
        repeat_penalty: float = -0.1,
        error_penalty: float = -0.2,
        malformed_reward: float = -1.0,
        name: str = "rltr",
    ) -> None:
        self.verifier = verifier if verifier is not None else GoldCoverageVerifier()
        self.n = n
        self.repeat_penalty = repeat_penalty
        self.error_penalty = error_penalty
        self.malformed_reward = malformed_reward
        self.name = name

    def __call__(self, episodes: list[Episode]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Return ``(FloatTensor[B] rewards, components)``; see the class docstring."""
        n = self.n if self.n is not None else max(int(getattr(self.verifier, "n", 1)), 1)
        b = len(episodes)
        comp, repeat, error, malformed = [0.0] * b, [0.0] * b, [0.0] * b, [0.0] * b
        to_verify: list[int] = []
        items: list[tuple[Task, list[ToolCall]]] = []
        for i, ep in enumerate(episodes):
            parsed = parse_tool_calls(ep.response_text, ep.task.allowed_tools)
            if parsed.malformed:
                malformed[i] = 1.0
                continue
            calls = list(parsed.calls)
            repeat[i] = self.repeat_penalty * count_consecutive_repeats(calls)
            error[i] = self.error_penalty * parsed.n_invalid_calls
            to_verify.append(i)
            items.append((ep.task, calls))
        for i, verdicts in zip(to_verify, self.verifier.verdicts_batch(items, n), strict=True):
            if len(verdicts) != n:
                raise ValueError(
                    f"verifier returned {len(verdicts)} verdicts for row {i} "
                    f"(task_id={episodes[i].task.task_id!r}), expected {n}"
                )
            comp[i] = sum(bool(v) for v in verdicts) / n
        total = [
            self.malformed_reward if malformed[i] else comp[i] + repeat[i] + error[i]
            for i in range(b)
        ]
        values = torch.tensor(total, dtype=torch.float32)
        components = {
            "rltr_comp": torch.tensor(comp, dtype=torch.float32),
            "rltr_repeat": torch.tensor(repeat, dtype=torch.float32),
            "rltr_error": torch.tensor(error, dtype=torch.float32),
            "rltr_malformed": torch.tensor(malformed, dtype=torch.float32),
        }
        check_finite(self.name, values, episodes)
        return values, components
