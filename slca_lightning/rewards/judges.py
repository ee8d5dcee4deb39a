"""Summary judges: rate the final reply of an episode in [0, 1] (METHOD §4.2).

The judge sees the user question, the tool results (not the calls) and the final reply.
:class:`LLMJudge` is the paper's judge (a frozen LLM at temperature 0 rating 1–5, mapped
r → (r − 1)/4) over any :class:`~slca_lightning.chat_backends.ChatBackend`.
:class:`~slca_lightning.rewards.rule_judge.RuleJudge` (its own module) is a deterministic,
offline stand-in for CPU runs and tests: a weighted mix of grounding, question coverage and
a length term.

Judges never raise on a bad reply or a broken backend: a failure is a verdict with
``score = 0`` and ``failed = True``, counted in ``num_failures``.
"""

from __future__ import annotations

import json
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.chat_backends.base import ChatBackend, chat_batch_tolerant

__all__ = [
    "DEFAULT_JUDGE_PROMPT",
    "JudgeRequest",
    "JudgeVerdict",
    "LLMJudge",
    "SummaryJudge",
    "parse_rating",
]


@dataclass
class JudgeRequest:
    """What the summary judge sees for one episode.

    Attributes:
        question: the user question.
        tool_results: the text of every tool observation, in order (not the calls).
        reply: the final reply (think tags already stripped).
        reference: a gold reply when the task carries one (``metadata["reference_reply"]``;
            read only by reference-based judges such as ``ReferenceJudge``).
    """

    question: str
    tool_results: list[str] = field(default_factory=list)
    reply: str = ""
    reference: str | None = None


@dataclass
class JudgeVerdict:
    """The judge's score for one request.

    Attributes:
        score: in [0, 1]; 0 when ``failed``.
        failed: True when the judge could not produce a rating (backend error,
            missing / unparseable / out-of-range rating).
        raw: the judge's raw output (LLM text, or the RuleJudge's term breakdown);
            None when there was none (e.g. the backend raised).
    """

    score: float
    failed: bool = False
    raw: str | None = None


class SummaryJudge(ABC):
    """Rates final replies in [0, 1]; one verdict per request, in order, never raising.

    Attributes:
        num_calls: requests scored so far (cumulative).
        num_failures: requests whose verdict failed so far (cumulative).
    """

    num_calls: int = 0
    num_failures: int = 0
    num_cache_hits: int = 0

    @property
    def stats(self) -> dict[str, int]:
        """``judge_calls``, ``judge_failed`` and ``judge_cache_hits`` so far (cumulative)."""
        return {
            "judge_calls": int(self.num_calls),
            "judge_failed": int(self.num_failures),
            "judge_cache_hits": int(self.num_cache_hits),
        }

    @abstractmethod
    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """Return one :class:`JudgeVerdict` per request, in order."""


# --------------------------------------------------------------------------- RuleJudge

DEFAULT_JUDGE_PROMPT = """You are grading the final reply of an AI assistant that could call tools.

Read the user's question, the results the tools returned, and the assistant's final reply.
Rate the final reply from 1 (very poor) to 5 (excellent) on:
1. correct interpretation of the tool results (no invented or contradicted facts);
2. coverage of every part of the user's question;
3. clarity and helpfulness.
If no tool results are shown, judge whether the reply answers or correctly declines the
request without tools.

[User question]
{question}

[Tool results]
{tool_results}

[Final reply]
{reply}

Explain your judgement briefly, then give the rating as an integer from 1 to 5 on the last
line, inside a rating tag, for example: <rating>4</rating>"""

_RATING_RE = re.compile(r"<rating>\s*(.*?)\s*</rating>", re.IGNORECASE | re.DOTALL)


def parse_rating(text: str) -> int | None:
    """The integer in the last ``<rating>…</rating>`` tag of ``text`` if it is 1–5, else None."""
    tags = _RATING_RE.findall(text)
    if not tags:
        return None
    last = tags[-1].strip()
    if not re.fullmatch(r"[+]?\d+", last):
        return None
    rating = int(last)
    return rating if 1 <= rating <= 5 else None


def middle_cut(text: str, limit: int | None) -> str:
    if limit is None or len(text) <= limit:
        return text
    half = max(limit // 2, 1)
    return f"{text[:half]}\n…[{len(text) - 2 * half} characters cut]…\n{text[-half:]}"


class LLMJudge(SummaryJudge):
    """The paper's summary judge: a frozen LLM rates the reply 1–5, mapped to (r − 1)/4.

    For each request the prompt (``prompt_template`` with ``{question}``,
    ``{tool_results}`` and ``{reply}`` replaced by plain substitution, so other braces
    need no escaping) goes out as one user message; the batch goes through
    ``backend.chat_batch``. The last ``<rating>N</rating>`` tag of the output is parsed
    (:func:`parse_rating`); a missing, non-integer or out-of-range rating, a non-string
    reply or a backend exception gives ``score = 0, failed = True``, counted in
    ``num_failures``. If ``chat_batch`` raises, the requests are retried one by one with
    ``backend.chat`` so one bad request does not fail its batch mates.

    Args:
        backend: the chat backend of the judge model.
        temperature: sampling temperature (paper: 0).
        max_tokens: cap on the judge's output tokens.
        prompt_template: the user prompt (default :data:`DEFAULT_JUDGE_PROMPT`).
        seed: sampling seed passed to the backend.
        max_result_chars: each tool result is middle-cut to this many characters
            (None: no cut).
        cache: reuse the judge's output for an identical request; the key is the rendered
            prompt with temperature, max_tokens and seed. Failed verdicts are not cached.
        cache_path: SQLite file for the cache (WAL, kept across restarts; None: memory).
    """

    def __init__(
        self,
        backend: ChatBackend,
        temperature: float = 0.0,
        max_tokens: int | None = 1024,
        prompt_template: str = DEFAULT_JUDGE_PROMPT,
        seed: int | None = None,
        max_result_chars: int | None = 4000,
        cache: bool = False,
        cache_path: str | None = None,
    ) -> None:
        from slca_lightning.calls.result_cache import SimulatorCache

        self.backend = backend
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.prompt_template = prompt_template
        self.seed = seed
        self.max_result_chars = max_result_chars
        self.num_calls = 0
        self.num_failures = 0
        self.num_cache_hits = 0
        self.cache = SimulatorCache(cache_path) if cache or cache_path else None

    def _key(self, messages: list[dict[str, Any]]) -> tuple[str, ...]:
        settings = json.dumps([self.temperature, self.max_tokens, self.seed])
        return ("judge", settings, messages[-1]["content"])

    def build_messages(self, request: JudgeRequest) -> list[dict[str, Any]]:
        """The chat messages sent to the judge for one request."""
        if request.tool_results:
            results = "\n\n".join(
                f"({i}) {middle_cut(r, self.max_result_chars)}"
                for i, r in enumerate(request.tool_results, 1)
            )
        else:
            results = "(no tool results)"
        prompt = (
            self.prompt_template.replace("{question}", request.question)
            .replace("{tool_results}", results)
            .replace("{reply}", request.reply)
        )
        return [{"role": "user", "content": prompt}]

    def _verdict(self, raw: Any) -> JudgeVerdict:
        if not isinstance(raw, str):
            return JudgeVerdict(0.0, True, None if raw is None else repr(raw))
        rating = parse_rating(raw)
        if rating is None:
            return JudgeVerdict(0.0, True, raw)
        return JudgeVerdict((rating - 1) / 4, False, raw)

    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """Rate every request with one ``chat_batch`` call; never raises."""
        if not requests:
            return []
        kw = {"temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed}
        everything = [self.build_messages(r) for r in requests]
        cached = [None if self.cache is None else self.cache.get(self._key(m)) for m in everything]
        self.num_cache_hits += sum(c is not None for c in cached)
        todo = [i for i, c in enumerate(cached) if c is None]
        fresh = self._ask([everything[i] for i in todo], kw) if todo else []
        outputs: list[Any] = list(cached)
        for i, raw in zip(todo, fresh):
            outputs[i] = raw
        verdicts = [self._verdict(raw) for raw in outputs]
        if self.cache is not None:
            for i, raw in zip(todo, fresh):
                if not verdicts[i].failed:
                    self.cache.put(self._key(everything[i]), raw)
        self.num_calls += len(verdicts)
        self.num_failures += sum(v.failed for v in verdicts)
        return verdicts

    def _ask(self, batch: list[list[dict[str, Any]]], kw: dict[str, Any]) -> list[Any]:
        """The backend's raw outputs for ``batch`` (None where a request failed)."""
        return chat_batch_tolerant(self.backend, batch, **kw)
