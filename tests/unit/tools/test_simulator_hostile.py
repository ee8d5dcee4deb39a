"""SGLS on hostile calls: encodable observations, serialisation failures as tool errors,
environment errors counted by type (issue 17). Real simulator, real backends, real
built-in tools; no mocks."""

from __future__ import annotations

import json
import threading
import time

import pytest

from slca_lightning.data.suite import builtin_suite
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.faults import FaultInjector
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend, ScriptedBackend
from slca_lightning.types import Task, ToolCall

SUITE = builtin_suite()
TASK = Task(
    task_id="t",
    messages=[],
    tools=SUITE.tools_of(["math", "text"]),
    allowed_tools=[],
)


def utf8(text: str) -> str:
    text.encode("utf-8")  # raises on a lone surrogate
    return text


@pytest.mark.parametrize("timeout_s", [None, 5.0])  # caller's thread / worker thread
def test_a_lone_surrogate_in_the_name_gets_the_method_text_with_a_clean_name(timeout_s):
    s = SchemaGuidedSimulator(PythonBackend(SUITE.functions), timeout_s=timeout_s)
    result = s(ToolCall("tool\udc00", {}), TASK)
    assert result.error_kind == "unknown_tool"
    assert utf8(result.content) == (
        "Tool 'tool\ufffd' not found in the current available tools set."
    )
    assert not s.env_errors


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_an_unserialisable_result_is_a_tool_error_at_once_not_a_retried_fault(timeout_s):
    """power(900-digit base, 10) has 9,000 digits: past Python's 4,300-digit str(int)
    limit. Default retries and back-off (0.5 s, 1.0 s) would take 1.5 s."""
    s = SchemaGuidedSimulator(PythonBackend(SUITE.functions), timeout_s=timeout_s)
    t0 = time.perf_counter()
    result = s(ToolCall("power", {"base": int("9" * 900), "exponent": 10}), TASK)
    assert time.perf_counter() - t0 < 0.4
    assert result.is_error and result.error_kind == "tool_error"
    assert "ValueError" in json.loads(utf8(result.content))["error"]
    assert s.stats["backend_calls"] == 1 and s.stats["retries"] == 0
    assert s.stats["tool_errors"] == 1 and s.stats["backend_errors"] == 0
    assert not s.env_errors


@pytest.mark.parametrize("timeout_s", [None, 5.0])
def test_a_backend_returning_an_unserialisable_object_is_a_tool_error(timeout_s):
    class Huge(ToolBackend):
        def execute(self, call, schema, task):
            return {"n": 10**5000}

    for backend in (Huge(), ScriptedBackend({"add": {"n": 10**5000}})):
        s = SchemaGuidedSimulator(backend, timeout_s=timeout_s)
        result = s(ToolCall("add", {"a": 1, "b": 2}), TASK)
        assert result.error_kind == "tool_error", type(backend)
        assert s.stats["retries"] == 0 and s.stats["backend_calls"] == 1


def test_hostile_strings_reach_the_tool_clean_and_the_disk_cache_stores_them(tmp_path):
    seen = []

    def reverse(text, **extra):
        seen.append(text)
        assert extra == {"k\ufffd": ["\\x1b"]}
        return {"text": text[::-1]}

    s = SchemaGuidedSimulator(PythonBackend({"reverse": reverse}), cache_path=str(tmp_path / "c"))
    call = ToolCall("reverse", {"text": "ab\udc00\x00", "k\ud800": ["\x1b"]})
    first, second = s(call, TASK), s(call, TASK)
    assert not first.is_error and first.content == second.content
    assert seen == ["ab\ufffd\\x00"]  # the tool ran once, on the clean copy
    assert json.loads(utf8(first.content)) == {"text": "00x\\\ufffdba"}
    assert s.stats["cache_hits"] == 1 and not s.env_errors


def test_environment_errors_are_counted_by_type_injected_faults_and_tool_errors_are_not():
    class Down(ToolBackend):
        def execute(self, call, schema, task):
            raise ConnectionError("down \udc00")

    s = SchemaGuidedSimulator(Down(), timeout_s=None, max_retries=1, retry_backoff_s=0.0)
    for _ in range(3):
        result = s(ToolCall("add", {"a": 1, "b": 2}), TASK)
    assert result.error_kind == "backend_error"
    assert json.loads(utf8(result.content)) == {"error": "ConnectionError: down \ufffd"}
    assert dict(s.env_errors) == {"ConnectionError": 3}
    batch = [(ToolCall("add", {"a": k, "b": 2}), TASK) for k in range(40)]
    assert all(r.error_kind == "backend_error" for r in s.simulate_batch(batch))
    assert dict(s.env_errors) == {"ConnectionError": 43}  # counted from 8 threads

    release = threading.Event()

    class Hung(ToolBackend):
        def execute(self, call, schema, task):
            release.wait(2.0)
            return "{}"

    s = SchemaGuidedSimulator(Hung(), timeout_s=0.1)
    assert s(ToolCall("add", {"a": 1, "b": 2}), TASK).error_kind == "timeout"
    release.set()
    assert dict(s.env_errors) == {"TimeoutError": 1}

    injected = FaultInjector(PythonBackend(SUITE.functions), server_error_rate=1.0)
    s = SchemaGuidedSimulator(injected, timeout_s=None, max_retries=1, retry_backoff_s=0.0)
    assert s(ToolCall("add", {"a": 1, "b": 2}), TASK).is_error
    assert s.stats["injected_faults"] == 2 and not s.env_errors  # on purpose: not counted

    s = SchemaGuidedSimulator(PythonBackend(SUITE.functions), timeout_s=None)
    assert s(ToolCall("add", {"a": "x", "b": 2}), TASK).error_kind == "tool_error"
    assert not s.env_errors  # the tool's answer, not an environment failure
    s.env_errors["X"] = 1
    s.reset_stats()
    assert not s.env_errors


def test_a_bug_inside_the_simulator_is_an_observation_counted_by_type():
    class Broken(SchemaGuidedSimulator):
        def _validate(self, call, task):
            raise KeyError("bug")

    s = Broken(PythonBackend(SUITE.functions), timeout_s=None)
    result = s(ToolCall("add", {"a": 1, "b": 2}), TASK)
    assert result.error_kind == "backend_error" and dict(s.env_errors) == {"KeyError": 1}
