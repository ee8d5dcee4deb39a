"""Read the study's runs: each run's ``metrics.csv`` → its summary figures, grouped by method
and judge noise, with means ± std over seeds and paired (same seed) differences.

:mod:`experiments.credit_assignment.report` turns these into ``REPORT.md`` and the plots.
"""

from __future__ import annotations

import csv
import json
import math
import os
import statistics
from collections import defaultdict
from pathlib import Path

EVAL = "eval/in_domain/"
#: Held-out metrics of the final evaluation, in table order.
FINAL = (
    ("process", "process"),
    ("tool_accuracy", "tool acc."),
    ("success@0.9", "Success@0.9"),
    ("name_f1", "Name F1"),
    ("arg_match", "ArgMatch"),
    ("tool_calls_per_episode", "calls/ep."),
    ("tool_call_validity", "valid calls"),
)
ORDER = ("grpo", "slca", "toolpo", "rltr", "mtgrpo")
LABEL = {
    "grpo": "GRPO",
    "slca": "SLCA-GRPO",
    "toolpo": "ToolPO",
    "rltr": "RLTR",
    "mtgrpo": "MT-GRPO",
}


# ----------------------------------------------------------------------------- loading
def parse_float(text: str) -> float | None:
    try:
        value = float(text)
    except (TypeError, ValueError):
        return None
    return value if math.isfinite(value) else None


def read_metrics(path: str | os.PathLike) -> tuple[dict[int, dict], dict[int, dict]]:
    """``metrics.csv`` → (training metrics by step, held-out evaluations by step)."""
    train: dict[int, dict] = defaultdict(dict)
    evals: dict[int, dict] = defaultdict(dict)
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(float(row["step"]))
            for key, text in row.items():
                value = parse_float(text)
                if key == "step" or value is None:
                    continue
                if key.startswith(EVAL):
                    evals[step][key[len(EVAL) :]] = value
                else:
                    train[step][key] = value
    return dict(train), dict(evals)


def load_runs(folders: list[str]) -> list[dict]:
    """Each run's ``run.json`` plus its metrics (``train``, ``eval``); missing runs skipped."""
    runs = []
    for folder in folders:
        meta_path = Path(folder) / "run.json"
        if not meta_path.is_file():
            continue
        run = json.loads(meta_path.read_text())
        prov = Path(folder) / "logs" / "version_0" / "provenance.json"
        if prov.is_file():  # which warm-start weights the run began from
            sha = json.loads(prov.read_text()).get("model_sha256")  # None: a random model
            run["warm_start"] = sha[:10] if sha else None
        csv_path = Path(folder) / "logs" / "version_0" / "metrics.csv"
        run["train"], run["eval"] = read_metrics(csv_path) if csv_path.is_file() else ({}, {})
        runs.append(run)
    return runs


# ----------------------------------------------------------------------------- per run
def series(run: dict, key: str) -> list[tuple[int, float]]:
    return sorted((s, m[key]) for s, m in run["train"].items() if key in m)


def third_means(series: list[tuple[int, float]]) -> tuple[float, float]:
    """Mean of the first and of the last third of a per-step series (NaN if too short)."""
    values = [v for _, v in series]
    k = len(values) // 3
    if k == 0:
        return math.nan, math.nan
    return statistics.fmean(values[:k]), statistics.fmean(values[-k:])


def run_summary(run: dict, target: float, target_metric: str = "process") -> dict[str, float]:
    """The per-run figures the report aggregates."""
    evals = sorted(run["eval"].items())
    out: dict[str, float] = {}
    if evals:
        first, last = evals[0][1], evals[-1][1]
        for key, _ in FINAL:
            out[f"final/{key}"] = last.get(key, math.nan)
        out["start/tool_calls_per_episode"] = first.get("tool_calls_per_episode", math.nan)
        out["start/tool_accuracy"] = first.get("tool_accuracy", math.nan)
        out["gain/tool_accuracy"] = last.get("tool_accuracy", math.nan) - out["start/tool_accuracy"]
        out["gain/success@0.9"] = last.get("success@0.9", math.nan) - first.get(
            "success@0.9", math.nan
        )
        curve = [(s, m.get(target_metric, math.nan)) for s, m in evals]
        hit = next((s for s, a in curve if a >= target), None)
        out["steps_to_target"] = math.nan if hit is None else float(hit)
        out["mean_target_metric"] = statistics.fmean(a for _, a in curve)
        out["mean_process"] = statistics.fmean(m.get("process", math.nan) for _, m in evals)
        out["mean_validity"] = statistics.fmean(
            m.get("tool_call_validity", math.nan) for _, m in evals
        )
        out["final/process"] = last.get("process", math.nan)
        out["start/process"] = first.get("process", math.nan)
    # contamination (a correlation) is a mean over steps; leakage (a ratio over the step's
    # tool-credit norm, which can be ~0) the median, so one near-empty step cannot swamp it
    for key, name, centre in (
        ("adv/contamination", "contamination", statistics.fmean),
        ("adv/summary_leakage", "leakage", statistics.median),
    ):
        values = [v for _, v in series(run, key)]
        out[name] = centre(values) if values else math.nan
    for key, name in (
        ("rollout/tool_calls_per_episode", "train_calls"),
        ("reward/tool", "train_tool"),
        ("reward/summary", "train_summary"),
        ("reward/total", "train_total"),
    ):
        early, late = third_means(series(run, key))
        out[f"{name}/early"], out[f"{name}/late"] = early, late
    out["gold_calls"] = run.get("gold_calls_per_episode", math.nan)
    return out


# ----------------------------------------------------------------------------- aggregates
def interval_stats(values: list[float]) -> tuple[float, float, int]:
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return math.nan, math.nan, 0
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0, len(vals)


def pm(values: list[float], digits: int = 3) -> str:
    """``mean ± std`` over the non-NaN values ("–" when none)."""
    mean, std, n = interval_stats(values)
    if n == 0:
        return "–"
    return f"{mean:.{digits}f} ± {std:.{digits}f}"


def grouped(
    runs: list[dict], target: float, target_metric: str = "process"
) -> dict[tuple[float, str], list[dict]]:
    """``(noise, method)`` → per-seed summaries (sorted by seed)."""
    out: dict[tuple[float, str], list[dict]] = defaultdict(list)
    for run in sorted(runs, key=lambda r: r["seed"]):
        if run.get("error"):
            continue
        summary = run_summary(run, target, target_metric)
        row = {"seed": run["seed"], "warm_start": run.get("warm_start"), **summary}
        out[(run["noise"], run["method"])].append(row)
    return dict(out)


def paired(a: list[dict], b: list[dict], key: str) -> list[float]:
    """Per-seed ``a[key] − b[key]`` over the seeds both have, from the same warm start (a
    pair whose runs began from different weights, where both record theirs, is left out)."""
    bs = {
        r["seed"]: (r[key], r.get("warm_start")) for r in b if key in r and not math.isnan(r[key])
    }
    out = []
    for r in a:
        if key not in r or math.isnan(r[key]) or r["seed"] not in bs:
            continue
        value, start = bs[r["seed"]]
        if start and r.get("warm_start") and start != r["warm_start"]:
            continue
        out.append(r[key] - value)
    return out


#: Two-sided 97.5 % quantiles of Student's t for 1-10 degrees of freedom (then ~normal).
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228)


def ci95(values: list[float]) -> tuple[float, float] | None:
    """The 95 % t-interval of the mean of ``values`` (None with fewer than two)."""
    mean, std, n = interval_stats(values)
    if n < 2:
        return None
    half = (_T975[n - 2] if n - 1 <= len(_T975) else 1.96) * std / math.sqrt(n)
    return mean - half, mean + half


def min_detectable(values: list[float]) -> float:
    """The smallest true mean difference this many paired runs with this spread detect with
    80 % power at two-sided 5 % (normal approximation: 2.8 standard errors); NaN below two."""
    _, std, n = interval_stats(values)
    return 2.8 * std / math.sqrt(n) if n >= 2 else math.nan
