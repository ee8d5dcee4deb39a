"""ReplayBackend: recorded tool responses, keyed by tool and canonical arguments.

The table maps ``(tool name, canonical_arguments(arguments))`` to the recorded observation;
it is given directly or loaded from Toucan SFT trajectories
(:func:`~slca_lightning.data.toucan_sft.load_replay_table`). A call found in the table gets
its recorded response (``replay_hits``); a miss goes to the declared ``fallback`` backend
(``replay_misses``), or raises ``KeyError`` when there is none (the simulator turns that
into a counted ``backend_error`` observation).
"""

from __future__ import annotations

import threading
from typing import Any

from slca_lightning.calls.schema import canonical_arguments
from slca_lightning.tools.base import ToolBackend
from slca_lightning.types import Task, ToolCall

__all__ = ["ReplayBackend"]


class ReplayBackend(ToolBackend):
    """Answers from recorded responses; misses go to ``fallback``.

    Args:
        table: ``(tool, canonical arguments) → response`` (merged over ``path``'s records).
        path: a Toucan SFT JSONL file to load records from.
        fallback: the backend for calls with no record (None: a miss raises ``KeyError``).
        limit: read at most this many rows of ``path``.

    :attr:`stats`: ``replay_hits``, ``replay_misses``.
    """

    def __init__(
        self,
        table: dict[tuple[str, str], str] | None = None,
        path: str | None = None,
        fallback: ToolBackend | None = None,
        limit: int | None = None,
    ) -> None:
        self.table: dict[tuple[str, str], str] = {}
        if path is not None:
            from slca_lightning.data.toucan_sft import load_replay_table

            self.table.update(load_replay_table(path, limit))
        self.table.update(table or {})
        self.fallback = fallback
        self._lock = threading.Lock()
        self.stats = {"replay_hits": 0, "replay_misses": 0}

    def __len__(self) -> int:
        return len(self.table)

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """The recorded response, else the fallback's answer (see the class docstring)."""
        hit = self.table.get((call.name, canonical_arguments(call.arguments)))
        with self._lock:
            self.stats["replay_hits" if hit is not None else "replay_misses"] += 1
        if hit is not None:
            return hit
        if self.fallback is None:
            raise KeyError(f"no recorded response for {call.name} and no fallback backend")
        return self.fallback.execute(call, schema, task)
