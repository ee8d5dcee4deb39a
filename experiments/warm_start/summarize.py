"""Markdown tables of ``copy_sweep.py`` results (one row per variant, one column per step).

    python experiments/warm_start/summarize.py experiments/warm_start/copy_sweep_h200.jsonl

Each cell is ``held-out demo NLL / exact episodes of 64`` (greedy, the 10 abstentions
included), read from the JSON lines; nothing is typed in.
"""

from __future__ import annotations

import json
import sys


def table(path: str, steps: list[int] | None = None) -> str:
    with open(path) as fh:
        rows = [json.loads(line) for line in fh if line.strip()]
    runs: dict[str, dict[int, dict]] = {}
    for r in rows:
        runs.setdefault(r["name"], {})[r["step"]] = r
    steps = steps or sorted({s for run in runs.values() for s in run})
    out = ["| variant | " + " | ".join(str(s) for s in steps) + " |"]
    out.append("|---" * (len(steps) + 1) + "|")
    for name, run in runs.items():
        cells = [
            f"{run[s]['heldout_nll']:.2f} / {int(run[s]['exact'])}" if s in run else ""
            for s in steps
        ]
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(out)


if __name__ == "__main__":
    wanted = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 else None
    print(table(sys.argv[1], wanted))
