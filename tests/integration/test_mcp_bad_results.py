"""MCPBackend on real MCP servers whose results are not the tidy JSON the suite returns.

Real parts: the official ``mcp`` SDK on both sides: the suite's ``MCPServer`` started with
``--bad-tools`` (``plain_text`` answers non-JSON text, ``huge_text`` a text of any size)
over stdio (the SDK spawns it) and streamable HTTP (a child process), ``mcp.Client``
inside MCPBackend, and SchemaGuidedSimulator with its cache and output validation. One
test starts a stdio server that writes a non-JSON line on the wire before speaking MCP.
"""

from __future__ import annotations

import sys

import pytest

from slca_lightning.testing.servers import MCPHTTPServer
from slca_lightning.tools.mcp_backend import MCPBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.suite_mcp_server import huge_text
from slca_lightning.types import Task, ToolCall

BAD_SERVER = ["-m", "slca_lightning.tools.suite_mcp_server", "--bad-tools"]
HUGE = 3_000_000


@pytest.fixture(scope="module")
def stdio():
    backend = MCPBackend(command=sys.executable, args=BAD_SERVER, timeout_s=30)
    yield backend
    backend.close()


@pytest.fixture(scope="module")
def http():
    with MCPHTTPServer(bad_tools=True) as server:
        backend = MCPBackend(url=server.url, timeout_s=30)
        yield backend
        backend.close()


def task_from(backend: MCPBackend, output_schemas: dict | None = None) -> Task:
    tools = backend.tool_schemas()
    for tool in tools:
        schema = (output_schemas or {}).get(tool["function"]["name"])
        if schema is not None:
            tool["function"]["output_schema"] = schema
    return Task(task_id="bad", messages=[], tools=tools)


def test_plain_text_is_the_observation_unless_an_output_schema_is_declared(stdio):
    call = ToolCall("plain_text", {"text": "it's 5"})
    sim = SchemaGuidedSimulator(stdio, cache=False, max_retries=0)
    result = sim(call, task_from(stdio))
    assert not result.is_error and result.content == "Result: it's 5 (plain text)"
    strict = task_from(stdio, {"plain_text": {"type": "object"}})
    result = sim(call, strict)
    assert result.is_error and result.error_kind == "output_invalid"
    assert "not JSON" in result.content and sim.stats["output_invalid"] == 1
    assert sim.stats["backend_errors"] == 0 and stdio.stats["mcp_tool_errors"] == 0


@pytest.mark.parametrize("transport", ["stdio", "http"])
def test_huge_result_is_cut_to_the_cap_counted_and_cached_bounded(request, transport):
    backend = request.getfixturevalue(transport)
    task = task_from(backend)
    cap = backend.max_result_chars
    assert cap == 200_000  # the default, OpenAIBackend's max_reply_chars
    before = backend.stats["mcp_truncated"]
    sim = SchemaGuidedSimulator(backend, max_retries=0, timeout_s=60)
    call = ToolCall("huge_text", {"size": HUGE})
    result = sim(call, task)
    assert not result.is_error and cap - 10 <= len(result.content) <= cap
    keep = result.content.index("\n[truncated")
    note = f"\n[truncated: the result had {HUGE} chars; showing the first {keep}]"
    assert result.content == huge_text(HUGE)[:keep] + note
    assert backend.stats["mcp_truncated"] == before + 1
    again = sim(call, task)  # the cache holds the bounded text, not the huge one
    assert again.content == result.content and sim.stats["cache_hits"] == 1
    exact = sim(ToolCall("huge_text", {"size": cap}), task)  # at the cap: left whole
    assert exact.content == huge_text(cap)
    assert backend.stats["mcp_truncated"] == before + 1


def test_the_cap_is_configurable_and_checked(stdio):
    task = task_from(stdio)
    before = stdio.stats["mcp_truncated"]
    stdio.max_result_chars = 500
    try:
        out = stdio.execute(ToolCall("huge_text", {"size": 10_000}), None, task)
        small = stdio.execute(ToolCall("plain_text", {"text": "x"}), None, task)
    finally:
        stdio.max_result_chars = 200_000
    assert len(out) <= 500 and "[truncated: the result had 10000 chars" in out
    assert small == "Result: x (plain text)" and stdio.stats["mcp_truncated"] == before + 1
    with pytest.raises(ValueError, match="max_result_chars must be"):
        MCPBackend(command=sys.executable, max_result_chars=10)
    assert MCPBackend(command=sys.executable, max_result_chars=None).max_result_chars is None


def test_a_non_json_line_on_the_wire_is_skipped_and_the_session_survives():
    code = (
        "import sys; sys.stdout.write('<html>502 Bad Gateway</html>\\n'); sys.stdout.flush(); "
        "from slca_lightning.tools.suite_mcp_server import main; main([])"
    )
    backend = MCPBackend(command=sys.executable, args=["-c", code], timeout_s=20)
    try:
        task = task_from(backend)
        sim = SchemaGuidedSimulator(backend, cache=False, max_retries=0)
        result = sim(ToolCall("add", {"a": 1, "b": 2}), task)
        assert not result.is_error and result.content == '{"result":3}'
        assert backend.stats["mcp_sessions"] == 1 and backend.stats["mcp_transport_errors"] == 0
    finally:
        backend.close()
