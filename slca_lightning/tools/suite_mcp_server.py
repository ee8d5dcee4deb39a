"""An MCP tool server (official SDK, ``MCPServer``) exposing the built-in suite's tools (the
server ``configs/components/simulator_mcp.yaml`` starts).

Each tool runs the suite's real function (``slca_lightning.data.suite``) and advertises the
suite's exact JSON input schema plus an output schema, so clients can read both with
``tools/list`` and SGLS can validate the results. Run it:

    python -m slca_lightning.tools.suite_mcp_server                      # stdio
    python -m slca_lightning.tools.suite_mcp_server --http --port 8765   # streamable HTTP, /mcp

``--tools add,weather`` exposes a subset; ``--delay-ms 20`` makes every call sleep first
(a fixed server latency for benchmarks); ``--bad-tools`` adds the two tools of
:data:`BAD_TOOLS`, which answer the way real servers sometimes do: ``plain_text`` returns
plain, non-JSON text (no structured content, no output schema) and ``huge_text`` returns a
text of ``size`` characters.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import inspect
from typing import Any

from slca_lightning.data.suite import CITIES, UNITS, builtin_suite

__all__ = ["BAD_TOOLS", "OUTPUT_SCHEMAS", "build_mcp_server", "huge_text", "main", "plain_text"]


def _obj(**props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props)}


_INT, _NUM, _STR = {"type": "integer"}, {"type": "number"}, {"type": "string"}
#: What each built-in tool returns, as JSON Schema (advertised as ``outputSchema``).
OUTPUT_SCHEMAS: dict[str, dict[str, Any]] = {
    "add": _obj(result=_INT),
    "multiply": _obj(result=_INT),
    "power": _obj(result=_INT),
    "convert": _obj(value=_NUM, unit={"type": "string", "enum": UNITS}),
    "weather": _obj(
        city={"type": "string", "enum": CITIES},
        day={"type": "string", "enum": ["today", "tomorrow"]},
        temp_c=_INT,
        condition=_STR,
    ),
    "city_info": _obj(city=_STR, country=_STR, population_m=_NUM, sister_city=_STR),
    "reverse": _obj(text=_STR),
    "word_count": _obj(count=_INT),
    "add_days": _obj(date=_STR),
    "weekday": _obj(date=_STR, weekday=_STR),
}


def plain_text(text: str) -> str:
    """Answer with plain text, not JSON: ``Result: <text> (plain text)``."""
    return f"Result: {text} (plain text)"


def huge_text(size: int) -> str:
    """Answer with a text of exactly ``size`` characters (``0123456789`` repeated)."""
    return ("0123456789" * (size // 10 + 1))[:size]


#: The ``--bad-tools`` tools: name → function (unstructured text results).
BAD_TOOLS = {"plain_text": plain_text, "huge_text": huge_text}


def _tool(fn: Any, delay_s: float) -> Any:
    """``fn`` as an async tool (same signature) that first sleeps ``delay_s`` and reports
    a bad argument value as a ``ToolError`` (the SDK hides other exceptions' messages)."""
    from mcp.server.mcpserver.exceptions import ToolError

    @functools.wraps(fn)
    async def tool(**kwargs: Any) -> dict[str, Any]:
        if delay_s > 0:
            await asyncio.sleep(delay_s)
        try:
            return fn(**kwargs)
        except (ValueError, KeyError, TypeError) as exc:
            raise ToolError(f"{fn.__name__}: {exc}") from exc

    tool.__signature__ = inspect.signature(fn)  # type: ignore[attr-defined]
    return tool


def build_mcp_server(
    tools: list[str] | None = None, delay_ms: float = 0.0, bad_tools: bool = False
) -> Any:
    """An ``MCPServer`` serving ``tools`` (default: all ten) of the built-in suite, plus
    :data:`BAD_TOOLS` when ``bad_tools``."""
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.tools import Tool

    suite = builtin_suite()
    names = tools or suite.names
    unknown = sorted(set(names) - set(suite.names))
    if unknown:
        raise ValueError(f"unknown suite tools {unknown}; known: {', '.join(suite.names)}")
    registered = []
    for name in names:
        function = suite.schema(name)["function"]
        fn = _tool(suite.functions[name], delay_ms / 1000.0)
        tool = Tool.from_function(
            fn, name=name, description=function["description"], structured_output=True
        )
        # The suite's schema (enums, patterns, descriptions) is what clients see; the
        # function still checks its own arguments (a bad value -> an isError result).
        tool.parameters = function["parameters"]
        tool.fn_metadata.output_schema = OUTPUT_SCHEMAS[name]
        tool.fn_metadata.output_model, tool.fn_metadata.wrap_output = dict, False  # as is
        registered.append(tool)
    for name, fn in BAD_TOOLS.items() if bad_tools else ():
        text_tool = _tool(fn, delay_ms / 1000.0)
        registered.append(Tool.from_function(text_tool, name=name, structured_output=False))
    return MCPServer("slca-builtin-suite", tools=registered, log_level="WARNING")


def main(argv: list[str] | None = None) -> None:
    """Serve the suite over stdio (default) or streamable HTTP (``--http``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--http", action="store_true", help="streamable HTTP instead of stdio")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    parser.add_argument("--tools", default="", help="comma-separated subset of tool names")
    parser.add_argument("--delay-ms", type=float, default=0.0, help="sleep before each call")
    parser.add_argument("--bad-tools", action="store_true", help="add plain_text, huge_text")
    ns = parser.parse_args(argv)
    server = build_mcp_server([t for t in ns.tools.split(",") if t], ns.delay_ms, ns.bad_tools)
    if ns.http:
        server.run("streamable-http", host=ns.host, port=ns.port)
    else:
        server.run("stdio")


if __name__ == "__main__":
    main()
