"""The fidelity command: the same gold calls through the simulator and a real backend.

Real parts: the built-in synthetic tasks' gold calls, SchemaGuidedSimulator (validation,
retries, output-schema checks) on the simulated side, the built-in Python tools, the
suite's MCP server over stdio (official SDK), the tiny model as LLM simulator in-process
(EngineChatBackend + LLMBackend, the command's default) and real jsonschema. Nothing is
mocked; ScriptedBackend is a deliberately wrong "simulator" so agreement must drop, and
FailsFirst a backend whose first attempt per call fails, so only SGLS retries recover it.
"""

from __future__ import annotations

import json
import sys

import pytest

from slca_lightning.eval.fidelity import (
    _schemas_for,
    as_simulator,
    build,
    compare,
    gold_calls,
    main,
    run_fidelity,
)
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend, ScriptedBackend
from slca_lightning.types import ToolCall

OUT = {"type": "object", "properties": {"result": {"type": "integer"}}, "required": ["result"]}


def test_compare_scores_exact_key_and_value_agreement():
    assert compare('{"result": 5}', '{"result":5}', OUT) == {
        "json_object": 1.0,
        "schema_valid": 1.0,
        "exact": 1.0,
        "same_keys": 1.0,
        "value_agreement": 1.0,
    }
    wrong = compare('{"result": "5", "x": 1}', '{"result": 5}', OUT)
    assert wrong["schema_valid"] == 0.0 and wrong["exact"] == 0.0
    assert wrong["same_keys"] == 0.0 and wrong["value_agreement"] == 0.0
    half = compare('{"a": 1, "b": 3}', '{"a": 1, "b": 2}', None)
    assert half["same_keys"] == 1.0 and half["value_agreement"] == 0.5
    assert compare("not json", '{"a": 1}', None)["json_object"] == 0.0
    assert compare(None, '{"a": 1}', None)["exact"] == 0.0  # the simulator failed
    assert compare('{"v": 0.30000000000000004}', '{"v": 0.3}', None)["exact"] == 1.0


def test_real_tools_as_simulator_agree_fully_and_a_wrong_one_does_not():
    calls = gold_calls(12, seed=3)
    assert len(calls) == 12 and len({c.name for c, _ in calls}) > 3
    real = PythonBackend()
    schemas = _schemas_for(real)
    perfect = run_fidelity(PythonBackend(), real, calls, schemas)
    assert perfect["n"] == 12 and perfect["real_errors"] == perfect["sim_errors"] == 0
    assert perfect["exact"] == perfect["schema_valid"] == perfect["value_agreement"] == 1.0
    assert perfect["sim_backend_calls"] == 12 and perfect["sim_retries"] == 0
    wrong = run_fidelity(ScriptedBackend({}, default={"result": 0}), real, calls, schemas)
    math = sum(c.name in ("add", "multiply", "power") for c, _ in calls)
    # the simulator enforces each tool's output schema: {"result": 0} only passes for the
    # math tools; the others are retried, then end as output_invalid error observations
    failing = 12 - math
    assert wrong["sim_errors"] == failing > 0
    assert wrong["sim_output_invalid"] == 3 * failing and wrong["sim_retries"] == 2 * failing
    assert wrong["json_object"] == pytest.approx(math / 12) and wrong["exact"] < 0.5
    assert wrong["same_keys"] == pytest.approx(math / 12)  # only math tools return "result"


class FailsFirst(ToolBackend):
    """The built-in tools, except that the first attempt of every call raises."""

    def __init__(self) -> None:
        self.real, self.seen = PythonBackend(), set()

    def execute(self, call, schema, task):
        key = (call.name, str(sorted(call.arguments.items())))
        if key not in self.seen:
            self.seen.add(key)
            raise ConnectionError("first attempt fails")
        return self.real.execute(call, schema, task)


def test_simulated_side_goes_through_sgls_retries_and_validation():
    calls = gold_calls(6, seed=1)
    real = PythonBackend()
    schemas = _schemas_for(real)
    unique = len({(c.name, str(sorted(c.arguments.items()))) for c, _ in calls})
    retried = run_fidelity(FailsFirst(), real, calls, schemas, max_retries=1)
    assert retried["exact"] == 1.0 and retried["sim_errors"] == 0
    assert retried["sim_retries"] == unique
    no_retry = run_fidelity(FailsFirst(), real, calls, schemas, max_retries=0)
    assert no_retry["sim_errors"] == unique and no_retry["exact"] < 1.0
    # a call to a tool the task does not offer is an SGLS error on the simulated side,
    # while the real tools (the ground truth) still answer it
    _, task = calls[0]
    assert "weather" not in {s["function"]["name"] for s in task.tools}
    weather = ToolCall("weather", {"city": "Oslo", "day": "today"})
    unknown = run_fidelity(PythonBackend(), real, [(weather, task)], schemas)
    assert unknown["real_errors"] == 0 and unknown["sim_errors"] == 1
    assert unknown["sim_backend_calls"] == 0
    sgls = SchemaGuidedSimulator(PythonBackend(), cache=False)
    assert as_simulator(sgls) is sgls and isinstance(as_simulator(real), SchemaGuidedSimulator)


def test_command_with_the_tiny_llm_simulator_prints_the_table(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    assert main(["--n", "3", "--max-tokens", "8", "--json", str(out)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[0].startswith("| simulator | real backend | calls | JSON object |")
    assert lines[2].startswith("| LLMBackend(tiny) | PythonBackend (built-in tools) | 3 |")
    summary = json.loads(out.read_text())
    assert summary["n"] == 3 and summary["real_errors"] == 0
    for key in ("json_object", "schema_valid", "exact", "same_keys", "value_agreement"):
        assert 0.0 <= summary[key] <= 1.0
    # a random tiny model does not know the tools: its replies fail SGLS (no JSON, or not
    # the output schema) on each of the 3 attempts, so the simulator answers with errors
    assert summary["exact"] == summary["json_object"] == 0.0 and summary["sim_errors"] == 3
    assert summary["sim_backend_calls"] == 9 and summary["sim_retries"] == 6


def test_command_against_the_mcp_server(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    args = [
        "--n",
        "6",
        "--real",
        "mcp",
        "--simulator",
        "slca_lightning.tools.tool_backends.PythonBackend",
    ]
    args += ["--mcp-command", f"{sys.executable} -m slca_lightning.tools.suite_mcp_server"]
    assert main([*args, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| PythonBackend | MCP " in table and "| 6 | 100.0% | 100.0% | 100.0% |" in table
    assert json.loads(out.read_text())["exact"] == 1.0


def test_build_names_a_bad_class_path():
    with pytest.raises(ValueError, match=r"cannot import class_path 'nope\.Missing'"):
        build({"class_path": "nope.Missing"})
    scripted = build(
        {
            "class_path": "slca_lightning.tools.tool_backends.ScriptedBackend",
            "init_args": {"responses": {}},
        }
    )
    assert isinstance(scripted, ScriptedBackend)
