"""The tool interfaces: a :class:`ToolSimulator` answers calls of a task, a
:class:`ToolBackend` produces the observation of a validated call (see
:mod:`slca_lightning.tools.simulator`, which re-exports both, and the backends beside it).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from slca_lightning.types import Task, ToolCall, ToolResult

__all__ = ["ToolBackend", "ToolError", "ToolSimulator", "to_observation"]


class ToolError(Exception):
    """The tool itself rejected the call (e.g. a real function raised ``ValueError`` on a bad
    date): a deterministic answer, so the simulator does not retry it; the observation is
    the error text of the cause, counted as ``tool_errors``. Transient failures (a server
    error, a dropped connection) are raised as ordinary exceptions and retried."""


def to_observation(value: Any) -> str:
    """A string as is; anything else as compact JSON (``ensure_ascii=False``, ``str`` for
    what JSON cannot encode)."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)


class ToolSimulator(ABC):
    """Turns one tool call of a task into the observation the policy sees."""

    @abstractmethod
    def __call__(self, call: ToolCall, task: Task) -> ToolResult:
        """Answer ``call``; bad calls give an error observation, never an exception."""

    def simulate_batch(self, calls: list[tuple[ToolCall, Task]]) -> list[ToolResult]:
        """Answer several calls, one result per call, in order (default: sequentially)."""
        return [self(call, task) for call, task in calls]


class ToolBackend(ABC):
    """Produces the observation text for a call that passed validation."""

    @abstractmethod
    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """Return the observation for ``call``.

        Args:
            call: the validated call.
            schema: the tool's schema, or None (unknown schema or the "w/o SGLS" ablation).
            task: the task the call belongs to.

        May raise: :class:`ToolError` when the tool rejects the call (its cause becomes the
        observation at once); any other exception is retried by the simulator, then turned
        into an observation.
        """
