"""Gold calls in whatever shape the data stores them → steps of :class:`ToolCall`.

METHOD §4.1: gold calls are nested, one list per step (parallel calls share a step), but
some released rows store a flat list of names. Both shapes are accepted and the shape seen
is returned, so loaders can record it (``Task.gold_format``) and count it.

Shapes (the returned tag in brackets):

- ``[[{"name": ..., "arguments": {...}}, ...], ...]`` → as is ("nested");
- ``["a", "b"]`` → ``[[a()], [b()]]``: each name its own step, no arguments ("flat");
- ``[{"name": ..., "arguments": ...}, ...]`` → each call its own step ("flat_calls");
- ``[]`` → ``[]`` ("empty").

Calls may be dicts or :class:`ToolCall` objects; a dict may also use ``parameters``, or
the OpenAI wrapper ``{"type": "function", "function": {"name": ..., "arguments": ...}}``.
Arguments that are a JSON string are decoded (``""``/None/missing → ``{}``). The whole
value may be a JSON string; it is decoded once. Anything else raises ``ValueError`` that
says what was seen; the caller adds the file and line.
"""

from __future__ import annotations

import json
from typing import Any

from slca_lightning.types import ToolCall

__all__ = ["normalize_gold_calls"]


def _show(value: Any, limit: int = 120) -> str:
    text = repr(value)
    if len(text) > limit:
        text = text[:limit] + "..."
    return f"{type(value).__name__} {text}"


def _to_call(item: Any, where: str) -> ToolCall:
    if isinstance(item, ToolCall):
        name, args = item.name, item.arguments
    elif isinstance(item, dict):
        if "name" not in item and isinstance(item.get("function"), dict):
            item = item["function"]
        name = item.get("name")
        args = item["arguments"] if "arguments" in item else item.get("parameters")
    else:
        raise ValueError(f"gold calls: {where} should be a call object, got {_show(item)}")
    if not isinstance(name, str) or not name:
        raise ValueError(f"gold calls: {where} has no non-empty string name: {_show(item)}")
    if args is None or (isinstance(args, str) and not args.strip()):
        args = {}
    elif isinstance(args, str):
        try:
            args = json.loads(args)
        except (ValueError, RecursionError) as err:
            raise ValueError(
                f"gold calls: {where} ({name}) has arguments that are a string but not JSON: "
                f"{_show(args)}"
            ) from err
    if not isinstance(args, dict):
        raise ValueError(
            f"gold calls: {where} ({name}) arguments should be an object, got {_show(args)}"
        )
    return ToolCall(name=name, arguments=dict(args))


def _is_call_like(item: Any) -> bool:
    return isinstance(item, (dict, ToolCall))


def normalize_gold_calls(gold: Any) -> tuple[list[list[ToolCall]], str]:
    """Turn stored gold calls into steps of calls and say which shape was seen.

    Args:
        gold: the stored value (see the module docstring for the shapes).

    Returns:
        ``(steps, shape)`` with shape ``"nested"``, ``"flat"``, ``"flat_calls"`` or
        ``"empty"``. New :class:`ToolCall` objects are returned (argument dicts are
        shallow copies), so callers may mutate them.

    Raises:
        ValueError: the value has none of the accepted shapes.
    """
    if isinstance(gold, str):
        try:
            gold = json.loads(gold)
        except (ValueError, RecursionError) as err:
            raise ValueError(f"gold calls: a string that is not JSON: {_show(gold)}") from err
    if isinstance(gold, tuple):
        gold = list(gold)
    if not isinstance(gold, list):
        raise ValueError(f"gold calls: expected a list (nested steps or flat), got {_show(gold)}")
    if not gold:
        return [], "empty"

    if all(isinstance(step, (list, tuple)) for step in gold):
        steps = [
            [_to_call(item, f"step {i} call {j}") for j, item in enumerate(step)]
            for i, step in enumerate(gold)
        ]
        return steps, "nested"
    if all(isinstance(item, str) for item in gold):
        bad = [i for i, item in enumerate(gold) if not item]
        if bad:
            raise ValueError(f"gold calls: flat list of names has an empty name at {bad[0]}")
        return [[ToolCall(name=item, arguments={})] for item in gold], "flat"
    if all(_is_call_like(item) for item in gold):
        return [[_to_call(item, f"call {i}")] for i, item in enumerate(gold)], "flat_calls"

    kinds = sorted({type(item).__name__ for item in gold})
    raise ValueError(
        "gold calls: expected a list of steps (lists), of names (str) or of call objects, "
        f"got a list mixing {', '.join(kinds)}: {_show(gold)}"
    )
