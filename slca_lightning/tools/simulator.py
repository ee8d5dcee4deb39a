"""SGLS: the schema-guided tool simulator that answers every parsed call (METHOD §7).

For each call :class:`SchemaGuidedSimulator` does, in order:

1. Deterministic validation against the task's tools (the reference's two checks, exact
   texts): an unknown tool gets ``Tool '<name>' not found in the current available tools
   set.``; missing required parameters get ``Missing required parameter(s) for tool
   '<name>': a, b.``. With ``strict_schema=True`` the arguments are also validated with
   ``jsonschema`` (types, enums, ...): ``Invalid arguments for tool '<name>': <messages>.``
2. A cache lookup keyed by (tool name, canonical arguments, the tool's schema, and the task
   id when ``cache_scope="task"``): the schema is part of the key because two tasks may ship
   different tools under one name. The cache is a :class:`~slca_lightning.calls.result_cache.
   SimulatorCache`: memory, plus a SQLite file when ``cache_path`` is set (WAL, shared by
   threads and processes, kept across restarts, so an identical rerun calls no backend).
3. The :class:`ToolBackend` (an LLM role-playing the API server, a real Python function,
   canned responses), with ``max_retries`` retries after an exception (linear back-off:
   ``retry_backoff_s × attempt``) inside one deadline of ``timeout_s`` for the whole call
   (a retry whose back-off would end past the deadline is not tried).
   The backend runs in a worker thread; at the deadline the call becomes a ``timeout``
   observation (a hung worker is left to finish on its own: Python cannot kill threads).
   Exceptions after the last retry become a ``backend_error`` observation whose content is
   ``{"error": "<Type>: <message>"}``. Exceptions a
   :class:`~slca_lightning.tools.faults.FaultInjector` raised on purpose are retried the same
   way but counted as ``injected_faults``, never as real ``backend_errors`` / ``timeouts``.
   A :class:`~slca_lightning.tools.base.ToolError` (the tool itself rejected the call, e.g.
   a real function raising on a bad date) is the tool's answer: not retried, it becomes a
   ``tool_error`` observation ``{"error": "<Type>: <message>"}`` of its cause at once
   (retrying a deterministic rejection only added the back-off: 1.5 s a call by default).
4. Output validation, when the tool declares an output schema: the JSON Schema under
   ``output_schema`` or MCP's ``outputSchema``, in the function part of the tool dict or
   beside it. The observation must parse as JSON and validate (``jsonschema``); a failure
   counts ``output_invalid`` and is retried like an exception, then becomes an
   ``output_invalid`` error observation naming the problems.

Departures from the reference, all optional: the cache (on by default; it stores only real
responses: neither errors nor injected faults, see :mod:`slca_lightning.tools.faults`),
strict schema checks (off by default) and the deadline covering retries.
``use_schema=False`` is the paper's "w/o SGLS" ablation (config:
``data.simulator.init_args.use_schema: false``): no argument or output validation and no
schema for the backend. The simulator never raises; every outcome is a :class:`ToolResult` with its
``latency_s``, and counters accumulate in :attr:`SchemaGuidedSimulator.stats`.
"""

from __future__ import annotations

import concurrent.futures as cf
import itertools
import json
import threading
import time
from collections import Counter, deque
from typing import Any, Literal

from slca_lightning.calls.env_errors import report_env_error
from slca_lightning.calls.sanitize import MAX_NAME_CHARS, clean_call, clean_text, safe_str
from slca_lightning.calls.schema import (
    canonical_arguments,
    index_schemas,
    required_params,
    validate_arguments,
)
from slca_lightning.tools.base import ToolBackend, ToolError, ToolSimulator, to_observation
from slca_lightning.types import Task, ToolCall, ToolResult

__all__ = [
    "STAT_KEYS",
    "SchemaGuidedSimulator",
    "error_json",
    "observation_text",
    "output_schema",
    "percentile",
    "unknown_tool_message",
]

# -- what the simulator answers with: METHOD §7's messages, error JSON, observation text,
# the tools' declared output schemas, and the counters and percentiles of its statistics --

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


def observation_text(value: Any) -> str:
    """``value`` as observation text; a value that cannot be serialised is a ToolError."""
    if isinstance(value, str):
        return value
    try:
        return to_observation(value)
    except Exception as exc:
        raise ToolError(f"the tool's result cannot be serialised: {safe_str(exc, 300)}") from exc


def error_json(error: Any) -> str:
    """``{"error": "<Type>: <message>"}``, clean and short; never raises."""
    if isinstance(error, BaseException):
        message = f"{type(error).__name__}: {safe_str(error, 1000)}"
    else:
        message = safe_str(error, 1000)
    return json.dumps({"error": message}, ensure_ascii=False)


class SchemaGuidedSimulator(ToolSimulator):
    """METHOD §7's simulator: validate, then cache, then the backend with retries.

    Args:
        backend: what answers validated calls.
        strict_schema: also validate types, enums, ... with ``jsonschema``.
        use_schema: False is the "w/o SGLS" ablation (no validation, no schema passed).
        cache: reuse observations of identical calls (errors are never cached).
        cache_scope: ``"global"`` shares observations across tasks; ``"task"`` adds the task
            id to the key (each task keeps its own world state).
        cache_path: SQLite file for an on-disk cache (None: memory only).
        timeout_s: deadline for one call, retries and back-off included; None waits forever
            (and runs the backend in the caller's thread).
        max_retries: extra attempts after a backend exception.
        retry_backoff_s: sleep ``retry_backoff_s × attempt`` before retry ``attempt``.
        max_workers: threads :meth:`simulate_batch` uses.

    Latencies of the last ``latency_window`` calls are kept for percentiles
    (:meth:`latencies_since`); :meth:`stats_snapshot` merges :attr:`stats` with the cache's
    and the backend chain's counters (a ``FaultInjector`` / ``ReplayBackend`` inside).

    A tool is available when it is in ``task.allowed_tools`` if that list is non-empty,
    else when ``task.tools`` has a schema of that name. :attr:`stats` counts ``calls``,
    ``cache_hits``, ``unknown_tool``, ``missing_arguments``, ``schema_invalid``,
    ``backend_errors``, ``tool_errors``, ``timeouts``, ``retries`` (retry attempts made), ``backend_calls``
    (attempts handed to the backend), ``output_invalid`` and ``injected_faults``.
    """

    def __init__(
        self,
        backend: ToolBackend,
        strict_schema: bool = False,
        use_schema: bool = True,
        cache: bool = True,
        cache_scope: Literal["global", "task"] = "global",
        cache_path: str | None = None,
        timeout_s: float | None = 30.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        max_workers: int = 8,
        latency_window: int = 10_000,
    ) -> None:
        from slca_lightning.calls.result_cache import SimulatorCache

        if cache_scope not in ("global", "task"):
            raise ValueError(f"cache_scope must be 'global' or 'task', got {cache_scope!r}")
        self.backend = backend
        self.strict_schema = strict_schema
        self.use_schema = use_schema
        self.cache = cache
        self.cache_scope = cache_scope
        self.cache_path = cache_path
        self.timeout_s = timeout_s
        self.max_retries = max(0, int(max_retries))
        self.retry_backoff_s = retry_backoff_s
        self.max_workers = max(1, int(max_workers))
        self._lock = threading.Lock()
        self._cache = SimulatorCache(cache_path if cache else None)
        self.stats: dict[str, int] = dict.fromkeys(STAT_KEYS, 0)
        self.env_errors: Counter[str] = Counter()
        self._latencies: deque[tuple[int, float]] = deque(maxlen=max(1, int(latency_window)))
        self._seq = itertools.count(1)

    def reset_stats(self) -> None:
        """Set every counter in :attr:`stats` (and :attr:`env_errors`) back to 0."""
        with self._lock:
            self.stats = dict.fromkeys(STAT_KEYS, 0)
            self.env_errors = Counter()

    def _env_error(self, exc: BaseException, where: str) -> None:
        """Count an environment failure by type in :attr:`env_errors` (first traceback of
        each type logged)."""
        name = report_env_error(exc, where)
        with self._lock:  # calls of a batch run on several threads
            self.env_errors[name] += 1

    def clear_cache(self) -> None:
        """Forget every cached observation (on disk too)."""
        self._cache.clear()

    def _bump(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    def latencies_since(self, seq: int) -> tuple[list[float], int]:
        """Latencies (s) of calls numbered after ``seq`` (still in the window), and the
        number of the latest call (pass it back next time)."""
        with self._lock:
            items = list(self._latencies)
        latest = items[-1][0] if items else seq
        return [lat for n, lat in items if n > seq], latest

    def stats_snapshot(self) -> dict[str, int]:
        """:attr:`stats` plus ``cache_*`` counters and the backend chain's own counters."""
        with self._lock:
            out = dict(self.stats)
        for key, value in self._cache.stats.items():
            out[f"cache_{key}"] = value
        backend, seen = self.backend, set()
        while backend is not None and id(backend) not in seen:
            seen.add(id(backend))
            for key, value in dict(getattr(backend, "stats", {}) or {}).items():
                if isinstance(value, (int, float)) and key not in out:
                    out[key] = value
            backend = (
                getattr(backend, "backend", None)
                or getattr(backend, "chat", None)  # LLMBackend -> its ChatBackend
                or getattr(backend, "fallback", None)
            )
        return out

    def __call__(self, call: ToolCall, task: Task) -> ToolResult:
        """Answer one call (see the module docstring); never raises.

        The call is cleaned first (:func:`~slca_lightning.calls.sanitize.clean_call`: no
        lone surrogates or control characters, capped lengths and depth; a no-op on a call
        the agent loop already cleaned), so the backend, the cache and the observation
        only ever see encodable text. An exception escaping the steps below (a bug, a
        circular argument structure) becomes a ``backend_error`` observation, counted in
        :attr:`env_errors` by type.
        """
        start = time.perf_counter()
        self._bump("calls")
        try:
            result = self._simulate(clean_call(call), task, start)
        except Exception as exc:  # a bug or an unencodable call must not kill the rollout
            self._bump("backend_errors")
            self._env_error(exc, "simulator")
            result = self._error(call, "backend_error", error_json(exc))
        result.latency_s = time.perf_counter() - start
        with self._lock:
            self._latencies.append((next(self._seq), result.latency_s))
        return result

    def simulate_batch(self, calls: list[tuple[ToolCall, Task]]) -> list[ToolResult]:
        """Answer several calls concurrently on ``max_workers`` threads, in order."""
        if self.max_workers == 1 or len(calls) <= 1:
            return super().simulate_batch(calls)
        with cf.ThreadPoolExecutor(max_workers=min(self.max_workers, len(calls))) as pool:
            return list(pool.map(lambda pair: self(*pair), calls))

    @staticmethod
    def _error(call: ToolCall, kind: str, content: str) -> ToolResult:
        return ToolResult(call=call, content=content, is_error=True, error_kind=kind)

    def _validate(
        self, call: ToolCall, task: Task
    ) -> tuple[dict[str, Any] | None, ToolResult | None]:
        """(schema, None) when the call may run, else (None, error result)."""
        schemas = index_schemas(task.tools)
        available = task.allowed_tools if task.allowed_tools else schemas
        if call.name not in available:
            self._bump("unknown_tool")
            return None, self._error(call, "unknown_tool", unknown_tool_message(call.name))
        schema = schemas.get(call.name)
        arguments = call.arguments if isinstance(call.arguments, dict) else {}
        missing = [p for p in required_params(schema) if p not in arguments]
        if missing:
            self._bump("missing_arguments")
            text = f"Missing required parameter(s) for tool '{call.name}': {', '.join(missing)}."
            return None, self._error(call, "missing_arguments", text)
        if self.strict_schema and schema is not None:
            problems = validate_arguments(schema, call.arguments)
            if problems:
                self._bump("schema_invalid")
                text = f"Invalid arguments for tool '{call.name}': {'; '.join(problems)}."
                return None, self._error(call, "schema_invalid", text)
        return schema, None

    def _simulate(self, call: ToolCall, task: Task, start: float) -> ToolResult:
        schema = None
        if self.use_schema:
            schema, error = self._validate(call, task)
            if error is not None:
                return error
        key = (call.name, canonical_arguments(call.arguments), canonical_arguments(schema))
        if self.cache_scope == "task":
            key += (str(task.task_id),)
        if self.cache:
            hit = self._cache.get(key)
            if hit is not None:
                self._bump("cache_hits")
                return ToolResult(call=call, content=hit)
        deadline = None if self.timeout_s is None else start + self.timeout_s
        result = self._run_backend(call, schema, task, deadline)
        injected = _injected(result.content)
        result.content = clean_text(str(result.content))
        if self.cache and not result.is_error and not injected:
            self._cache.put(key, result.content)
        return result

    def _check_output(self, content: str, schema: dict[str, Any] | None) -> list[str]:
        """Problems of ``content`` against the tool's output schema ([] when none declared)."""
        declared = output_schema(schema) if self.use_schema else None
        if declared is None:
            return []
        try:
            parsed = json.loads(content)
        except (ValueError, RecursionError) as exc:
            return [f"not JSON ({exc})"]
        return validate_arguments({"parameters": declared}, parsed)

    def _run_backend(
        self, call: ToolCall, schema: dict[str, Any] | None, task: Task, deadline: float | None
    ) -> ToolResult:
        last_exc: BaseException | None = None
        problems: list[str] = []
        for attempt in range(self.max_retries + 1):
            if attempt > 0:
                pause = self.retry_backoff_s * attempt
                if deadline is not None and time.perf_counter() + pause >= deadline:
                    break  # no time left for another try: report the error we have
                self._bump("retries")
                time.sleep(pause)
            self._bump("backend_calls")
            try:
                content = self._attempt(call, schema, task, deadline)
            except _DeadlineExceeded:
                self._bump("timeouts")
                late = TimeoutError(f"no response within {self.timeout_s} s")
                self._env_error(late, "simulator backend")
                text = error_json(f"timeout: no response within {self.timeout_s} s")
                return self._error(call, "timeout", text)
            except ToolError as exc:  # the tool's own answer: retrying cannot change it
                self._bump("tool_errors")
                return self._error(call, "tool_error", error_json(exc.__cause__ or exc))
            except Exception as exc:
                if _injected(exc):
                    self._bump("injected_faults")
                last_exc, problems = exc, []
                continue
            problems = self._check_output(content, schema)
            if not problems:
                return ToolResult(call=call, content=content)
            self._bump("output_invalid")
            last_exc = None
        if problems:
            text = f"Invalid output from tool '{call.name}': {'; '.join(problems)}."
            return self._error(call, "output_invalid", error_json(text))
        if _injected(last_exc):
            kind = "timeout" if isinstance(last_exc, TimeoutError) else "backend_error"
            return self._error(call, kind, error_json(last_exc))
        self._bump("backend_errors")
        if last_exc is not None:
            self._env_error(last_exc, "simulator backend")
        return self._error(call, "backend_error", error_json(last_exc))

    def _attempt(
        self, call: ToolCall, schema: dict[str, Any] | None, task: Task, deadline: float | None
    ) -> str:
        """One backend call in a worker thread, waited on until ``deadline``.

        A reply that is not a string is serialised here (:func:`to_observation`); a value
        that cannot be serialised (e.g. an integer past Python's 4,300-digit limit) is the
        tool's answer, raised as :class:`ToolError`, not a transient fault to retry.
        """
        if deadline is None:
            return observation_text(self.backend.execute(call, schema, task))
        remaining = deadline - time.perf_counter()
        if remaining <= 0:
            raise _DeadlineExceeded
        pool = cf.ThreadPoolExecutor(max_workers=1, thread_name_prefix="sgls-backend")
        try:
            future = pool.submit(self.backend.execute, call, schema, task)
            done, _ = cf.wait([future], timeout=remaining)
            if not done:
                raise _DeadlineExceeded
            value = future.result()  # re-raises the backend's exception
            return observation_text(value)
        finally:
            pool.shutdown(wait=False)


class _DeadlineExceeded(Exception):
    """Our own deadline passed (distinct from a ``TimeoutError`` the backend raises, which
    is retried like any other backend exception)."""


def _injected(value: Any) -> bool:
    """Whether ``value`` (an exception or a payload) was made by a FaultInjector on purpose."""
    from slca_lightning.tools.faults import InjectedFault, InjectedMalformed

    return isinstance(value, (InjectedFault, InjectedMalformed))
