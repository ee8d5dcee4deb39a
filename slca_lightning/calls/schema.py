"""Helpers over tool schemas: names, required parameters, argument validation, cache keys.

A tool schema comes in two forms, both accepted everywhere here:

- OpenAI: ``{"type": "function", "function": {"name", "description", "parameters"}}``;
- bare: ``{"name", "description", "parameters"}`` (MCP's ``inputSchema`` / ``input_schema``
  is read as ``parameters`` too).

``parameters`` is a JSON Schema. :func:`validate_arguments` checks arguments against it with
the ``jsonschema`` library: the validator class comes from the schema's ``$schema`` (Draft 7,
2020-12, ...), Draft 2020-12 by default (MCP's default dialect). BFCL's Python-flavoured
type names (``dict``, ``float``, ``tuple``, ``list``, ``any``) are understood as their JSON
Schema equivalents, so those schemas validate instead of failing as broken. Nothing here
raises on a weird schema.
"""

from __future__ import annotations

import functools
import json
import warnings
from collections.abc import Iterable
from typing import Any

from jsonschema import Draft202012Validator, validators

__all__ = [
    "canonical_arguments",
    "index_schemas",
    "required_params",
    "tool_function",
    "tool_name",
    "tool_parameters",
    "validate_arguments",
]

_MAX_MESSAGE_CHARS = 300

# BFCL type name -> the JSON Schema type it means ("any" accepts everything).
_EXTRA_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array"}


def tool_function(schema: Any) -> dict[str, Any]:
    """The function part of a schema (``schema["function"]`` in OpenAI form, else itself)."""
    if not isinstance(schema, dict):
        return {}
    inner = schema.get("function")
    return inner if isinstance(inner, dict) else schema


def tool_name(schema: Any) -> str | None:
    """The tool's name, or None when the schema has no string name."""
    name = tool_function(schema).get("name")
    return name if isinstance(name, str) and name else None


def tool_parameters(schema: Any) -> Any:
    """The JSON Schema of the tool's arguments (None when the schema declares none)."""
    fn = tool_function(schema)
    for key in ("parameters", "inputSchema", "input_schema"):
        if key in fn:
            return fn[key]
    return None


def index_schemas(tools: Iterable[Any]) -> dict[str, dict[str, Any]]:
    """Map tool name → schema (as given). Nameless entries are skipped; the first of
    duplicate names wins."""
    out: dict[str, dict[str, Any]] = {}
    for schema in tools or ():
        name = tool_name(schema)
        if name is not None and name not in out:
            out[name] = schema
    return out


def required_params(schema: Any) -> list[str]:
    """Names in the parameters' top-level ``required`` list, in schema order."""
    params = tool_parameters(schema)
    required = params.get("required") if isinstance(params, dict) else None
    if not isinstance(required, list):
        return []
    return [r for r in required if isinstance(r, str)]


@functools.cache
def _with_extra_types(base: type) -> type:
    checker = base.TYPE_CHECKER.redefine("any", lambda _checker, _instance: True)
    for alias, target in _EXTRA_TYPES.items():
        checker = checker.redefine(
            alias, lambda c, instance, target=target: c.is_type(instance, target)
        )
    return validators.extend(base, type_checker=checker)


def _validator_class(params: dict[str, Any]) -> type:
    with warnings.catch_warnings():  # an unknown $schema URI warns before the default
        warnings.simplefilter("ignore")
        base = validators.validator_for(params, default=Draft202012Validator)
    return _with_extra_types(base)


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _MAX_MESSAGE_CHARS else text[: _MAX_MESSAGE_CHARS - 3] + "..."


def validate_arguments(schema: Any, arguments: Any) -> list[str]:
    """Check ``arguments`` against the tool's parameter schema.

    Returns:
        One human-readable message per violation, ``"<json path>: <message>"`` (e.g.
        ``"$.unit: 'kelvin' is not one of ['c', 'f']"``), sorted by path; ``[]`` when the
        arguments are valid or the tool declares no parameters. A schema the validator
        cannot use yields exactly one message starting with ``"schema error"``.
    """
    params = tool_parameters(schema)
    if params is None or params is True:
        return []
    if not isinstance(params, dict):
        return [f"schema error: parameters must be a JSON object, got {type(params).__name__}"]
    try:
        validator = _validator_class(params)(params)
        errors = sorted(
            validator.iter_errors(arguments), key=lambda e: (e.json_path, str(e.message))
        )
        return [_short(f"{e.json_path}: {e.message}") for e in errors]
    except Exception as exc:  # broken schema: UnknownType, TypeError, re.error, ...
        return [_short(f"schema error: {type(exc).__name__}: {exc}")]


def canonical_arguments(arguments: Any) -> str:
    """Sorted-key compact JSON of the arguments (``ensure_ascii=False``): a cache key that
    ignores key order. Values JSON cannot encode are written with ``str``."""
    return json.dumps(
        arguments, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str
    )
