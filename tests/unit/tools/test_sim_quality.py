"""Simulator quality: the SQLite cache, output schemas, seeded sampling, fault injection,
the "w/o SGLS" ablation, ReplayBackend and the SimulatorStats callback.

Backends are real local ones (PythonBackend over the built-in suite, ScriptedBackend); the
LLM is a CallableBackend over a Python function, standing in for an LLM server (OpenAI /
MCP servers are tested with the backends of part A).
"""

from __future__ import annotations

import json
import threading

import pytest

from callbacks.simulator_stats import SimulatorStats
from slca_lightning.calls.result_cache import SimulatorCache
from slca_lightning.chat_backends import CallableBackend
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.faults import FaultInjector, InjectedMalformed
from slca_lightning.tools.replay import ReplayBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator, percentile
from slca_lightning.tools.tool_backends import LLMBackend, PythonBackend, ScriptedBackend
from slca_lightning.types import Task, ToolCall

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
        "outputSchema": {
            "type": "object",
            "properties": {"sum": {"type": "integer"}},
            "required": ["sum"],
        },
    },
}
TASK = Task(task_id="t1", messages=[], tools=[ADD])
OTHER = Task(task_id="t2", messages=[], tools=[ADD])


class Counting(ToolBackend):
    """Counts executions; answers ``{"sum": a + b}``."""

    def __init__(self) -> None:
        self.n = 0
        self.lock = threading.Lock()

    def execute(self, call, schema, task):
        with self.lock:
            self.n += 1
        return {"sum": call.arguments["a"] + call.arguments["b"]}


def calls(n: int) -> list[ToolCall]:
    return [ToolCall("add", {"a": i, "b": 1}) for i in range(n)]


def test_disk_cache_survives_a_new_simulator_and_makes_zero_backend_calls(tmp_path):
    path = str(tmp_path / "c" / "sim.sqlite")
    first = Counting()
    s1 = SchemaGuidedSimulator(first, cache_path=path)
    out1 = s1.simulate_batch([(c, TASK) for c in calls(12)])
    assert first.n == 12 and s1.stats["backend_calls"] == 12
    second = Counting()
    s2 = SchemaGuidedSimulator(second, cache_path=path)  # a "restarted process"
    out2 = s2.simulate_batch([(c, TASK) for c in calls(12)])
    assert second.n == 0 and s2.stats["backend_calls"] == 0 and s2.stats["cache_hits"] == 12
    assert [r.content for r in out1] == [r.content for r in out2]
    assert s2.stats_snapshot()["cache_disk_hits"] == 12 and len(s2._cache) == 12


def test_cache_scope_task_keeps_tasks_apart_and_global_shares():
    for scope, expected in (("global", 1), ("task", 2)):
        backend = Counting()
        s = SchemaGuidedSimulator(backend, cache_scope=scope)
        s(ToolCall("add", {"a": 1, "b": 2}), TASK)
        s(ToolCall("add", {"b": 2, "a": 1}), OTHER)
        assert backend.n == expected, scope
    with pytest.raises(ValueError, match="cache_scope"):
        SchemaGuidedSimulator(Counting(), cache_scope="episode")


def test_cache_is_safe_across_threads(tmp_path):
    cache = SimulatorCache(tmp_path / "t.sqlite")
    errors = []

    def work(k):
        try:
            for i in range(50):
                cache.put(("add", str(k), str(i)), f"{k}-{i}")
                assert cache.get(("add", str(k), str(i))) == f"{k}-{i}"
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(cache) == 300 and cache.stats["disk_errors"] == 0


def test_output_schema_failure_is_retried_then_an_error_observation():
    replies = iter(['{"total": 3}', '{"sum": 3}'])
    s = SchemaGuidedSimulator(ScriptedBackend(lambda c, t: next(replies)), retry_backoff_s=0)
    assert s(ToolCall("add", {"a": 1, "b": 2}), TASK).content == '{"sum": 3}'
    assert s.stats["output_invalid"] == 1 and s.stats["retries"] == 1

    s = SchemaGuidedSimulator(ScriptedBackend({"add": "not json"}), retry_backoff_s=0)
    result = s(ToolCall("add", {"a": 1, "b": 2}), TASK)
    assert result.is_error and result.error_kind == "output_invalid"
    assert "not JSON" in result.content and s.stats["output_invalid"] == 3
    assert s(ToolCall("add", {"a": 1, "b": 2}), TASK).is_error  # errors are not cached
    bad_type = SchemaGuidedSimulator(ScriptedBackend({"add": {"sum": "3"}}), max_retries=0)
    assert "$.sum" in bad_type(ToolCall("add", {"a": 1, "b": 2}), TASK).content


def test_ablation_setting_skips_argument_and_output_validation():
    s = SchemaGuidedSimulator(ScriptedBackend({"add": "not json", "nope": "x"}), use_schema=False)
    assert s(ToolCall("add", {}), TASK).content == "not json"  # missing args, bad output
    assert s(ToolCall("nope", {}), TASK).content == "x"  # unknown tool
    assert s.stats["output_invalid"] == s.stats["missing_arguments"] == 0
    with_schema = SchemaGuidedSimulator(ScriptedBackend({"add": "not json"}))
    assert with_schema(ToolCall("add", {}), TASK).error_kind == "missing_arguments"


def test_llm_seed_comes_from_global_seed_tool_and_canonical_arguments():
    seen = []
    chat = CallableBackend(lambda messages, seed: seen.append(seed) or '{"sum": 3}')
    for seed in (7, 7, 8):
        LLMBackend(chat, seed=seed).execute(ToolCall("add", {"a": 1, "b": 2}), None, TASK)
    LLMBackend(chat, seed=7).execute(ToolCall("add", {"b": 2, "a": 1}), None, OTHER)
    LLMBackend(chat, seed=7).execute(ToolCall("add", {"a": 2, "b": 2}), None, TASK)
    assert seen[0] == seen[1] == seen[3] and len({seen[0], seen[2], seen[4]}) == 3


def test_fault_injector_is_deterministic_and_counted_apart_from_real_faults():
    def run(seed):
        inj = FaultInjector(Counting(), 0.1, 0.1, 0.1, seed=seed)
        s = SchemaGuidedSimulator(inj, retry_backoff_s=0, max_retries=1, timeout_s=None)
        out = [s(c, TASK).content for c in calls(200)]
        return out, inj, s

    a, inj, s = run(3)
    b, _, _ = run(3)
    c, _, _ = run(4)
    assert a == b and a != c
    injected = inj.stats["injected_timeouts"] + inj.stats["injected_server_errors"]
    assert 0.1 < injected / inj.stats["attempts"] < 0.3 and inj.stats["injected_malformed"] > 0
    assert s.stats["injected_faults"] == injected
    assert s.stats["backend_errors"] == 0 and s.stats["timeouts"] == 0  # none were real
    assert s.stats["output_invalid"] == inj.stats["injected_malformed"]  # caught by schema
    assert s.stats_snapshot()["injected_malformed"] == inj.stats["injected_malformed"]
    with pytest.raises(ValueError, match="rates"):
        FaultInjector(PythonBackend(), 0.6, 0.6)


def test_injected_malformed_payload_is_never_cached():
    inj = FaultInjector(ScriptedBackend({"x": "ok"}), malformed_rate=1.0)
    s = SchemaGuidedSimulator(inj, use_schema=False)
    first = s(ToolCall("x", {}), TASK)
    assert isinstance(inj.execute(ToolCall("x", {}), None, TASK), InjectedMalformed)
    s(ToolCall("x", {}), TASK)
    assert first.content == '{"result": "trunc' and s.stats["cache_hits"] == 0


def test_faults_are_never_cached_and_a_rerun_calls_only_what_never_got_a_real_response(
    tmp_path,
):
    """Faults on (no output schema, so injected malformed payloads reach the policy), disk
    cache on: only real responses are stored; a rerun on the cache calls the backend only
    for the calls that saw nothing but faults in the first run."""
    path = str(tmp_path / "sim.sqlite")
    plain = {k: v for k, v in ADD["function"].items() if k != "outputSchema"}
    task = Task(task_id="p", messages=[], tools=[{"type": "function", "function": plain}])
    sequence = calls(40) * 3
    truth = {i: f'{{"sum":{i + 1}}}' for i in range(40)}

    def run():
        inj = FaultInjector(Counting(), 0.15, 0.15, 0.15, seed=5)
        sim = SchemaGuidedSimulator(inj, cache_path=path, max_retries=0, timeout_s=None)
        return [sim(c, task) for c in sequence], inj, sim

    first, _, _ = run()
    got = [(c.arguments["a"], not r.is_error and r.content == truth[c.arguments["a"]])
           for c, r in zip(sequence, first)]  # fmt: skip
    real = {i for i, ok in got if ok}
    first_real = {i for i, ok in got[:40] if ok}  # sequence[:40]: each call's first time
    faulted_then_real = real - first_real
    never_real = set(range(40)) - real
    assert first_real and faulted_then_real and never_real  # every case is exercised
    assert any(r.content == '{"result": "trunc' for r in first)  # malformed reached the policy
    probe = SchemaGuidedSimulator(ScriptedBackend({}), cache_path=path, max_retries=0)
    for call in calls(40):
        cached = probe(call, task)
        i = call.arguments["a"]
        assert (not cached.is_error) == (i in real), i  # a fault is not a tool response
        assert cached.is_error or cached.content == truth[i]
    second, inj2, sim2 = run()
    touched = {json.loads(args)["a"] for _, args in inj2.call_outcomes()}
    assert touched == never_real  # zero backend calls for everything answered for real
    for call, result in zip(sequence, second):
        if call.arguments["a"] in real:
            assert result.content == truth[call.arguments["a"]]
    assert sim2.stats["backend_calls"] == inj2.stats["attempts"] == 3 * len(never_real)


def test_replay_backend_hits_and_falls_back_on_a_miss():
    table = {("add", '{"a":1,"b":2}'): '{"sum": 3, "recorded": true}'}
    replay = ReplayBackend(table=table, fallback=Counting())
    s = SchemaGuidedSimulator(replay)
    assert "recorded" in s(ToolCall("add", {"b": 2, "a": 1}), TASK).content
    assert s(ToolCall("add", {"a": 5, "b": 5}), TASK).content == '{"sum":10}'
    assert replay.stats == {"replay_hits": 1, "replay_misses": 1}
    assert s.stats_snapshot()["replay_misses"] == 1
    lonely = SchemaGuidedSimulator(ReplayBackend(table=table), max_retries=0)
    assert lonely(ToolCall("add", {"a": 9, "b": 9}), TASK).error_kind == "backend_error"


def test_simulator_stats_callback_logs_deltas_and_latency_percentiles():
    s = SchemaGuidedSimulator(
        FaultInjector(Counting(), server_error_rate=0.5, seed=1),
        retry_backoff_s=0,
        max_retries=0,
    )
    cb = SimulatorStats()
    for c in calls(10):
        s(c, TASK)
    first = cb.read(s)
    for c in calls(4):  # all cached or failing again
        s(c, TASK)
    second = cb.read(s)
    assert first["sim/calls"] == 10 and second["sim/calls"] == 4
    assert first["sim/injected_faults"] + first["sim/backend_calls"] >= 10
    assert first["sim/injected_faults"] > 0 and first["sim/injected_server_errors"] > 0
    assert 0 <= first["sim/latency_p50"] <= first["sim/latency_p90"] <= first["sim/latency_p99"]
    assert second["sim/cache_hit_rate"] == second["sim/cache_hits"] / 4
    assert cb.read(s).get("sim/latency_p50") is None  # no call since the last read


def test_percentile_nearest_rank():
    assert percentile([], 50) == 0.0
    assert percentile([3.0, 1.0, 2.0, 4.0], 50) == 2.0
    assert percentile(list(range(1, 101)), 99) == 99 and percentile([5.0], 99) == 5.0
