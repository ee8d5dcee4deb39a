"""The project's own plain JSONL task format: read and write :class:`~slca_lightning.types.Task`.

One JSON object per line (blank lines are skipped)::

    {"id": "weather-1",
     "question": "What's the weather in Paris today?",
     "tools": [{"type": "function", "function": {"name": "weather", "parameters": {...}}}],
     "gold_calls": [[{"name": "weather", "arguments": {"city": "Paris", "day": "today"}}]],
     "subset": "tool_call",
     "metadata": {"family": "city"}}

Fields:

- ``id`` (required, non-empty string, unique in the file) → ``Task.task_id``.
- ``question`` (required string) → the user message and ``Task.question``.
- ``tools`` (required list of OpenAI function schemas; a bare ``{"name", "parameters"}``
  is wrapped into ``{"type": "function", "function": {...}}``; each ``parameters`` must be
  a valid JSON schema).
- ``gold_calls`` (required): nested steps of ``{"name", "arguments"}`` (parallel calls share
  a step); the flat forms are accepted too (a list of names, or a list of calls, one step
  each; see :func:`~slca_lightning.calls.gold.normalize_gold_calls`). ``[]`` = no call.
  Every name must be among the allowed tools.
- ``subset`` (optional): ``"tool_call"`` or ``"irrelevant"``; default ``"irrelevant"`` when
  the gold is empty, else ``"tool_call"``; it must agree with the gold.
- ``system`` (optional string): text put before the hermes tool preamble of the system
  prompt (:func:`~slca_lightning.data.prompt.render_hermes_system_prompt`).
- ``metadata`` (optional object) → ``Task.metadata`` as is.

Written by :func:`save_jsonl_tasks` only when the defaults would not reproduce the task:
``messages`` (the full chat prompt, instead of system prompt + question; excludes
``system``), ``allowed_tools`` (default: the tool names) and ``gold_format`` (``"flat"`` or
``"nested"``; default: ``"flat"`` for a list of names, else ``"nested"``). So
``load_jsonl_tasks(save_jsonl_tasks(tasks, p))`` gives back equal tasks.

Errors raise :class:`JsonlTaskFormatError` naming the file, the 1-based line and the field
(``gold_calls[0][1].name``). The file is UTF-8 (a leading byte-order mark is skipped);
``NaN`` and ``Infinity`` are refused (JSON has neither; Python's ``json`` would accept them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from typing import Any

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.data.format_errors import JsonlTaskFormatError, RowReader, iter_jsonl
from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.types import Task

__all__ = ["JsonlTaskFormatError", "load_jsonl_tasks", "save_jsonl_tasks", "task_to_record"]

SUBSETS = ("tool_call", "irrelevant")
_FIELDS = (
    "id",
    "question",
    "tools",
    "gold_calls",
    "subset",
    "system",
    "metadata",
    "messages",
    "allowed_tools",
    "gold_format",
)


def _default_messages(tools: list[dict], question: str, system: str | None = None) -> list[dict]:
    return [
        {"role": "system", "content": render_hermes_system_prompt(tools, system)},
        {"role": "user", "content": question},
    ]


def _tool_names(tools: list[dict]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def _inferred_format(gold: Any) -> str:
    try:
        return "flat" if normalize_gold_calls(gold)[1] == "flat" else "nested"
    except ValueError:
        return "nested"


def _parse_row(reader: RowReader, row: Any) -> Task:
    reader.check_type(row, "row", dict)
    extra = sorted(set(row) - set(_FIELDS))
    if extra:
        reader.fail(extra[0], f"unknown field (known fields: {', '.join(_FIELDS)})")
    task_id = reader.get(row, "id", (str,))
    if not task_id.strip():
        reader.fail("id", "empty")
    question = reader.get(row, "question", str)
    tools = reader.tools(reader.get(row, "tools"), "tools", wrap_bare=True, check=True)
    names = _tool_names(tools)

    allowed = reader.get(row, "allowed_tools", list, default=names)
    for i, name in enumerate(allowed):
        reader.check_type(name, f"allowed_tools[{i}]", str)
    gold = reader.get(row, "gold_calls")
    steps, _, _ = reader.gold(gold, "gold_calls", allowed, strict=True)
    needs = any(steps)

    subset = reader.get(row, "subset", str, default="tool_call" if needs else "irrelevant")
    if subset not in SUBSETS:
        reader.fail("subset", f"unknown subset {subset!r} (expected one of {', '.join(SUBSETS)})")
    if (subset == "irrelevant") == needs:
        what = "has gold calls" if needs else "has no gold call"
        reader.fail("subset", f"{subset!r} disagrees with gold_calls, which {what}")

    gold_format = reader.get(row, "gold_format", str, default=_inferred_format(gold))
    if gold_format not in ("nested", "flat"):
        reader.fail("gold_format", f"expected 'nested' or 'flat', got {gold_format!r}")

    system = reader.get(row, "system", str, default=None)
    if "messages" in row:
        if system is not None:
            reader.fail("system", "give either system or messages, not both")
        messages = reader.get(row, "messages", list)
        for i, msg in enumerate(messages):
            reader.check_type(msg, f"messages[{i}]", dict)
            reader.check_type(msg.get("role"), f"messages[{i}].role", str)
        messages = [dict(m) for m in messages]
    else:
        messages = _default_messages(tools, question, system)

    return Task(
        task_id=task_id,
        messages=messages,
        tools=tools,
        allowed_tools=list(allowed),
        gold_calls=steps,
        question=question,
        subset=subset,
        gold_format=gold_format,
        metadata=dict(reader.get(row, "metadata", dict, default={})),
    )


def load_jsonl_tasks(path: str | os.PathLike) -> list[Task]:
    """Load a JSONL task file (format in the module docstring), in file order.

    Raises:
        JsonlTaskFormatError: a row is invalid; the message names file, line and field.
    """
    tasks: list[Task] = []
    first_line: dict[str, int] = {}
    for line, row in iter_jsonl(path, JsonlTaskFormatError):
        reader = RowReader(path, line, JsonlTaskFormatError)
        task = _parse_row(reader, row)
        if task.task_id in first_line:
            reader.fail(
                "id", f"duplicate id {task.task_id!r} (first on line {first_line[task.task_id]})"
            )
        first_line[task.task_id] = line
        tasks.append(task)
    return tasks


def task_to_record(task: Task) -> dict[str, Any]:
    """The JSON object :func:`save_jsonl_tasks` writes for one task (loads back equal)."""
    flat = (
        task.gold_format == "flat"
        and task.gold_calls
        and all(len(step) == 1 and not step[0].arguments for step in task.gold_calls)
    )
    if flat:
        gold: list = [step[0].name for step in task.gold_calls]
    else:
        gold = [
            [{"name": c.name, "arguments": c.arguments} for c in step] for step in task.gold_calls
        ]
    record: dict[str, Any] = {
        "id": task.task_id,
        "question": task.question,
        "tools": task.tools,
        "gold_calls": gold,
        "subset": task.subset,
    }
    if task.messages != _default_messages(task.tools, task.question):
        record["messages"] = task.messages
    if list(task.allowed_tools) != _tool_names(task.tools):
        record["allowed_tools"] = list(task.allowed_tools)
    if _inferred_format(gold) != task.gold_format:
        record["gold_format"] = task.gold_format
    if task.metadata:
        record["metadata"] = task.metadata
    return record


def save_jsonl_tasks(tasks: Iterable[Task], path: str | os.PathLike) -> None:
    """Write tasks as JSONL (UTF-8, one object per line); parent folders are created."""
    path = os.fspath(path)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as fh:
        for task in tasks:
            try:
                line = json.dumps(task_to_record(task), ensure_ascii=False, allow_nan=False)
            except ValueError as err:  # NaN / Infinity: the loader would refuse the file
                raise ValueError(f"task {task.task_id!r}: cannot be saved as JSON: {err}") from None
            fh.write(line + "\n")
