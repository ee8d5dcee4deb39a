"""Hermes ``<tool_call>`` parser: model text → calls, with a reason for everything invalid.

The policy writes its calls in the hermes format::

    <tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>
    <tool_call>[{"name": "a", "arguments": {}}, {"name": "b", "parameters": {"x": 1}}]</tool_call>

A block holds one JSON object or a non-empty list of objects (parallel calls). Each object
needs a non-empty string ``name`` (in ``allowed_tools`` when given) and ``arguments`` or
``parameters`` that is a JSON object (missing counts as ``{}``). METHOD §4.1 scores format
as ``valid blocks / max(opens, closes)``; this module computes everything that needs.

Rules, in the order they are applied:

1. Reasoning is stripped first (:func:`strip_think`): complete ``<think>…</think>`` and
   ``<thinking>…</thinking>`` blocks (non-greedy, across newlines) are removed, exactly as
   :data:`THINK_RE` would. An *unclosed* ``<think>`` is left in place, text after it
   included: METHOD strips blocks, and a model that never closes its reasoning should not
   have that tail silently discarded (or counted differently from the reference regex).
2. Blocks are found by a linear scan with ``str.find``: each ``<tool_call>`` is paired with
   the next ``</tool_call>`` after it (the same pairing as the usual non-greedy regex, but
   linear when a megabyte of opens has no close). A nested ``<tool_call>`` thus ends up in
   the block's text and makes it invalid JSON.
3. ``n_open`` / ``n_close`` are raw counts in the stripped text, so every unmatched tag
   still counts in the format denominator.
4. ``json.loads`` runs with default strictness (``NaN``/``Infinity`` literals are accepted
   by Python's json; raw control characters inside strings are not). Every exception it
   can raise, ``RecursionError`` on deep nesting included, becomes ``"invalid_json"``.
5. ``arguments`` given as a JSON *string* holding an object (some models emit this) is
   invalid (``"arguments_not_dict"``) by default, as METHOD requires a dict; pass
   ``accept_string_arguments=True`` to decode it (for lenient execution, not for scoring).
   If both ``arguments`` and ``parameters`` are present, ``arguments`` wins. A whitespace-only
   name counts as missing.

Nothing here raises on model output.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.types import ToolCall

__all__ = [
    "THINK_RE",
    "TOOL_CALL_CLOSE",
    "TOOL_CALL_OPEN",
    "CallEntry",
    "ParseResult",
    "ParsedBlock",
    "parse_tool_calls",
    "strip_think",
]

TOOL_CALL_OPEN = "<tool_call>"
TOOL_CALL_CLOSE = "</tool_call>"

#: What :func:`strip_think` removes, as a regex (for reference and small inputs).
#: ``strip_think`` itself uses a linear scan with identical results, because this regex is
#: quadratic on many unclosed ``<think>`` tags. Unclosed tags are not matched (kept).
THINK_RE = re.compile(r"<think>.*?</think>|<thinking>.*?</thinking>", re.DOTALL)

_THINK_PAIRS = (("<think>", "</think>"), ("<thinking>", "</thinking>"))

# Block-level reasons.
INVALID_JSON = "invalid_json"
EMPTY_LIST = "empty_list"
NOT_OBJECT_OR_LIST = "not_object_or_list"
INVALID_ENTRY = "invalid_entry"
# Entry-level reasons.
NOT_OBJECT = "not_object"
MISSING_NAME = "missing_name"
UNKNOWN_TOOL = "unknown_tool"
ARGUMENTS_NOT_DICT = "arguments_not_dict"


def strip_think(text: str) -> str:
    """Remove complete ``<think>…</think>`` / ``<thinking>…</thinking>`` blocks.

    Same result as ``THINK_RE.sub("", text)``, in linear time: at each step the earliest
    opening tag whose kind can still close is taken; if its close is missing, no later tag
    of that kind can close either, so the kind is dropped from the search. Unclosed opens
    and stray closes stay in the text.
    """
    if "<think" not in text:
        return text
    out: list[str] = []
    pos = 0
    alive = list(_THINK_PAIRS)
    # Position of the next occurrence of each open tag at or after `pos` (cached).
    next_open = {open_tag: text.find(open_tag) for open_tag, _ in alive}
    while alive:
        best: tuple[int, str, str] | None = None
        for open_tag, close_tag in alive:
            at = next_open[open_tag]
            if at != -1 and at < pos:
                at = text.find(open_tag, pos)
                next_open[open_tag] = at
            if at != -1 and (best is None or at < best[0]):
                best = (at, open_tag, close_tag)
        if best is None:
            break
        at, open_tag, close_tag = best
        end = text.find(close_tag, at + len(open_tag))
        if end == -1:
            # Regex semantics: this open fails, later opens of this kind fail too, but an
            # open of the other kind *after* it may still match; keep scanning from here.
            alive = [pair for pair in alive if pair[0] != open_tag]
            continue
        out.append(text[pos:at])
        pos = end + len(close_tag)
    out.append(text[pos:])
    return "".join(out)


@dataclass
class CallEntry:
    """One object inside a block.

    Attributes:
        call: the call, or None when the object is invalid.
        error: None when valid, else ``"not_object"``, ``"missing_name"``,
            ``"unknown_tool"`` or ``"arguments_not_dict"``.
        raw: the decoded JSON value of this entry.
    """

    call: ToolCall | None
    error: str | None
    raw: Any


@dataclass
class ParsedBlock:
    """One matched ``<tool_call>…</tool_call>`` pair.

    Attributes:
        text: the text between the tags (not stripped).
        entries: one per object of the block; empty when the block failed before entries
            (invalid JSON, empty list, a JSON value that is neither object nor list).
        valid: the block parses (an object, or a non-empty list of objects) and every entry
            is valid.
        error: ``"invalid_json"``, ``"empty_list"``, ``"not_object_or_list"``,
            ``"invalid_entry"``, or None when valid.
        start: offset of ``<tool_call>`` in the think-stripped text.
        end: offset just past ``</tool_call>`` in the think-stripped text.
    """

    text: str
    entries: list[CallEntry]
    valid: bool
    error: str | None
    start: int
    end: int

    @property
    def calls(self) -> list[ToolCall]:
        """The calls of this block when it is valid, else ``[]``."""
        if not self.valid:
            return []
        return [e.call for e in self.entries if e.call is not None]


@dataclass
class ParseResult:
    """Every block found in one text, plus raw tag counts.

    Attributes:
        blocks: matched open/close pairs, in order.
        n_open: raw count of ``<tool_call>`` in the stripped text.
        n_close: raw count of ``</tool_call>`` in the stripped text.
    """

    blocks: list[ParsedBlock] = field(default_factory=list)
    n_open: int = 0
    n_close: int = 0

    @property
    def denominator(self) -> int:
        """``max(n_open, n_close)``: the METHOD §4.1 format denominator D."""
        return max(self.n_open, self.n_close)

    @property
    def n_valid_blocks(self) -> int:
        return sum(1 for b in self.blocks if b.valid)

    @property
    def fmt(self) -> float:
        """``valid blocks / D``; 0.0 when there is no tag at all."""
        d = self.denominator
        return self.n_valid_blocks / d if d else 0.0

    @property
    def calls(self) -> list[ToolCall]:
        """Calls of the valid blocks, flattened in order (invalid blocks contribute none)."""
        return [call for b in self.blocks for call in b.calls]

    @property
    def first_valid_block(self) -> ParsedBlock | None:
        return next((b for b in self.blocks if b.valid), None)

    @property
    def n_invalid_calls(self) -> int:
        """Invalid entries + blocks that failed before entries + unmatched tags."""
        n = 0
        for b in self.blocks:
            if b.entries:
                n += sum(1 for e in b.entries if e.error is not None)
            elif not b.valid:
                n += 1
        return n + (self.denominator - len(self.blocks))

    @property
    def malformed(self) -> bool:
        """True when some tag has no partner or some block is not valid JSON."""
        k = len(self.blocks)
        if self.n_open != k or self.n_close != k:
            return True
        return any(b.error == INVALID_JSON for b in self.blocks)


def _parse_entry(
    obj: Any, allowed: frozenset[str] | None, accept_string_arguments: bool
) -> CallEntry:
    if not isinstance(obj, dict):
        return CallEntry(None, NOT_OBJECT, obj)
    name = obj.get("name")
    if not isinstance(name, str) or not name.strip():
        return CallEntry(None, MISSING_NAME, obj)
    if allowed is not None and name not in allowed:
        return CallEntry(None, UNKNOWN_TOOL, obj)
    if "arguments" in obj:
        args = obj["arguments"]
    elif "parameters" in obj:
        args = obj["parameters"]
    else:
        args = {}
    if isinstance(args, str) and accept_string_arguments:
        try:
            args = json.loads(args)
        except Exception:  # any decode failure just means "not a dict"
            return CallEntry(None, ARGUMENTS_NOT_DICT, obj)
    if not isinstance(args, dict):
        return CallEntry(None, ARGUMENTS_NOT_DICT, obj)
    return CallEntry(ToolCall(name=name, arguments=args), None, obj)


def _parse_block(
    inner: str,
    start: int,
    end: int,
    allowed: frozenset[str] | None,
    accept_string_arguments: bool,
) -> ParsedBlock:
    try:
        value = json.loads(inner)
    except Exception:  # JSONDecodeError, RecursionError (deep nesting), ...
        return ParsedBlock(inner, [], False, INVALID_JSON, start, end)
    if isinstance(value, dict):
        items = [value]
    elif isinstance(value, list):
        if not value:
            return ParsedBlock(inner, [], False, EMPTY_LIST, start, end)
        items = value
    else:
        return ParsedBlock(inner, [], False, NOT_OBJECT_OR_LIST, start, end)
    entries = [_parse_entry(item, allowed, accept_string_arguments) for item in items]
    valid = all(e.error is None for e in entries)
    return ParsedBlock(inner, entries, valid, None if valid else INVALID_ENTRY, start, end)


def parse_tool_calls(
    text: str,
    allowed_tools: Iterable[str] | None = None,
    *,
    strip_thinking: bool = True,
    accept_string_arguments: bool = False,
) -> ParseResult:
    """Find and validate every hermes ``<tool_call>`` block of ``text``.

    Args:
        text: model output (one turn, or several joined).
        allowed_tools: names a call may use; None accepts any non-empty name.
        strip_thinking: remove ``<think>``/``<thinking>`` blocks first (METHOD §4.1).
            Offsets in the result refer to the stripped text.
        accept_string_arguments: decode ``"arguments": "{...}"`` instead of rejecting it.
            Off by default because METHOD §4.1 requires a dict.

    Returns:
        A :class:`ParseResult`; never raises on model output.
    """
    if not isinstance(text, str):  # defensive: callers should pass str
        if isinstance(text, (bytes, bytearray)):
            text = bytes(text).decode("utf-8", errors="replace")
        else:
            text = "" if text is None else str(text)
    if strip_thinking:
        text = strip_think(text)
    allowed = None if allowed_tools is None else frozenset(allowed_tools)
    result = ParseResult(
        blocks=[], n_open=text.count(TOOL_CALL_OPEN), n_close=text.count(TOOL_CALL_CLOSE)
    )
    if result.n_open == 0 or result.n_close == 0:
        return result
    pos = 0
    n_o, n_c = len(TOOL_CALL_OPEN), len(TOOL_CALL_CLOSE)
    while True:
        start = text.find(TOOL_CALL_OPEN, pos)
        if start == -1:
            break
        close = text.find(TOOL_CALL_CLOSE, start + n_o)
        if close == -1:
            break  # no close after this open, hence none after any later open
        end = close + n_c
        result.blocks.append(
            _parse_block(text[start + n_o : close], start, end, allowed, accept_string_arguments)
        )
        pos = end
    return result
