"""What the simulator answers with: METHOD §7's messages, error JSON, observation text, the
tools' declared output schemas, and the counters and percentiles of its statistics.
"""

from __future__ import annotations

import json
from typing import Any

from slca_lightning.calls.sanitize import MAX_NAME_CHARS, clean_text, safe_str
from slca_lightning.tools.base import ToolError, to_observation

__all__ = ["STAT_KEYS", "output_schema", "percentile", "unknown_tool_message"]

STAT_KEYS = (
    "calls",
    "cache_hits",
    "unknown_tool",
    "missing_arguments",
    "schema_invalid",
    "backend_errors",
    "tool_errors",
    "timeouts",
    "retries",
    "backend_calls",
    "output_invalid",
    "injected_faults",
)


def unknown_tool_message(name: str) -> str:
    """METHOD §7's exact text for a call to a tool the task does not offer (the name is
    cleaned: :func:`~slca_lightning.calls.sanitize.clean_text`, at most 256 characters)."""
    return (
        f"Tool '{clean_text(name, MAX_NAME_CHARS)}' not found in the current available tools set."
    )


def output_schema(schema: Any) -> dict[str, Any] | None:
    """The tool's declared output JSON Schema (``output_schema`` / ``outputSchema``, in the
    function part or at the top level), or None."""
    if not isinstance(schema, dict):
        return None
    inner = schema.get("function") if isinstance(schema.get("function"), dict) else {}
    for part in (inner, schema):
        for key in ("output_schema", "outputSchema"):
            if isinstance(part.get(key), dict):
                return part[key]
    return None


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile (0–100, nearest rank) of ``values``; 0.0 when empty."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(1, min(len(ordered), -(-len(ordered) * q // 100)))
    return float(ordered[int(rank) - 1])


def _observation(value: Any) -> str:
    """``value`` as observation text; a value that cannot be serialised is a ToolError."""
    if isinstance(value, str):
        return value
    try:
        return to_observation(value)
    except Exception as exc:
        raise ToolError(f"the tool's result cannot be serialised: {safe_str(exc, 300)}") from exc


def _error_json(error: Any) -> str:
    """``{"error": "<Type>: <message>"}``, clean and short; never raises."""
    if isinstance(error, BaseException):
        message = f"{type(error).__name__}: {safe_str(error, 1000)}"
    else:
        message = safe_str(error, 1000)
    return json.dumps({"error": message}, ensure_ascii=False)
