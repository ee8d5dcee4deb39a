"""Smoke test of ``benchmarks/bench_token_budget.py`` on the built-in tiny model (seconds):
three child processes (rows split, budget at the same memory, smaller budget), one update
each after a warm-up; it prints its table and goal line and writes its JSON. Plus the batch
and split helpers it shares with ``gpu_scale.py``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[3] / "benchmarks"
sys.path.insert(0, str(BENCH))

import bench_token_budget as tb  # noqa: E402


def cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_lengths_are_long_tailed_within_bounds_and_the_batch_is_right_padded_groups():
    lengths = tb.mixed_lengths(32, 200, 2000, 1.2)
    assert int(lengths[0]) == 2000 and int(lengths.min()) >= 200 and int(lengths.max()) == 2000
    assert float(lengths.float().median()) < 700  # most rows short, a few long
    short = tb.mixed_lengths(6, 10, 40, 1.2, seed=3)
    batch, adv = tb.mixed_batch(2, 3, 4, short, vocab=50, pad_id=0)
    assert batch.input_ids.shape == (6, 40) and batch.group_ids.tolist() == [0, 0, 0, 1, 1, 1]
    assert batch.attention_mask.sum(1).tolist() == short.tolist()
    assert (batch.input_ids[:3, :4] == batch.input_ids[0, :4]).all()  # a group's shared prompt
    assert not batch.assistant_mask[:, :4].any()
    assert (batch.assistant_mask.sum(1) == short - 4).all()
    assert (adv[~batch.assistant_mask] == 0).all()


def test_split_settings_match_the_rows_splits_padded_tokens_or_a_fraction_of_them():
    assert tb.split_settings("rows", 16, 2000, 2, 0.5) == {
        "micro_batch_size": 2, "micro_batch_tokens": None,
    }  # fmt: skip
    assert tb.split_settings("budget", 16, 2000, 2, 0.5) == {
        "micro_batch_size": 16, "micro_batch_tokens": 4000,
    }  # fmt: skip
    assert tb.split_settings("budget_small", 16, 2000, 2, 0.5)["micro_batch_tokens"] == 2000


@pytest.mark.timeout(120)
def test_smoke_run_prints_the_table_and_writes_its_json(tmp_path):
    out = tmp_path / "budget.json"
    proc = subprocess.run(
        [sys.executable, str(BENCH / "bench_token_budget.py"), "--model", "tiny", "--prompts",
         "1", "--group", "4", "--prompt-len", "8", "--min-len", "16", "--max-len", "160",
         "--micro-batch", "2", "--rounds", "1", "--out", str(out)],
        capture_output=True, text=True, timeout=110, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = proc.stdout
    assert "Machine:" in text and "load average before" in text and "Δ peak" in text
    rows = {
        cells(x)[0]: cells(x) for x in text.splitlines() if x.startswith(("| rows", "| budget"))
    }
    assert list(rows) == ["rows", "budget (same memory)", "budget (less memory)"]
    for row in rows.values():
        assert len(row) == 11 and float(row[4]) > 0 and float(row[6]) >= 0  # tokens/s, Δ peak
        assert float(row[10]) < 1e-3  # same gradient as the rows split
    assert rows["rows"][1] == "micro_batch_size=2" and rows["rows"][3] == "640"  # 4 × 160
    assert rows["budget (same memory)"][1] == "micro_batch_tokens=320"
    assert int(rows["budget (same memory)"][3]) < 640  # each micro-batch cut to its longest row
    assert "Goal: ≥ 1.3× tokens/s at the same memory" in text and "Overall:" in text

    result = json.loads(out.read_text())
    s = result["summary"]["splits"]
    assert s["rows"]["speed_ratio"] == 1.0 and s["rows"]["memory_ratio"] == 1.0
    assert s["budget"]["speed_ratio"] > 0 and s["budget_small"]["memory_ratio"] >= 0
    assert isinstance(result["summary"]["goal_met"], bool) and result["markdown"] in text
