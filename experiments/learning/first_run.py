"""A new user's first quickstart, timed: a fresh clone of this commit, an empty cache.

::

    python experiments/learning/first_run.py        # writes results/first_run.json

Clones ``HEAD`` of this repository into a temporary folder, points ``SLCA_CACHE`` and
``HF_HOME`` at empty folders, and runs ``slca fit --config configs/quickstart.yaml`` from the
clone (its own package on ``PYTHONPATH``, no thread count set, as a user would). It records
the wall time, the peak RSS of the run, the load average at the start, the torch threads
the fit chose (its ``provenance.json``), whether the shipped warm start was loaded without
training, and the held-out strict tool accuracy at each evaluation from the run's
``metrics.csv``. The README's timing is this file's (a test checks it).
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
OUT = HERE / "results" / "first_run.json"
LOADED = "nothing trained"  # the last words of the shipped warm start's one line
TRAINED = "warm_start suite"  # how the warm-start trainer's log lines begin


def held_out(metrics: Path) -> list[float]:
    """Held-out strict tool accuracy at each evaluation of a run's ``metrics.csv``."""
    rows = csv.DictReader(metrics.open())
    key = "eval/in_domain/tool_accuracy"
    return [float(r[key]) for r in rows if r.get(key)]


def first_run(workdir: Path) -> dict:
    """Clone, run the quickstart with an empty cache, and measure it."""
    clone = workdir / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout.strip()
    env = {
        **os.environ,
        "SLCA_CACHE": str(workdir / "cache"),
        "HF_HOME": str(workdir / "hf"),
        "PYTHONPATH": str(clone),
    }
    for key in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        env.pop(key, None)  # torch's default, as a user's shell has it
    argv = [sys.executable, "-m", "slca_lightning.cli.commands", "fit"]
    argv += ["--config", "configs/quickstart.yaml"]
    load = os.getloadavg()[0]
    log = workdir / "fit.log"
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(argv, cwd=clone, env=env, stdout=fh, stderr=subprocess.STDOUT)
    wall = time.perf_counter() - t0
    text = log.read_text(errors="replace")
    if proc.returncode:
        raise RuntimeError(f"slca fit failed (exit {proc.returncode}):\n{text[-3000:]}")
    peak_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    (metrics,) = sorted(clone.glob("runs/quickstart/logs/version_*/metrics.csv"))[-1:]
    curve = held_out(metrics)
    # the threads the fit chose (``threads``: the cores the load average leaves free)
    threads = json.loads((metrics.parent / "provenance.json").read_text())["threads"]["torch"]
    import torch

    return {
        "command": "slca fit --config configs/quickstart.yaml",
        "commit": commit,
        "wall_s": round(wall, 1),
        "peak_rss_gb": round(peak_kb / 2**20, 2),
        "load_average_at_start": round(load, 2),
        "torch_threads": int(threads),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "shipped_warm_start_loaded": LOADED in text,
        "warm_start_trained": TRAINED in text,
        "held_out_tool_accuracy": curve,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="slca-first-run-") as tmp:
        record = first_run(Path(tmp))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
