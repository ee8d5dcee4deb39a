"""Smoke test: ``benchmarks/logprob_memory.py --small`` runs and prints its Markdown table."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[3] / "benchmarks" / "logprob_memory.py"


def test_logprob_memory_small_prints_table():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--small"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert any(line.startswith("Token log-prob peak memory: B=2, T=128, V=4096") for line in lines)
    header = [line for line in lines if line.startswith("| logits dtype |")]
    assert len(header) == 1 and "naive / chunked" in header[0]
    rows = [line for line in lines if line.startswith("| bf16 |")]
    assert [row.split("|")[2].strip() for row in rows] == ["fwd", "fwd+bwd"]
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 9
        assert float(cells[2]) >= 0 and float(cells[3]) >= 0  # Δ peak MB values parse
        assert cells[4].endswith("×")
