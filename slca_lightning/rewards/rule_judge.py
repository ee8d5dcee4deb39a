"""The rule judge: a deterministic, offline summary judge for CPU runs and tests (METHOD §4.2).

:class:`RuleJudge` scores a final reply by a weighted mix of grounding (facts of the tool
results it repeats, :func:`extract_facts`), question coverage and a length term; it never
calls a model.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from slca_lightning.rewards.judges import JudgeRequest, JudgeVerdict, SummaryJudge

__all__ = ["STOP_WORDS", "RuleJudge", "extract_facts"]

_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom why will with would you your
    yours yourself yourselves also get give tell show find please need want like know let
    us use using can't cannot could may might must shall one two s t d ll m re ve y
"""
#: Words the coverage term ignores (English function words and request verbs).
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

_NUMBER_RE = re.compile(r"(?<![\w.])-?\d+(?:,\d{3})*(?:\.\d+)?(?!\w)")
_QUOTED_RE = re.compile(r"\"([^\"\n]{2,60})\"|“([^”\n]{2,60})”|(?<!\w)'([^'\n]{2,60})'(?!\w)")
_CAPITAL_RE = re.compile(r"\b[A-Z][A-Za-z0-9_\-]*[A-Za-z0-9]\b")
_TOKEN_RE = re.compile(r"[a-z0-9]+")


def _tokens(text: str) -> list[str]:
    return _TOKEN_RE.findall(text.lower())


def _parse_number(text: str) -> float | None:
    try:
        value = float(text.replace(",", ""))
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _numbers(text: str) -> set[float]:
    out = set()
    for match in _NUMBER_RE.findall(text):
        value = _parse_number(match)
        if value is not None:
            out.add(value)
    return out


def _stem(word: str) -> str:
    for suffix in ("ing", "ies", "es", "ed", "s"):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            return word[: -len(suffix)] + ("y" if suffix == "ies" else "")
    return word


def _text_facts(text: str, strings: set[str], numbers: set[float]) -> None:
    """Salient facts of free text: numbers, quoted values, capitalised tokens."""
    numbers.update(_numbers(text))
    for groups in _QUOTED_RE.findall(text):
        quoted = next(g for g in groups if g)
        toks = _tokens(quoted)
        if toks:
            strings.add(" ".join(toks))
    for word in _CAPITAL_RE.findall(text):
        toks = _tokens(word)
        if toks and not (len(toks) == 1 and toks[0] in STOP_WORDS):
            strings.add(" ".join(toks))


def _json_facts(value: Any, strings: set[str], numbers: set[float], max_words: int) -> None:
    """Salient facts of a parsed JSON value: its leaf values (keys are not facts).

    Iterative, so that deeply nested results cannot exhaust the stack.
    """
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, bool) or item is None:
            continue  # true/false/null are too unspecific to count as grounding
        elif isinstance(item, (int, float)):
            try:
                value = float(item)
            except OverflowError:  # an integer beyond float range: a fact no reply restates
                continue
            if math.isfinite(value):
                numbers.add(value)
        elif isinstance(item, str):
            number = _parse_number(item.strip())
            toks = _tokens(item)
            if number is not None:
                numbers.add(number)
            elif 0 < len(toks) <= max_words and len(" ".join(toks)) >= 2:
                strings.add(" ".join(toks))
            elif toks:
                _text_facts(item, strings, numbers)


def extract_facts(tool_results: list[str], max_words: int = 6) -> tuple[set[str], set[float]]:
    """The salient facts of some tool results, as (normalised strings, numbers).

    A result that parses as JSON contributes its leaf values: numbers (and numeric
    strings) as numbers, strings of at most ``max_words`` words whole, longer strings as
    free text. Other results are free text: every number, every quoted value (2–60
    characters) and every capitalised token that is not a stop word. Strings are
    normalised to lower-case alphanumeric tokens joined by one space.
    """
    strings: set[str] = set()
    numbers: set[float] = set()
    for result in tool_results:
        try:
            parsed = json.loads(result)
        except (ValueError, TypeError, RecursionError):
            parsed = None
        if isinstance(parsed, (dict, list)):
            _json_facts(parsed, strings, numbers, max_words)
        else:
            _text_facts(result, strings, numbers)
    strings = {s for s in strings if len(s) >= 2}
    return strings, numbers


class RuleJudge(SummaryJudge):
    """A deterministic heuristic summary judge in [0, 1] (an offline stand-in for an LLM).

    ``score = (w_g·grounding + w_c·coverage + w_l·length) / (sum of the weights in use)``:

    - **grounding**: the salient facts of the tool results (see :func:`extract_facts`:
      JSON leaf values, or numbers / quoted values / capitalised tokens of free text)
      that appear in the reply, as a fraction of ``min(#facts, grounding_saturation)``
      (capped at 1) — citing ``grounding_saturation`` facts of a large result is full
      grounding. A string fact appears when its tokens occur contiguously in the reply's
      tokens; a number when the reply contains the same number (thousands separators
      ignored, relative tolerance 1e-6). With no facts at all the term is left out and
      the other weights renormalised.
    - **coverage**: the fraction of the question's distinct content words (lower-case
      alphanumeric tokens of ≥ 3 characters, stop words removed, light suffix stemming:
      -s, -es, -ies, -ed, -ing) that occur in the reply. Left out when the question has
      no content word.
    - **length**: in words ``n``; ``n / min_words`` below ``min_words`` (a ramp from 0),
      1 in ``[min_words, max_words]``, ``max_words / n`` above (a slow decay).

    An empty reply scores 0. Never fails; ``raw`` holds the three terms.

    Args:
        grounding_weight: ``w_g``.
        coverage_weight: ``w_c``.
        length_weight: ``w_l``.
        grounding_saturation: facts needed for full grounding.
        min_words: shortest reply of full length score.
        max_words: longest reply of full length score.
        max_fact_words: longest JSON string (in words) kept whole as one fact.
    """

    def __init__(
        self,
        grounding_weight: float = 0.5,
        coverage_weight: float = 0.3,
        length_weight: float = 0.2,
        grounding_saturation: int = 5,
        min_words: int = 8,
        max_words: int = 300,
        max_fact_words: int = 6,
    ) -> None:
        weights = (grounding_weight, coverage_weight, length_weight)
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"RuleJudge weights must be ≥ 0 with a positive sum, got {weights}")
        if grounding_saturation < 1 or min_words < 1 or max_words < min_words:
            raise ValueError(
                "RuleJudge needs grounding_saturation ≥ 1 and 1 ≤ min_words ≤ max_words"
            )
        self.grounding_weight = grounding_weight
        self.coverage_weight = coverage_weight
        self.length_weight = length_weight
        self.grounding_saturation = grounding_saturation
        self.min_words = min_words
        self.max_words = max_words
        self.max_fact_words = max_fact_words
        self.num_calls = 0
        self.num_failures = 0

    def terms(self, request: JudgeRequest) -> dict[str, float | None]:
        """The three terms for one request (None = left out for lack of material)."""
        reply_tokens = _tokens(request.reply)
        reply_padded = " " + " ".join(reply_tokens) + " "
        reply_numbers = _numbers(request.reply)

        strings, numbers = extract_facts(request.tool_results, self.max_fact_words)
        n_facts = len(strings) + len(numbers)
        grounding: float | None = None
        if n_facts:
            hits = sum(f" {s} " in reply_padded for s in strings)
            hits += sum(
                any(abs(x - y) <= 1e-6 * max(1.0, abs(x)) for y in reply_numbers) for x in numbers
            )
            grounding = min(1.0, hits / min(n_facts, self.grounding_saturation))

        content = {
            _stem(t) for t in _tokens(request.question) if len(t) >= 3 and t not in STOP_WORDS
        }
        coverage: float | None = None
        if content:
            reply_stems = {_stem(t) for t in reply_tokens}
            coverage = len(content & reply_stems) / len(content)

        n = len(request.reply.split())
        if n < self.min_words:
            length = n / self.min_words
        elif n <= self.max_words:
            length = 1.0
        else:
            length = self.max_words / n
        return {"grounding": grounding, "coverage": coverage, "length": length}

    def score_one(self, request: JudgeRequest) -> JudgeVerdict:
        """Score one request (see the class docstring)."""
        if not request.reply.strip():
            return JudgeVerdict(0.0, False, "empty reply")
        terms = self.terms(request)
        pairs = [
            (terms["grounding"], self.grounding_weight),
            (terms["coverage"], self.coverage_weight),
            (terms["length"], self.length_weight),
        ]
        used = [(v, w) for v, w in pairs if v is not None and w > 0]
        total_w = sum(w for _, w in used)
        score = sum(v * w for v, w in used) / total_w if total_w > 0 else 0.0
        score = min(1.0, max(0.0, score))
        raw = ";".join(f"{k}={'-' if v is None else f'{v:.4f}'}" for k, v in terms.items())
        return JudgeVerdict(score, False, raw)

    def score(self, requests: list[JudgeRequest]) -> list[JudgeVerdict]:
        """Score every request deterministically; never fails."""
        self.num_calls += len(requests)
        return [self.score_one(r) for r in requests]


# --------------------------------------------------------------------------- LLMJudge
