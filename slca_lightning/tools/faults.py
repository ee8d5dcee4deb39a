"""Fault injection for the tool simulator: timeouts, server errors and malformed payloads.

:class:`FaultInjector` wraps any :class:`~slca_lightning.tools.simulator.ToolBackend` (choose it
by ``class_path`` with the real backend as ``backend``). For each attempt it draws one
uniform number from sha256 of (seed, tool, canonical arguments, how many times this exact
call was attempted before), so the faults a run sees depend only on the seed and the calls,
not on thread scheduling. With ``u`` that number:

- ``u < timeout_rate``: raises :class:`InjectedTimeout` (after ``timeout_sleep_s``);
- then ``server_error_rate``: raises :class:`InjectedServerError` (an HTTP-500-like error);
- then ``malformed_rate``: returns :class:`InjectedMalformed`, a truncated non-JSON payload;
- otherwise the wrapped backend answers.

The simulator retries injected exceptions like real ones but counts them apart
(``injected_faults``), and the injector counts what it injected in
:attr:`FaultInjector.stats` (and per call in :meth:`FaultInjector.call_outcomes`).

Faults and the simulator's cache: a fault is not a tool response, so it is never cached
(an exception never is; an injected malformed payload is recognised by its type). Only a
real response from the wrapped backend is stored. A rerun on the same cache (same seed,
same calls) therefore makes no backend call for any call that got a real response in an
earlier run, and calls the backend again, drawing faults afresh, for the calls that only
ever saw faults. Its observations can differ from the first run's where that run saw a
fault before the call's first real response (the rerun gets the cached response at once).
"""

from __future__ import annotations

import hashlib
import threading
import time
from typing import Any

from slca_lightning.calls.schema import canonical_arguments
from slca_lightning.tools.base import ToolBackend
from slca_lightning.types import Task, ToolCall

__all__ = [
    "FaultInjector",
    "InjectedFault",
    "InjectedMalformed",
    "InjectedServerError",
    "InjectedTimeout",
]


class InjectedFault(Exception):
    """Base of the exceptions :class:`FaultInjector` raises on purpose."""


class InjectedTimeout(InjectedFault, TimeoutError):
    """An injected timeout (the backend "did not answer in time")."""


class InjectedServerError(InjectedFault):
    """An injected server error (HTTP 500 from the tool server)."""


class InjectedMalformed(str):
    """An injected malformed payload: a ``str`` the simulator recognises and never caches."""


class FaultInjector(ToolBackend):
    """Wraps a backend and injects faults at given rates, deterministically per seed.

    Args:
        backend: the real backend that answers when no fault is drawn.
        timeout_rate: probability of an injected timeout per attempt.
        server_error_rate: probability of an injected server error per attempt.
        malformed_rate: probability of a malformed (truncated, non-JSON) payload.
        seed: seeds the draws.
        timeout_sleep_s: sleep before raising an injected timeout (0: raise at once).

    :attr:`stats`: ``attempts``, ``injected_timeouts``, ``injected_server_errors``,
    ``injected_malformed``, ``passed`` (attempts handed to the wrapped backend).
    """

    _OUTCOMES = ("injected_timeouts", "injected_server_errors", "injected_malformed", "passed")

    def __init__(
        self,
        backend: ToolBackend,
        timeout_rate: float = 0.0,
        server_error_rate: float = 0.0,
        malformed_rate: float = 0.0,
        seed: int = 0,
        timeout_sleep_s: float = 0.0,
    ) -> None:
        rates = (timeout_rate, server_error_rate, malformed_rate)
        if any(r < 0 for r in rates) or sum(rates) > 1:
            raise ValueError(f"FaultInjector rates must be ≥ 0 and sum to ≤ 1, got {rates}")
        self.backend = backend
        self.timeout_rate, self.server_error_rate, self.malformed_rate = rates
        self.seed = seed
        self.timeout_sleep_s = timeout_sleep_s
        self._lock = threading.Lock()
        self._seen: dict[str, int] = {}
        self._outcomes: dict[tuple[str, str], dict[str, int]] = {}
        self.stats = dict.fromkeys(("attempts", *self._OUTCOMES), 0)

    def draw(self, call: ToolCall) -> float:
        """The uniform number in [0, 1) for this attempt of ``call`` (advances its count)."""
        key = f"{call.name}|{canonical_arguments(call.arguments)}"
        with self._lock:
            n = self._seen.get(key, 0)
            self._seen[key] = n + 1
            self.stats["attempts"] += 1
        digest = hashlib.sha256(f"{self.seed}|{key}|{n}".encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def call_outcomes(self) -> dict[tuple[str, str], dict[str, int]]:
        """Per call ``(tool, canonical arguments)``: how many of its attempts ended in each
        outcome (the :attr:`stats` keys but ``attempts``; zeros left out)."""
        with self._lock:
            return {key: dict(counts) for key, counts in self._outcomes.items()}

    def _bump(self, key: str, call: ToolCall) -> None:
        with self._lock:
            self.stats[key] += 1
            name = (call.name, canonical_arguments(call.arguments))
            counts = self._outcomes.setdefault(name, {})
            counts[key] = counts.get(key, 0) + 1

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """The wrapped backend's answer, or an injected fault (see the class docstring)."""
        u = self.draw(call)
        if u < self.timeout_rate:
            self._bump("injected_timeouts", call)
            if self.timeout_sleep_s > 0:
                time.sleep(self.timeout_sleep_s)
            raise InjectedTimeout(f"injected timeout for {call.name}")
        u -= self.timeout_rate
        if u < self.server_error_rate:
            self._bump("injected_server_errors", call)
            raise InjectedServerError(f"injected server error (500) for {call.name}")
        u -= self.server_error_rate
        if u < self.malformed_rate:
            self._bump("injected_malformed", call)
            return InjectedMalformed('{"result": "trunc')
        self._bump("passed", call)
        return self.backend.execute(call, schema, task)
