"""Smoke test: ``benchmarks/simulator_throughput.py --quick`` runs and prints its table.

Real parts: the benchmark as a user runs it (child-process loopback servers: the
OpenAI-compatible stand-in and the suite's MCP server over streamable HTTP).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "simulator_throughput.py"


def test_simulator_throughput_quick_prints_ratios():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick"],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("Simulated calls/s: 64 calls per cell, 20 ms server latency")
    rows = [line.strip("|").split("|") for line in lines if line.startswith(("| openai", "| mcp"))]
    cells = [[c.strip() for c in row] for row in rows]
    assert [(c[0], c[1]) for c in cells] == [
        (path, flight) for path in ("openai", "mcp-http") for flight in ("1", "8", "64")
    ]
    for path, flight, cold, warm, cached_ratio, speedup in cells:
        assert float(warm) > float(cold) > 0 and cached_ratio.endswith("×")
        if flight == "1":
            # 20 ms per call, one at a time: at most 50 calls/s
            assert float(cold) < 55 and speedup == "1.0×"
        else:
            assert float(speedup.rstrip("×")) > 1.3, f"{path}: {flight} in flight do not overlap"
