"""The fidelity command: the same gold calls through a simulator and a real backend.

Real parts: the built-in synthetic tasks' gold calls, the built-in Python tools, the
suite's MCP server over stdio (official SDK), the tiny model as LLM simulator in-process
(EngineChatBackend + LLMBackend, the command's default) and real jsonschema. Nothing is
mocked; ScriptedBackend is a deliberately wrong "simulator" so agreement must drop.
"""

from __future__ import annotations

import json
import sys

import pytest

from slca_lightning.tools.backends import PythonBackend, ScriptedBackend
from slca_lightning.tools.fidelity import (
    _schemas_for,
    build,
    compare,
    gold_calls,
    main,
    run_fidelity,
)

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
    assert perfect["n"] == 12 and perfect["real_errors"] == 0
    assert perfect["exact"] == perfect["schema_valid"] == perfect["value_agreement"] == 1.0
    wrong = run_fidelity(ScriptedBackend({}, default={"result": 0}), real, calls, schemas)
    assert wrong["json_object"] == 1.0 and wrong["exact"] < 0.5
    expected = sum(c.name in ("add", "multiply", "power") for c, _ in calls) / 12
    assert wrong["same_keys"] == pytest.approx(expected)  # only math tools return "result"


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
    # a random tiny model does not know the tools: it cannot agree with them exactly
    assert summary["exact"] == 0.0


def test_command_against_the_mcp_server(tmp_path, capsys):
    out = tmp_path / "fidelity.json"
    args = [
        "--n",
        "6",
        "--real",
        "mcp",
        "--simulator",
        "slca_lightning.tools.backends.PythonBackend",
    ]
    args += ["--mcp-command", f"{sys.executable} -m slca_lightning.testing.mcp_server"]
    assert main([*args, "--json", str(out)]) == 0
    table = capsys.readouterr().out
    assert "| PythonBackend | MCP " in table and "| 6 | 100.0% | 100.0% | 100.0% |" in table
    assert json.loads(out.read_text())["exact"] == 1.0


def test_build_names_a_bad_class_path():
    with pytest.raises(ValueError, match=r"cannot import class_path 'nope\.Missing'"):
        build({"class_path": "nope.Missing"})
    scripted = build(
        {
            "class_path": "slca_lightning.tools.backends.ScriptedBackend",
            "init_args": {"responses": {}},
        }
    )
    assert isinstance(scripted, ScriptedBackend)
