"""Clean copies of model-chosen strings for the environment, the tokenizer and the logs.

A policy can write any JSON, and JSON can spell text no encoder accepts: ``"\\udc00"`` is a
lone surrogate (``str.encode("utf-8")``, a fast tokenizer, SQLite and HTTP clients all
raise on it), ``"\\u0000"`` a NUL byte, and a string or a nesting can be as long as the
turn allows. Rewards are computed on what the model wrote (the raw text); every *copy* of a
model-chosen string that leaves the agent loop goes through this module once, at the
boundary:

- :func:`clean_text`: lone surrogates become U+FFFD; C0 control characters other than tab,
  newline and carriage return, DEL and the C1 controls become the four visible characters
  ``\\xNN``; the result is cut to ``max_chars`` with a marker saying how much was cut;
- :func:`clean_value`: the same for every string and key of a JSON-like value, nesting
  deeper than ``max_depth`` replaced by a marker string, tuples and sets as lists;
- :func:`clean_call`: a :class:`~slca_lightning.types.ToolCall` with a clean name and clean
  arguments (the copy the simulator sees);
- :func:`safe_str` / :func:`preview`: text of any object (an exception, a parsed value)
  that never raises and is clean and short, for observations and log lines.

Every function is idempotent (cleaning clean text changes nothing), so a defensive second
pass at another boundary costs a scan and nothing else. Numbers are left alone: NaN,
infinities and big integers are valid arguments whose handling is the tool's business.
"""

from __future__ import annotations

import re
import reprlib
from typing import Any

from slca_lightning.types import ToolCall

__all__ = [
    "MAX_DEPTH",
    "MAX_KEY_CHARS",
    "MAX_NAME_CHARS",
    "MAX_STRING_CHARS",
    "clean_call",
    "clean_text",
    "clean_value",
    "is_clean",
    "preview",
    "safe_str",
]

#: Longest tool name passed on (names are echoed in observations).
MAX_NAME_CHARS = 256
#: Longest argument key.
MAX_KEY_CHARS = 256
#: Longest string argument value.
MAX_STRING_CHARS = 16_384
#: Deepest nesting of argument values kept; deeper containers become a marker string.
MAX_DEPTH = 32

# Lone surrogates, and control characters except \t \n \r.
_BAD = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")


def _fix(match: re.Match) -> str:
    ch = match.group()
    if "\ud800" <= ch <= "\udfff":
        return "\ufffd"
    return f"\\x{ord(ch):02x}"


def _cap(text: str, max_chars: int | None) -> str:
    if max_chars is None or len(text) <= max_chars:
        return text
    marker = f"...[{len(text)} chars, cut]"
    keep = max(0, max_chars - len(marker))
    return (text[:keep] + marker)[:max_chars] if max_chars > 0 else ""


def is_clean(text: str) -> bool:
    """True when ``text`` holds no lone surrogate and no escaped-class control character."""
    return _BAD.search(text) is None


def clean_text(text: Any, max_chars: int | None = None) -> str:
    """``text`` (anything: ``str`` is applied to non-strings, safely) with lone surrogates
    replaced by U+FFFD, control characters other than ``\\t\\n\\r`` written as ``\\xNN``,
    and at most ``max_chars`` characters (None: no cap; a cut ends with a marker)."""
    if not isinstance(text, str):
        text = safe_str(text)
    if _BAD.search(text) is not None:
        text = _BAD.sub(_fix, text)
    return _cap(text, max_chars)


def clean_value(
    value: Any,
    *,
    max_depth: int = MAX_DEPTH,
    max_string_chars: int = MAX_STRING_CHARS,
    max_key_chars: int = MAX_KEY_CHARS,
) -> Any:
    """A clean copy of a JSON-like ``value`` (see the module docstring).

    Dict keys are cleaned like strings (two keys that clean to the same text: the later
    wins); containers below ``max_depth`` levels become the string
    ``"[nested deeper than N levels]"``. Numbers, booleans, None and other objects are kept
    as they are.

    Raises:
        ValueError: ``value`` contains itself (a circular structure, which JSON cannot
            produce: a caller's bug, not model output).
    """
    on_path: set[int] = set()

    def walk(v: Any, depth: int) -> Any:
        if isinstance(v, str):
            return clean_text(v, max_string_chars)
        if not isinstance(v, (dict, list, tuple, set, frozenset)):
            return v
        if depth >= max_depth:
            return f"[nested deeper than {max_depth} levels]"
        if id(v) in on_path:
            raise ValueError("circular reference in tool-call arguments")
        on_path.add(id(v))
        try:
            if isinstance(v, dict):
                return {
                    clean_text(k, max_key_chars): walk(item, depth + 1) for k, item in v.items()
                }
            return [walk(item, depth + 1) for item in v]
        finally:
            on_path.discard(id(v))

    return walk(value, 0)


def clean_call(call: ToolCall) -> ToolCall:
    """A new :class:`ToolCall` with a clean name (≤ :data:`MAX_NAME_CHARS`) and clean
    arguments (:func:`clean_value`; non-dict arguments are kept for the simulator to
    reject)."""
    args = call.arguments
    return ToolCall(
        name=clean_text(call.name, MAX_NAME_CHARS),
        arguments=clean_value(args) if isinstance(args, dict) else args,
    )


def safe_str(obj: Any, max_chars: int | None = 2000) -> str:
    """``str(obj)``, cleaned and capped; never raises (an object whose ``__str__`` fails,
    e.g. an exception holding an integer past Python's digit limit, gives its type name)."""
    try:
        text = obj if isinstance(obj, str) else str(obj)
    except Exception:
        try:
            text = f"<unprintable {type(obj).__name__}>"
        except Exception:  # pragma: no cover - type() of anything has a name
            text = "<unprintable>"
    return clean_text(text, max_chars)


_REPR = reprlib.Repr()
_REPR.maxlevel = 4
_REPR.maxstring = 120
_REPR.maxother = 120
_REPR.maxlong = 60
_REPR.maxdict = _REPR.maxlist = _REPR.maxtuple = _REPR.maxset = 8


def preview(value: Any, max_chars: int = 200) -> str:
    """A short, clean ``repr`` of any value (bounded work on huge or deep values)."""
    try:
        text = _REPR.repr(value)
    except Exception:
        text = f"<{type(value).__name__}>"
    return clean_text(text, max_chars)
