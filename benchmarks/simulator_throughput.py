"""Simulated tool calls per second with 1, 8 and 64 calls in flight, cached vs uncached.

Two paths, each against a loopback server in a child process with a fixed latency
(``--latency-ms``, default 20 ms):

- ``openai``: SchemaGuidedSimulator -> LLMBackend -> OpenAIBackend -> the OpenAI-compatible
  stand-in (``slca_lightning.testing.servers``), which answers a fixed tool response;
- ``mcp``: SchemaGuidedSimulator -> MCPBackend -> the built-in suite's MCP server over
  streamable HTTP (``slca_lightning.tools.suite_mcp_server --http``).

"In flight" is the simulator's ``max_workers`` (``simulate_batch`` threads; the
OpenAIBackend allows as many open requests). Uncached: distinct calls on an empty memory
cache (every call misses and goes to the server). Cached: the same calls again (every call
hits; no backend call).
Printed as a Markdown table with the ratios cached / uncached and k-in-flight / 1-in-flight.

    python benchmarks/simulator_throughput.py           # 256 calls per cell
    python benchmarks/simulator_throughput.py --quick   # 64 calls per cell (smoke test)
"""

from __future__ import annotations

import argparse
import time

from slca_lightning.chat_backends.openai import OpenAIBackend
from slca_lightning.data.suite import builtin_suite
from slca_lightning.testing.servers import ChatStandInProcess, MCPHTTPServer
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.mcp_backend import MCPBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import LLMBackend
from slca_lightning.types import Task, ToolCall

IN_FLIGHT = (1, 8, 64)
TASK = Task(task_id="bench", messages=[], tools=builtin_suite().tools_of(["math"]))


def _calls(n: int, offset: int) -> list[tuple[ToolCall, Task]]:
    return [(ToolCall("add", {"a": offset + i, "b": 1}), TASK) for i in range(n)]


def _rate(sim: SchemaGuidedSimulator, batch: list[tuple[ToolCall, Task]]) -> float:
    start = time.perf_counter()
    results = sim.simulate_batch(batch)
    elapsed = time.perf_counter() - start
    errors = [r for r in results if r.is_error]
    if errors:
        raise RuntimeError(f"{len(errors)} of {len(batch)} calls failed: {errors[0].content}")
    return len(batch) / elapsed


def measure(backend: ToolBackend, n: int, in_flight: int, offset: int) -> tuple[float, float]:
    """(uncached, cached) calls/s for ``n`` distinct calls with ``in_flight`` workers: the
    first pass misses the (empty) memory cache on every call, the second hits on every call."""
    batch = _calls(n, offset)
    sim = SchemaGuidedSimulator(backend, cache=True, max_workers=in_flight, timeout_s=30)
    cold = _rate(sim, batch)
    warm = _rate(sim, batch)
    if sim.stats["cache_hits"] != n or sim.stats["backend_calls"] != n:
        raise RuntimeError(f"expected {n} misses then {n} hits, got {sim.stats}")
    return cold, warm


def run(n: int, latency_ms: float) -> list[tuple[str, int, float, float]]:
    """Rows ``(path, in_flight, uncached/s, cached/s)`` for both paths."""
    rows = []
    with ChatStandInProcess(delay_ms=latency_ms, reply="tool") as server:
        chat = OpenAIBackend(server.url, "stand-in", timeout_s=30, max_in_flight=max(IN_FLIGHT))
        backend = LLMBackend(chat, temperature=0.0, max_tokens=32)
        measure(backend, 4, 1, offset=10**6)  # connect once before timing
        for k, flight in enumerate(IN_FLIGHT):
            rows.append(("openai", flight, *measure(backend, n, flight, offset=k * n)))
        chat.close()
    with MCPHTTPServer(tools=["add"], delay_ms=latency_ms) as server:
        backend = MCPBackend(url=server.url, timeout_s=30)
        try:
            measure(backend, 4, 1, offset=10**6)
            for k, flight in enumerate(IN_FLIGHT):
                rows.append(("mcp-http", flight, *measure(backend, n, flight, offset=k * n)))
        finally:
            backend.close()
    return rows


def table(rows: list[tuple[str, int, float, float]], n: int, latency_ms: float) -> str:
    """The Markdown table of :func:`run`'s rows."""
    base = {path: cold for path, flight, cold, _ in rows if flight == 1}
    lines = [
        f"Simulated calls/s: {n} calls per cell, {latency_ms:g} ms server latency, loopback",
        "",
        "| path | in flight | uncached calls/s | cached calls/s | cached / uncached "
        "| uncached vs 1 in flight |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for path, flight, cold, warm in rows:
        lines.append(
            f"| {path} | {flight} | {cold:.1f} | {warm:.1f} | {warm / cold:.1f}× "
            f"| {cold / base[path]:.1f}× |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="64 calls per cell")
    parser.add_argument("--calls", type=int, default=None, help="calls per cell (default 256)")
    parser.add_argument("--latency-ms", type=float, default=20.0)
    ns = parser.parse_args()
    n = ns.calls or (64 if ns.quick else 256)
    print(table(run(n, ns.latency_ms), n, ns.latency_ms))


if __name__ == "__main__":
    main()
