"""SGLS simulator (METHOD §7) and its backends.

The LLM in these tests is a :class:`CallableBackend` over a Python function: it stands in
for an LLM server (tests against real servers come in a later issue).
"""

from __future__ import annotations

import json
import threading
import time

import pytest

from slca_lightning.chat_backends import CallableBackend
from slca_lightning.tools.base import ToolBackend, ToolSimulator
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import (
    LLMBackend,
    PythonBackend,
    ScriptedBackend,
    extract_tool_response,
)
from slca_lightning.types import Task, ToolCall

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "days": {"type": "integer"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["city", "days"],
        },
    },
}
ADD = {"name": "add", "parameters": {"type": "object", "required": ["a", "b"]}}
TASK = Task(task_id="t1", messages=[], tools=[WEATHER, ADD])
GOOD = ToolCall("get_weather", {"city": "Paris", "days": 2})


def sim(backend: ToolBackend | None = None, **kw) -> SchemaGuidedSimulator:
    kw.setdefault("retry_backoff_s", 0.01)
    return SchemaGuidedSimulator(backend or ScriptedBackend({"get_weather": {"t": 17}}), **kw)


class Flaky(ToolBackend):
    """Raises ``failures`` times, then answers."""

    def __init__(self, failures: int) -> None:
        self.failures, self.attempts = failures, 0

    def execute(self, call, schema, task):
        self.attempts += 1
        if self.attempts <= self.failures:
            raise ConnectionError("server busy")
        return '{"ok":true}'


# ---------------------------------------------------------------- validation


def test_unknown_tool_gets_the_exact_method_text():
    s = sim()
    result = s(ToolCall("get_wether", {"city": "Paris"}), TASK)
    assert result.content == "Tool 'get_wether' not found in the current available tools set."
    assert result.is_error and result.error_kind == "unknown_tool"
    assert s.stats["unknown_tool"] == 1 and s.stats["calls"] == 1


def test_allowed_tools_restrict_the_available_set():
    task = Task(task_id="t", messages=[], tools=[WEATHER, ADD], allowed_tools=["add"])
    assert sim()(GOOD, task).error_kind == "unknown_tool"


def test_missing_required_parameters_are_named_in_schema_order():
    s = sim()
    result = s(ToolCall("get_weather", {"unit": "c"}), TASK)
    assert result.content == "Missing required parameter(s) for tool 'get_weather': city, days."
    assert result.error_kind == "missing_arguments" and s.stats["missing_arguments"] == 1
    one = s(ToolCall("get_weather", {"days": 1}), TASK)
    assert one.content == "Missing required parameter(s) for tool 'get_weather': city."


def test_type_and_enum_errors_only_in_strict_mode():
    bad = ToolCall("get_weather", {"city": "Paris", "days": "two", "unit": "kelvin"})
    assert not sim()(bad, TASK).is_error  # the reference checks nothing else
    s = sim(strict_schema=True)
    result = s(bad, TASK)
    assert result.error_kind == "schema_invalid" and s.stats["schema_invalid"] == 1
    assert result.content == (
        "Invalid arguments for tool 'get_weather': $.days: 'two' is not of type 'integer'; "
        "$.unit: 'kelvin' is not one of ['c', 'f']."
    )
    assert not s(GOOD, TASK).is_error


def test_ablation_skips_validation_and_hides_the_schema():
    seen = []
    backend = ScriptedBackend(lambda call, task: seen.append(call.name) or "ok")

    class Spy(ToolBackend):
        def execute(self, call, schema, task):
            seen.append(schema)
            return backend.execute(call, schema, task)

    s = sim(Spy(), use_schema=False, strict_schema=True)
    assert s(ToolCall("no_such_tool", {}), TASK).content == "ok"
    assert s(ToolCall("get_weather", {}), TASK).content == "ok"
    assert seen == [None, "no_such_tool", None, "get_weather"]
    assert s.stats["unknown_tool"] == s.stats["missing_arguments"] == 0


# ---------------------------------------------------------------- backends, retries, timeouts


def test_python_backend_runs_a_real_function():
    s = sim(PythonBackend({"add": lambda a, b: {"sum": a + b, "note": "é"}}))
    result = s(ToolCall("add", {"a": 2, "b": 3}), TASK)
    assert not result.is_error and json.loads(result.content) == {"sum": 5, "note": "é"}
    assert result.content == '{"sum":5,"note":"é"}' and result.latency_s >= 0


def test_python_backend_unknown_function_becomes_an_error_observation():
    s = sim(PythonBackend({}), max_retries=0)
    result = s(ToolCall("add", {"a": 1, "b": 2}), TASK)
    assert (
        result.error_kind == "backend_error" and "KeyError" in json.loads(result.content)["error"]
    )


def test_a_tool_rejecting_its_arguments_is_answered_at_once_not_retried():
    """A real function raising on bad arguments is the tool's answer (like an API's 4xx):
    one backend call, no back-off (the default 0.5 s × 2 retries would add 1.5 s)."""
    calls = []

    def add(a, b):
        calls.append((a, b))
        raise ValueError(f"a must be an int, got {a!r}")

    s = SchemaGuidedSimulator(PythonBackend({"add": add}))  # default retries and back-off
    t0 = time.perf_counter()
    result = s(ToolCall("add", {"a": "x", "b": 2}), TASK)
    assert time.perf_counter() - t0 < 0.4
    assert len(calls) == 1 and result.is_error and result.error_kind == "tool_error"
    assert json.loads(result.content) == {"error": "ValueError: a must be an int, got 'x'"}
    assert s.stats["tool_errors"] == 1 and s.stats["retries"] == 0
    assert s.stats["backend_errors"] == 0


def test_exception_once_then_success_is_retried():
    backend = Flaky(failures=1)
    s = sim(backend, timeout_s=0.5)
    result = s(GOOD, TASK)
    assert not result.is_error and result.content == '{"ok":true}'
    assert backend.attempts == 2 and s.stats["retries"] == 1 and s.stats["backend_errors"] == 0


def test_always_failing_backend_gives_a_counted_error_observation():
    backend = Flaky(failures=10**6)
    s = sim(backend, max_retries=2, timeout_s=None)
    result = s(GOOD, TASK)
    assert result.is_error and result.error_kind == "backend_error"
    assert json.loads(result.content) == {"error": "ConnectionError: server busy"}
    assert backend.attempts == 3 and s.stats["retries"] == 2 and s.stats["backend_errors"] == 1


def test_retry_backoff_is_linear():
    backend = Flaky(failures=2)
    start = time.perf_counter()
    sim(backend, retry_backoff_s=0.05, timeout_s=None)(GOOD, TASK)
    assert 0.15 <= time.perf_counter() - start < 0.4  # 0.05 × 1 + 0.05 × 2


def test_slow_backend_times_out_near_the_deadline():
    release = threading.Event()

    class Slow(ToolBackend):
        def execute(self, call, schema, task):
            release.wait(2.0)
            return "late"

    s = sim(Slow(), timeout_s=0.2)
    start = time.perf_counter()
    result = s(GOOD, TASK)
    elapsed = time.perf_counter() - start
    release.set()
    assert result.error_kind == "timeout" and result.is_error
    assert "timeout" in json.loads(result.content)["error"]
    assert 0.19 <= elapsed < 0.45 and result.latency_s >= 0.19
    assert s.stats["timeouts"] == 1 and s.stats["retries"] == 0


def test_retries_do_not_outlive_the_deadline():
    s = sim(Flaky(failures=10**6), retry_backoff_s=0.3, max_retries=5, timeout_s=0.2)
    start = time.perf_counter()
    assert s(GOOD, TASK).error_kind == "backend_error"
    assert time.perf_counter() - start < 0.2 and s.stats["retries"] == 0


def test_simulator_never_raises_even_when_the_backend_returns_garbage():
    class Weird(ToolBackend):
        def execute(self, call, schema, task):
            return {"set": {1, 2}}  # not a str: dumped with str() fallback

    assert sim(Weird())(GOOD, TASK).content == '{"set":"{1, 2}"}'
    circular: dict = {}
    circular["self"] = circular
    result = sim()(ToolCall("get_weather", {"city": circular, "days": 1}), TASK)
    assert result.error_kind == "backend_error"


# ---------------------------------------------------------------- cache and stats


def test_cache_hits_on_key_order_not_on_other_arguments_and_never_caches_errors():
    backend = ScriptedBackend({"get_weather": {"t": 17}})
    s = sim(backend)
    first = s(ToolCall("get_weather", {"city": "Paris", "days": 2}), TASK)
    again = s(ToolCall("get_weather", {"days": 2, "city": "Paris"}), TASK)
    assert again.content == first.content and s.stats["cache_hits"] == 1
    assert again.call.arguments == {"days": 2, "city": "Paris"}
    s(ToolCall("get_weather", {"city": "Rome", "days": 2}), TASK)
    assert len(backend.calls) == 2 and s.stats["cache_hits"] == 1

    flaky = Flaky(failures=1)
    s = sim(flaky, max_retries=0)
    assert s(GOOD, TASK).is_error
    assert not s(GOOD, TASK).is_error and flaky.attempts == 2 and s.stats["cache_hits"] == 0
    assert s(GOOD, TASK).content == '{"ok":true}' and s.stats["cache_hits"] == 1


def test_cache_can_be_turned_off_and_stats_reset():
    backend = ScriptedBackend({"get_weather": "sunny"})
    s = sim(backend, cache=False)
    s(GOOD, TASK)
    s(GOOD, TASK)
    assert len(backend.calls) == 2 and s.stats["cache_hits"] == 0 and s.stats["calls"] == 2
    s.reset_stats()
    assert set(s.stats.values()) == {0}


def test_simulate_batch_keeps_order_and_runs_concurrently():
    class Sleepy(ToolBackend):
        def execute(self, call, schema, task):
            time.sleep(0.1)
            return str(call.arguments["days"])

    s = sim(Sleepy(), max_workers=8, cache=False)
    calls = [(ToolCall("get_weather", {"city": "P", "days": i}), TASK) for i in range(8)]
    calls.append((ToolCall("nope", {}), TASK))
    start = time.perf_counter()
    results = s.simulate_batch(calls)
    assert time.perf_counter() - start < 0.5
    assert [r.content for r in results[:8]] == [str(i) for i in range(8)]
    assert results[8].error_kind == "unknown_tool" and s.stats["calls"] == 9


def test_default_simulate_batch_is_sequential():
    class Echo(ToolSimulator):
        def __call__(self, call, task):
            return SchemaGuidedSimulator(ScriptedBackend({"add": "3"}))(call, task)

    results = Echo().simulate_batch([(ToolCall("add", {"a": 1, "b": 2}), TASK)] * 2)
    assert [r.content for r in results] == ["3", "3"]


# ---------------------------------------------------------------- LLM backend


def recording_llm(reply: str):
    seen: list[dict] = []

    def fn(messages, **kw):
        seen.append({"messages": messages, **kw})
        return reply

    return CallableBackend(fn), seen


def test_llm_prompt_has_role_examples_schema_and_call():
    chat, seen = recording_llm('<tool_response>{"t": 17, "city": "Paris"}</tool_response>')
    result = sim(LLMBackend(chat, seed=3))(GOOD, TASK)
    assert result.content == '{"t":17,"city":"Paris"}'  # re-dumped compactly
    system, user = (m["content"] for m in seen[0]["messages"])
    assert "backend API server, not an assistant" in system
    assert "<tool_response>{JSON}</tool_response>" in system and "get_weather({" in system
    assert json.dumps(WEATHER["function"]) in user
    assert '{"name": "get_weather", "arguments": {"city": "Paris", "days": 2}}' in user
    assert seen[0]["temperature"] == 0.6 and seen[0]["max_tokens"] == 512
    assert isinstance(seen[0]["seed"], int)


def test_llm_prompt_has_no_schema_in_the_ablation():
    chat, seen = recording_llm("<tool_response>{}</tool_response>")
    sim(LLMBackend(chat), use_schema=False)(GOOD, TASK)
    user = seen[0]["messages"][1]["content"]
    assert "schema" not in user.lower() and "Current weather" not in user
    assert "get_weather" in user and seen[0]["seed"] is None


def test_llm_seed_is_stable_per_call_and_differs_between_calls():
    chat, seen = recording_llm("<tool_response>{}</tool_response>")
    llm = LLMBackend(chat, seed=7)
    for call in (GOOD, ToolCall("get_weather", {"days": 2, "city": "Paris"}), ToolCall("add", {})):
        llm.execute(call, None, TASK)
    assert seen[0]["seed"] == seen[1]["seed"] != seen[2]["seed"]


def test_llm_empty_reply_is_retried():
    replies = iter(["<tool_response>  </tool_response>", "<tool_response>42</tool_response>"])
    chat = CallableBackend(lambda messages: next(replies))
    s = sim(LLMBackend(chat))
    assert s(GOOD, TASK).content == "42" and s.stats["retries"] == 1


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('<tool_response>{"a": 1}</tool_response>', '{"a": 1}'),
        ("<tool_response>old</tool_response> text <tool_response>new</tool_response>", "new"),
        ('<tool_call>{"name": "x"}</tool_call>', '{"name": "x"}'),
        ("<tool_call>A</tool_call><tool_response>B</tool_response>", "B"),
        ('<tool_response>\n{"a": 1}\n', '{"a": 1}'),  # dangling open
        ('{"a": 1}</tool_response>', '{"a": 1}'),  # dangling close
        ("<tool_response>x</tool_response></tool_response>", "x"),
        ("<think>no <tool_response>draft</tool_response></think><tool_response>ok", "ok"),
        ('<tool_response>```json\n{"a": 1}\n```</tool_response>', '{"a": 1}'),
        ("  plain text reply  ", "plain text reply"),
    ],
)
def test_extract_tool_response(reply, expected):
    assert extract_tool_response(reply) == expected


@pytest.mark.parametrize(
    "reply", ["", "   ", "<tool_response></tool_response>", "</tool_response>", "<tool_call>\n"]
)
def test_extract_tool_response_raises_on_nothing(reply):
    with pytest.raises(ValueError):
        extract_tool_response(reply)


def test_scripted_backend_default_and_missing():
    task = Task(task_id="x", messages=[], allowed_tools=["a", "b"])
    s = sim(ScriptedBackend({"a": "A"}, default={"ok": 1}))
    assert s(ToolCall("a"), task).content == "A"
    assert s(ToolCall("b"), task).content == '{"ok":1}'
    strict = sim(ScriptedBackend({"a": "A"}), max_retries=0)
    assert strict(ToolCall("b"), task).error_kind == "backend_error"
