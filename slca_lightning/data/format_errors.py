"""Errors and JSONL reading helpers shared by the task loaders.

Every error names the file, the 1-based line number and the field path inside the row
(``reward_model.ground_truth.tool_schemas``, ``gold_calls[0][1].name``), then says what
was wrong, e.g.::

    data.jsonl, line 3, field reward_model.ground_truth.tool_schemas: a JSON string that
    does not decode (Expecting value at char 0): '[{oops'
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Collection, Iterator
from typing import Any, NoReturn

import jsonschema

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.types import ToolCall

__all__ = [
    "DataFormatError",
    "JsonlTaskFormatError",
    "RowReader",
    "ToucanFormatError",
    "iter_jsonl",
    "show",
]

_MISSING = object()
_TYPE_NAMES = {dict: "an object", list: "a list", str: "a string", int: "an integer"}


@functools.lru_cache(maxsize=4096)
def _schema_problem(params_json: str) -> str | None:
    """Why a JSON schema (as sorted JSON text) is invalid, or None (cached: it is slow)."""
    params = json.loads(params_json)
    try:
        jsonschema.validators.validator_for(params).check_schema(params)
    except jsonschema.SchemaError as err:
        return err.message
    return None


def show(value: Any, limit: int = 80) -> str:
    """A short ``repr`` of a value for error messages."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


class DataFormatError(ValueError):
    """A task file row that cannot be loaded: where (file, line, field) and why.

    Attributes:
        path: the file.
        line: the 1-based line number.
        field: the dotted field path inside the row, or None for the line as a whole.
        problem: what was wrong.
    """

    def __init__(self, path: str | os.PathLike, line: int, field: str | None, problem: str):
        self.path, self.line, self.field, self.problem = str(path), line, field, problem
        where = f"{self.path}, line {line}" + (f", field {field}" if field else "")
        super().__init__(f"{where}: {problem}")


class ToucanFormatError(DataFormatError):
    """A row of a Toucan RL (verl layout) file that does not have the released format."""


class JsonlTaskFormatError(DataFormatError):
    """A row of a project JSONL task file (:mod:`slca_lightning.data.tasks`) that is invalid."""


class _NonFinite(str):
    """A ``NaN`` / ``Infinity`` / ``-Infinity`` token (or an overflowing number) met while
    decoding, kept as its text so that the field holding it can be named."""


def _parse_float(text: str) -> float | _NonFinite:
    value = float(text)
    return value if math.isfinite(value) else _NonFinite(text)


def _non_finite(value: Any, field: str = "") -> tuple[str, str] | None:
    """``(field path, token)`` of the first non-finite number in a decoded row, or None."""
    if isinstance(value, _NonFinite):
        return field, str(value)
    if isinstance(value, dict):
        for key, item in value.items():
            found = _non_finite(item, f"{field}.{key}" if field else str(key))
            if found:
                return found
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found = _non_finite(item, f"{field}[{i}]")
            if found:
                return found
    return None


def iter_jsonl(
    path: str | os.PathLike, error: type[DataFormatError] = DataFormatError
) -> Iterator[tuple[int, Any]]:
    """Yield ``(line_number, value)`` for every non-blank line; bad lines raise ``error``.

    A UTF-8 byte-order mark at the start of the file is skipped. ``NaN``, ``Infinity`` and
    numbers too large for a float (``1e999``) are refused, naming the field that holds them.
    """
    with open(path, "rb") as fh:
        for number, raw in enumerate(fh, start=1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise error(path, number, None, f"not UTF-8 text ({err.reason})") from None
            if not text.strip():
                continue
            try:
                value = json.loads(text, parse_constant=_NonFinite, parse_float=_parse_float)
            except json.JSONDecodeError as err:
                raise error(
                    path, number, None, f"invalid JSON ({err.msg} at column {err.colno})"
                ) from None
            except (ValueError, RecursionError) as err:
                raise error(path, number, None, f"invalid JSON ({err})") from None
            bad = _non_finite(value)
            if bad is not None:
                field, token = bad
                raise error(
                    path,
                    number,
                    field or None,
                    f"{token} is not a finite number (JSON has no NaN or Infinity)",
                )
            yield number, value


class RowReader:
    """Typed field access for one row; every failure raises the loader's error class.

    Args:
        path: the file the row came from.
        line: the row's 1-based line number.
        error: the :class:`DataFormatError` subclass to raise.
    """

    def __init__(self, path: str | os.PathLike, line: int, error: type[DataFormatError]):
        self.path, self.line, self.error = path, line, error

    def fail(self, field: str | None, problem: str) -> NoReturn:
        """Raise the loader's error for ``field``."""
        raise self.error(self.path, self.line, field, problem)

    def check_type(self, value: Any, field: str, kind: type | tuple[type, ...]) -> Any:
        """Return ``value`` if it is of ``kind`` (bools are never integers), else fail."""
        kinds = kind if isinstance(kind, tuple) else (kind,)
        ok = isinstance(value, kinds) and not (isinstance(value, bool) and bool not in kinds)
        if not ok:
            want = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
            self.fail(field, f"expected {want}, got {type(value).__name__} {show(value)}")
        return value

    def get(
        self,
        obj: Any,
        dotted: str,
        kind: type | tuple[type, ...] | None = None,
        default: Any = _MISSING,
        *,
        decode: bool = False,
        at: str = "",
    ) -> Any:
        """Walk ``dotted`` (``a.b.c``) from ``obj``; fail on a missing key or wrong type.

        With a ``default``, a missing final key returns it (intermediate objects must
        exist). With ``decode=True`` a string value is first decoded as JSON (for fields
        that the released data stores as JSON strings). ``at`` is the field path of ``obj``
        itself inside the row, prefixed to the paths in errors.
        """
        parts = [*at.split("."), *dotted.split(".")] if at else dotted.split(".")
        skip = len(parts) - len(dotted.split("."))
        value = obj
        for i in range(skip, len(parts)):
            if not isinstance(value, dict):
                here = ".".join(parts[:i]) or "row"
                self.fail(here, f"expected an object, got {type(value).__name__} {show(value)}")
            if parts[i] not in value:
                if default is not _MISSING and i == len(parts) - 1:
                    return default
                self.fail(".".join(parts[: i + 1]), "missing")
            value = value[parts[i]]
        field = ".".join(parts)
        if decode and isinstance(value, str):
            value = self.decode_json(value, field)
        return value if kind is None else self.check_type(value, field, kind)

    def decode_json(self, text: str, field: str) -> Any:
        """Decode a JSON string stored inside a field; fail with the decoder's reason."""
        try:
            return json.loads(text)
        except json.JSONDecodeError as err:
            self.fail(
                field,
                f"a JSON string that does not decode ({err.msg} at char {err.pos}): {show(text)}",
            )
        except (ValueError, RecursionError) as err:
            self.fail(field, f"a JSON string that does not decode ({err}): {show(text)}")

    def tools(self, value: Any, field: str, *, wrap_bare: bool = False, check: bool = False):
        """Check a list of OpenAI function schemas; return it (a new list).

        ``wrap_bare`` turns ``{"name", "parameters", ...}`` into the ``{"type": "function",
        "function": {...}}`` form; ``check`` also checks each ``parameters`` is a valid
        JSON schema (``jsonschema``).
        """
        out = []
        for i, tool in enumerate(self.check_type(value, field, list)):
            where = f"{field}[{i}]"
            self.check_type(tool, where, dict)
            if wrap_bare and "function" not in tool and "name" in tool:
                tool = {"type": "function", "function": tool}
            fn = self.get(tool, "function", dict, at=where) if "function" in tool else None
            if fn is None:
                self.fail(f"{where}.function", "missing (expected an OpenAI function schema)")
            name = fn.get("name")
            if not isinstance(name, str) or not name.strip():
                self.fail(
                    f"{where}.function.name", f"expected a non-empty string, got {show(name)}"
                )
            params = fn.get("parameters", {})
            self.check_type(params, f"{where}.function.parameters", dict)
            problem = _schema_problem(json.dumps(params, sort_keys=True)) if check else None
            if problem:
                self.fail(f"{where}.function.parameters", f"not a JSON schema: {problem}")
            out.append(tool)
        return out

    def gold(
        self, value: Any, field: str, allowed: Collection[str] | None = None, strict: bool = True
    ) -> tuple[list[list[ToolCall]], str, list[str]]:
        """Normalise gold calls (any accepted shape) → ``(steps, shape, unknown_names)``.

        With ``allowed``, a call name outside it fails naming the call's field
        (``gold_calls[0][1].name``) when ``strict``, else it is listed in ``unknown_names``.
        """
        try:
            steps, shape = normalize_gold_calls(value)
        except ValueError as err:
            self.fail(field, str(err))
        unknown: list[str] = []
        if allowed is not None:
            allowed = set(allowed)
            for i, step in enumerate(steps):
                for j, call in enumerate(step):
                    if call.name in allowed:
                        continue
                    if not strict:
                        unknown.append(call.name)
                        continue
                    where = {"nested": f"[{i}][{j}].name", "flat": f"[{i}]"}.get(
                        shape, f"[{i}].name"
                    )
                    self.fail(
                        field + where,
                        f"tool {call.name!r} is not among the task's tools "
                        f"({', '.join(sorted(allowed)) or 'none'})",
                    )
        return steps, shape, unknown
