"""experiments/warm_start: the README's sweep tables are rendered from the JSON lines alone."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "experiments" / "warm_start"))

import summarize  # noqa: E402


def test_table_has_one_row_per_variant_and_blank_cells_for_missing_steps(tmp_path):
    rows = [
        {"name": "b8", "step": 100, "heldout_nll": 1.234, "exact": 10.0},
        {"name": "b8", "step": 200, "heldout_nll": 0.5, "exact": 12.0},
        {"name": "b16", "step": 200, "heldout_nll": 0.456, "exact": 19.0},
    ]
    path = tmp_path / "s.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    lines = summarize.table(str(path)).splitlines()
    assert lines[0] == "| variant | 100 | 200 |"
    assert lines[2] == "| b8 | 1.23 / 10 | 0.50 / 12 |"
    assert lines[3] == "| b16 |  | 0.46 / 19 |"
    assert summarize.table(str(path), [200]).splitlines()[3] == "| b16 | 0.46 / 19 |"


def test_committed_sweeps_render_the_readme_tables():
    readme = (ROOT / "experiments" / "warm_start" / "README.md").read_text()
    cpu = summarize.table(str(ROOT / "experiments" / "warm_start" / "copy_sweep_cpu.jsonl"))
    assert cpu.splitlines()[2] in readme
    h200 = ROOT / "experiments" / "warm_start" / "copy_sweep_h200.jsonl"
    steps = [250, 500, 750, 1000, 1250, 1500, 2000, 2500, 3000]
    body = summarize.table(str(h200), steps).splitlines()[2:]
    cells = {line.split(" | ", 1)[1] for line in body if not line.startswith("| w-")}
    assert len(cells) == 8 and all(c in readme for c in cells)
