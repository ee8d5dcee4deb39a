"""Toucan-1.5M SFT rows → warm-start chats (for :mod:`slca_lightning.models.sft`) and a replay table.

The released SFT config (``Agent-Ark/Toucan-1.5M``, config ``SFT``) has one row per
trajectory with the string columns ``uuid``, ``subset_name``, ``question``,
``target_tools``, ``tools`` (a JSON string: OpenAI function schemas) and ``messages`` (a
JSON string: a list of ``{"role", "content"}``). Roles are ``user``, ``assistant``,
``tool_call`` and ``tool_response`` (the system prompt is left to the trainer). A
``tool_call`` content is ``str()`` of a Qwen-Agent ``function_call`` dict, i.e. a **Python
literal**, mostly single-quoted, whose ``arguments`` is itself a JSON string, e.g.
``{'name': 'add', 'arguments': '{"a": 2, "b": 3}'}``. Consecutive ``tool_call`` messages
are parallel calls; the following ``tool_response`` messages answer them in order.

Parsing is safe: Python literals go through :func:`ast.literal_eval` (never ``eval``);
``arguments`` through ``json.loads`` (a dict is accepted as is). A malformed row raises
:class:`ToucanSFTFormatError` naming the file, the line and the field (e.g.
``messages[3].content``).

Outputs:

- :func:`sft_messages`: the chat :func:`~slca_lightning.models.sft.build_sft_example` trains on:
  the hermes system prompt listing the tools (as the RL rows), the user turns, one assistant
  turn per step holding its text and one ``<tool_call>`` block per call, one ``tool``
  message per response, and the final assistant reply;
- :func:`replay_records` / :func:`load_replay_table`: ``(tool, canonical arguments) →
  response`` for :class:`~slca_lightning.tools.replay.ReplayBackend`.
"""

from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.calls.schema import canonical_arguments
from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.data.synthetic import tool_call_block
from slca_lightning.types import ToolCall

__all__ = [
    "SFTTrajectory",
    "ToucanSFTFormatError",
    "load_replay_table",
    "load_toucan_sft",
    "parse_sft_row",
    "sft_messages",
]

_ROLES = ("user", "assistant", "tool_call", "tool_response")


class ToucanSFTFormatError(ValueError):
    """A Toucan SFT row is malformed; the message names file, line and field."""


@dataclass
class SFTTrajectory:
    """One parsed SFT row.

    Attributes:
        uuid: the row's id.
        tools: the tool schemas.
        turns: the conversation as ``(role, payload)``: ``("user" | "assistant", text)``,
            ``("tool_call", ToolCall)``, ``("tool_response", text)``.
        subset: ``subset_name``.
        question: ``question``.
        path: the file the row came from (``"<row>"`` when parsed alone).
        line: its line number in that file.
    """

    uuid: str
    tools: list[dict[str, Any]]
    turns: list[tuple[str, Any]] = field(default_factory=list)
    subset: str = ""
    question: str = ""
    path: str = "<row>"
    line: int = 1


def _fail(path: str, line: int, where: str, what: str) -> None:
    raise ToucanSFTFormatError(f"{path}, line {line}, field {where}: {what}")


def _json_field(row: dict, key: str, path: str, line: int) -> Any:
    if key not in row:
        _fail(path, line, key, "missing")
    value = row[key]
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError as exc:
            _fail(path, line, key, f"not valid JSON ({exc})")
    return value


def _parse_call(text: Any, path: str, line: int, where: str) -> ToolCall:
    if isinstance(text, dict):
        obj = text
    elif isinstance(text, str):
        try:
            obj = ast.literal_eval(text.strip())
        except (ValueError, SyntaxError, MemoryError, RecursionError) as exc:
            _fail(path, line, where, f"not a Python/JSON literal ({type(exc).__name__}: {exc})")
    else:
        _fail(path, line, where, f"expected a string, got {type(text).__name__}")
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        _fail(path, line, where, "expected a dict with a non-empty string 'name'")
    args = obj.get("arguments", {})
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except ValueError as exc:
            _fail(path, line, f"{where}.arguments", f"not valid JSON ({exc})")
    if not isinstance(args, dict):
        _fail(path, line, f"{where}.arguments", f"expected an object, got {type(args).__name__}")
    return ToolCall(name=obj["name"], arguments=args)


def parse_sft_row(row: Any, line: int = 1, path: str = "<row>") -> SFTTrajectory:
    """Parse one SFT row (a dict as released) into an :class:`SFTTrajectory`.

    Raises:
        ToucanSFTFormatError: naming ``path``, ``line`` and the field.
    """
    if not isinstance(row, dict):
        _fail(path, line, "row", f"expected an object, got {type(row).__name__}")
    tools = _json_field(row, "tools", path, line)
    if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
        _fail(path, line, "tools", "expected a list of tool schemas")
    messages = _json_field(row, "messages", path, line)
    if not isinstance(messages, list) or not messages:
        _fail(path, line, "messages", "expected a non-empty list of messages")
    turns: list[tuple[str, Any]] = []
    for i, msg in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(msg, dict):
            _fail(path, line, where, "expected an object")
        role = msg.get("role")
        if role not in _ROLES:
            _fail(path, line, f"{where}.role", f"unknown role {role!r} (expected {_ROLES})")
        content = msg.get("content")
        if role == "tool_call":
            turns.append((role, _parse_call(content, path, line, f"{where}.content")))
            continue
        if content is None:
            content = ""
        if not isinstance(content, str):
            content = json.dumps(content, ensure_ascii=False)
        turns.append((role, content))
    uuid = row.get("uuid")
    return SFTTrajectory(
        uuid=str(uuid) if uuid is not None else f"toucan-sft-{line}",
        tools=tools,
        turns=turns,
        subset=str(row.get("subset_name") or ""),
        question=str(row.get("question") or ""),
        path=path,
        line=line,
    )


def load_toucan_sft(path: str | os.PathLike, limit: int | None = None) -> list[SFTTrajectory]:
    """Parse a JSONL file of SFT rows (blank lines skipped), in file order."""
    path = os.fspath(path)
    out: list[SFTTrajectory] = []
    with open(path, encoding="utf-8") as f:
        for line, text in enumerate(f, 1):
            if limit is not None and len(out) >= limit:
                break
            if not text.strip():
                continue
            try:
                row = json.loads(text)
            except ValueError as exc:
                _fail(path, line, "row", f"not valid JSON ({exc})")
            out.append(parse_sft_row(row, line, path))
    return out


def sft_messages(traj: SFTTrajectory) -> list[dict[str, str]]:
    """The chat to train on (see the module docstring); assistant text that precedes calls
    shares their turn, as the policy writes it at rollout time.

    Raises:
        ToucanSFTFormatError: the row has no assistant text or call (nothing to train on),
            naming its file and line.
    """
    if not any(role in ("assistant", "tool_call") for role, _ in traj.turns):
        _fail(traj.path, traj.line, "messages", "no assistant or tool_call message to train on")
    messages = [{"role": "system", "content": render_hermes_system_prompt(traj.tools)}]
    pending: list[str] = []  # assistant text and call blocks of the current turn

    def flush() -> None:
        if pending:
            messages.append({"role": "assistant", "content": "\n".join(pending)})
            pending.clear()

    for role, payload in traj.turns:
        if role == "assistant":
            if pending and not pending[-1].startswith("<tool_call>"):
                flush()
            pending.append(payload)
        elif role == "tool_call":
            pending.append(tool_call_block(payload))
        else:
            flush()
            messages.append(
                {"role": "tool" if role == "tool_response" else role, "content": payload}
            )
    flush()
    return messages


def replay_records(traj: SFTTrajectory) -> list[tuple[ToolCall, str]]:
    """Each call with the response that answered it (responses answer the preceding run of
    calls in order; a call without a response is skipped)."""
    out: list[tuple[ToolCall, str]] = []
    waiting: list[ToolCall] = []
    for role, payload in traj.turns:
        if role == "tool_call":
            waiting.append(payload)
        elif role == "tool_response" and waiting:
            out.append((waiting.pop(0), payload))
        elif role == "user":
            waiting.clear()
    return out


def load_replay_table(
    path: str | os.PathLike, limit: int | None = None
) -> dict[tuple[str, str], str]:
    """``(tool, canonical arguments) → response`` over a JSONL file (the first wins)."""
    table: dict[tuple[str, str], str] = {}
    for traj in load_toucan_sft(path, limit):
        for call, response in replay_records(traj):
            table.setdefault((call.name, canonical_arguments(call.arguments)), response)
    return table
