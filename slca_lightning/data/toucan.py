"""Loader for the released Toucan RL rows (verl layout) → :class:`~slca_lightning.types.Task`.

One JSON object per line::

    {"prompt": [{"role": "system", "content": "<hermes tool preamble>"}, {"role": "user", ...}],
     "data_source": "toucan_toolcall",
     "reward_model": {"style": "rule", "ground_truth": {
         "allowed_tools": [...], "gold_tool_calls": [...], "question_content": "...",
         "subset_name": "tool_call" | "irrelevant", "tool_schemas": "<JSON string>"}},
     "extra_info": {...}, "tools": "<JSON string>"}

Field rules:

- ``prompt`` (required) becomes ``Task.messages`` as is (multi-turn prompts included).
- ``reward_model.ground_truth`` (required; an object, or a JSON string holding one).
- ``gold_tool_calls`` (required): nested steps, a flat list of names, or a flat list of
  calls (:func:`~slca_lightning.calls.gold.normalize_gold_calls`). ``Task.gold_format``
  is ``"flat"`` for names and ``"nested"`` otherwise; a row with empty gold takes the
  shape the rest of the file uses (``"nested"`` when no row has gold). The raw shape is
  kept in ``metadata["gold_shape"]``. One info log per file says which shape was seen.
- ``subset_name`` (required) must be ``tool_call`` or ``irrelevant``.
- ``tool_schemas`` (a JSON string, decoded twice as released) is the task's tools; when it
  is missing, the top-level ``tools`` (also a JSON string) is used.
- ``allowed_tools`` defaults to the tool names; ``question_content`` defaults to the last
  user message.
- ``task_id`` is the row's ``id`` / ``task_id`` (top level or in ``extra_info``) when
  present, else ``f"toucan-{line}"`` (1-based line number).

Released data is taken as it is: gold names outside ``allowed_tools`` and subsets that
disagree with the gold (``irrelevant`` with calls, ``tool_call`` without) are counted and
logged as a warning, not refused. Everything else wrong raises :class:`ToucanFormatError`
naming the file, the line and the field.
"""

from __future__ import annotations

import logging
import os
from collections import Counter
from typing import Any

from slca_lightning.data.format_errors import RowReader, ToucanFormatError, iter_jsonl
from slca_lightning.types import Task

__all__ = ["SUBSETS", "ToucanFormatError", "load_toucan_rl"]

logger = logging.getLogger(__name__)

SUBSETS = ("tool_call", "irrelevant")
_GT = "reward_model.ground_truth"
_SHAPE_WORDS = {
    "flat": "flat list of names (each name its own step, no arguments)",
    "nested": "nested steps",
    "flat_calls": "flat list of calls (each call its own step)",
}


def _messages(reader: RowReader, row: dict) -> list[dict[str, Any]]:
    prompt = reader.get(row, "prompt", list)
    if not prompt:
        reader.fail("prompt", "empty (expected at least one message)")
    for i, msg in enumerate(prompt):
        reader.check_type(msg, f"prompt[{i}]", dict)
        for key in ("role", "content"):
            if key not in msg:
                reader.fail(f"prompt[{i}].{key}", "missing")
            reader.check_type(msg[key], f"prompt[{i}].{key}", str)
    return [dict(m) for m in prompt]


def _task_id(row: dict, line: int) -> str:
    extra = row.get("extra_info") if isinstance(row.get("extra_info"), dict) else {}
    for source in (row, extra):
        for key in ("id", "task_id"):
            if isinstance(source.get(key), (str, int)) and not isinstance(source[key], bool):
                return str(source[key])
    return f"toucan-{line}"


def _parse_row(reader: RowReader, row: Any, path: str) -> tuple[Task, list[str]]:
    reader.check_type(row, "row", dict)
    messages = _messages(reader, row)
    reader.get(row, "reward_model", dict)
    gt = reader.get(row, _GT, dict, decode=True)

    if "tool_schemas" in gt:
        field, raw_tools = f"{_GT}.tool_schemas", gt["tool_schemas"]
    elif "tools" in row:
        field, raw_tools = "tools", row["tools"]
    else:
        reader.fail(f"{_GT}.tool_schemas", "missing (and no top-level tools either)")
    if isinstance(raw_tools, str):
        raw_tools = reader.decode_json(raw_tools, field)
    tools = reader.tools(raw_tools, field)
    names = [t["function"]["name"] for t in tools]

    allowed = reader.get(gt, "allowed_tools", (list, str), default=names, at=_GT)
    if isinstance(allowed, str):
        allowed = reader.decode_json(allowed, f"{_GT}.allowed_tools")
    reader.check_type(allowed, f"{_GT}.allowed_tools", list)
    for i, name in enumerate(allowed):
        reader.check_type(name, f"{_GT}.allowed_tools[{i}]", str)

    if "gold_tool_calls" not in gt:
        reader.fail(f"{_GT}.gold_tool_calls", "missing")
    steps, shape, unknown = reader.gold(
        gt["gold_tool_calls"], f"{_GT}.gold_tool_calls", allowed, strict=False
    )

    subset = reader.get(gt, "subset_name", str, at=_GT)
    if subset not in SUBSETS:
        reader.fail(
            f"{_GT}.subset_name",
            f"unknown subset {subset!r} (expected one of {', '.join(SUBSETS)})",
        )
    users = [m["content"] for m in messages if m.get("role") == "user"]
    question = reader.get(gt, "question_content", str, default=users[-1] if users else "", at=_GT)

    metadata: dict[str, Any] = {"source": path, "line": reader.line, "gold_shape": shape}
    for key in ("data_source", "extra_info"):
        if key in row:
            metadata[key] = row[key]
    task = Task(
        task_id=_task_id(row, reader.line),
        messages=messages,
        tools=tools,
        allowed_tools=list(allowed),
        gold_calls=steps,
        question=question,
        subset=subset,
        gold_format="flat" if shape == "flat" else "nested",
        metadata=metadata,
    )
    return task, unknown


def load_toucan_rl(path: str | os.PathLike, limit: int | None = None) -> list[Task]:
    """Load Toucan RL rows (see the module docstring) into tasks, in file order.

    Args:
        path: a ``.jsonl`` file in the released RL format.
        limit: stop after this many rows (None: all).

    Raises:
        ToucanFormatError: a row is malformed; the message names file, line and field.
    """
    path = os.fspath(path)
    tasks: list[Task] = []
    seen_ids: dict[str, int] = {}
    shapes: Counter[str] = Counter()
    n_unknown, n_mismatch = 0, 0
    for line, row in iter_jsonl(path, ToucanFormatError):
        if limit is not None and len(tasks) >= limit:
            break
        reader = RowReader(path, line, ToucanFormatError)
        task, unknown = _parse_row(reader, row, path)
        if task.task_id in seen_ids:
            reader.fail(
                "id", f"duplicate id {task.task_id!r} (first on line {seen_ids[task.task_id]})"
            )
        seen_ids[task.task_id] = line
        shapes[task.metadata["gold_shape"]] += 1
        n_unknown += bool(unknown)
        n_mismatch += (task.subset == "irrelevant") == task.needs_tools
        tasks.append(task)

    seen = [s for s in ("flat", "nested", "flat_calls") if shapes[s]]
    file_format = "flat" if seen == ["flat"] else "nested"
    for task in tasks:
        if task.metadata["gold_shape"] == "empty":
            task.gold_format = file_format
    if seen:
        parts = ", ".join(f"{_SHAPE_WORDS[s]} ({shapes[s]} rows)" for s in seen)
        logger.info(
            "toucan %s: gold_tool_calls are a %s; %d rows with no gold",
            path,
            parts,
            shapes["empty"],
        )
    else:
        logger.info("toucan %s: no row has gold calls (%d rows)", path, len(tasks))
    if n_unknown:
        logger.warning("toucan %s: %d rows have gold calls outside allowed_tools", path, n_unknown)
    if n_mismatch:
        logger.warning(
            "toucan %s: %d rows have a subset_name that disagrees with their gold calls",
            path,
            n_mismatch,
        )
    return tasks
