"""Smoke test of ``benchmarks/bench_async.py`` on the built-in tiny model (seconds): two real
``slca fit`` child processes (quickstart config, max_staleness 0 and 1 with tis_cap), one step
each after a warm-up step; it prints its table and ratio and writes its JSON. Its figures mean
nothing at this size; what is checked is that every figure is produced and consistent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_async  # noqa: E402


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_fit_args_are_the_quickstarts_with_staleness_and_the_cap_only_when_async():
    shape = bench_async.AsyncShape(model="tiny", steps=2, prompts=1)
    sync = bench_async.fit_args(shape, 0, "/tmp/x")
    stale = bench_async.fit_args(shape, 1, "/tmp/x")
    assert sync[:2] == ["--config", str(bench_async.QUICKSTART)]
    assert "--trainer.max_steps=3" in sync and "--trainer.callbacks=[]" in sync
    assert "--data.max_staleness=0" in sync and not any("tis_cap" in a for a in sync)
    assert "--data.max_staleness=1" in stale and "--model.tis_cap=2.0" in stale
    assert "--data.prompts_per_step=1" in sync and not any("group_size" in a for a in sync)


@pytest.mark.timeout(120)
def test_smoke_run_prints_the_table_and_writes_its_json(tmp_path):
    out = tmp_path / "async.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_async.py"), "--model", "tiny", "--prompts", "1",
         "--group", "2", "--turns", "1", "--new-tokens", "8", "--steps", "1", "--rounds", "1",
         "--out", str(out)],
        capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "Machine:" in text and "load average before" in text and "threads 1" in text
    rows = {cells(x)[0]: cells(x) for x in text.splitlines() if x.startswith("| sync") or x.startswith("| async")}  # fmt: skip
    assert sorted(rows) == ["async (max_staleness 1, tis_cap 2.0)", "sync (max_staleness 0)"]
    for row in rows.values():
        assert len(row) == 11 and float(row[1]) > 0 and float(row[2]) > 0  # tokens/s, steps/s
    assert rows["async (max_staleness 1, tis_cap 2.0)"][6].endswith("(time/rollout_wait)")
    assert "async ÷ sync: tokens/s **" in text and "goal tokens/s ≥ 1.4×" in text

    result = json.loads(out.read_text())
    s = result["summary"]
    assert s["tokens_per_s_ratio"] > 0 and s["steps_per_s_ratio"] > 0
    assert s["systems"]["async"]["time/rollout_wait"] is not None
    assert s["systems"]["sync"]["time/rollout_wait"] is None  # sync waits for the whole rollout
    assert (
        s["systems"]["async"]["staleness_max"] == 1 and s["systems"]["sync"]["staleness_max"] == 0
    )
    assert result["setting"]["prompts"] == 1 and result["setting"]["turns"] == 1
    assert len(result["load_before"]) == 3 and result["markdown"] in text
