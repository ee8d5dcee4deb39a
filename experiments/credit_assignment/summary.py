"""Read the study's runs: each run's ``metrics.csv`` → its summary figures, grouped by method
and judge noise, with means ± std over seeds and paired (same seed) differences.

:mod:`experiments.credit_assignment.report` turns these into ``REPORT.md`` and the plots.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
import statistics
from collections import defaultdict
from dataclasses import dataclass
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


#: The cache folder a shipped warm start is written to: ``<name>-shipped-<sha256[:16]>`` of
#: its weights file (``slca_lightning.models.shipped.shipped_folder``).
_SHIPPED_FOLDER = re.compile(r"-shipped-([0-9a-f]{16})$")


def warm_start_id(provenance: dict) -> str | None:
    """Which weights a run began from (10 hex digits), comparable across machines.

    A shipped warm start is named by the sha256 of its shipped weights file (the prefix in
    its cache folder's name): the folder's own digest (``model_sha256``) also covers the
    marker file that records where the weights were read from, which differs by checkout,
    so identical weights read on two machines give two digests. Any other model folder is
    named by that digest; a random model (no folder) by None.
    """
    folder = provenance.get("model_folder")
    match = _SHIPPED_FOLDER.search(Path(folder).name) if folder else None
    if match:
        return match.group(1)[:10]
    sha = provenance.get("model_sha256")
    return sha[:10] if sha else None


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
            run["warm_start"] = warm_start_id(json.loads(prov.read_text()))
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
    # the spread each channel's reward has across a step's rollouts, mean over steps: the
    # dose the summary noise actually delivers (the noisy score is clipped to [0, 1])
    for key, name in (("reward/summary_std", "spread/summary"), ("reward/tool_std", "spread/tool")):
        values = [v for _, v in series(run, key)]
        out[name] = statistics.fmean(values) if values else math.nan
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


#: Two-sided 95 % (upper 97.5 %) quantiles of Student's t for 1-30 degrees of freedom.
_T975 = (
    12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
    2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
    2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042,
)  # fmt: skip


def t975(df: int) -> float:
    """The 97.5 % quantile of Student's t with ``df`` degrees of freedom: the table to 30,
    then the Cornish-Fisher expansion around the normal's 1.95996 (within 1e-4 there)."""
    if df < 1:
        return math.nan
    if df <= len(_T975):
        return _T975[df - 1]
    z = 1.959964
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


def ci95(values: list[float]) -> tuple[float, float] | None:
    """The 95 % t-interval of the mean of ``values`` (None with fewer than two)."""
    mean, std, n = interval_stats(values)
    if n < 2:
        return None
    half = t975(n - 1) * std / math.sqrt(n)
    return mean - half, mean + half


def min_detectable(values: list[float]) -> float:
    """The smallest true mean difference this many paired runs with this spread detect with
    80 % power at two-sided 5 % (normal approximation: 2.8 standard errors); NaN below two."""
    _, std, n = interval_stats(values)
    return 2.8 * std / math.sqrt(n) if n >= 2 else math.nan


# ----------------------------------------------------------------------------- dose-response
@dataclass(frozen=True)
class Estimate:
    """A point estimate with its 95 % t-interval (``lo``/``hi`` NaN when there is none) and
    the number of values behind it."""

    value: float
    lo: float
    hi: float
    n: int

    @property
    def has_interval(self) -> bool:
        return not (math.isnan(self.lo) or math.isnan(self.hi))

    @property
    def above_zero(self) -> bool:
        return self.has_interval and self.lo > 0

    @property
    def below_zero(self) -> bool:
        return self.has_interval and self.hi < 0

    def text(self, digits: int = 3) -> str:
        """``+0.012 [-0.003, +0.027]`` (the interval left out when there is none)."""
        if math.isnan(self.value):
            return "–"
        out = f"{self.value:+.{digits}f}"
        return out + (
            f" [{self.lo:+.{digits}f}, {self.hi:+.{digits}f}]" if self.has_interval else ""
        )


NO_ESTIMATE = Estimate(math.nan, math.nan, math.nan, 0)


def mean_estimate(values: list[float]) -> Estimate:
    """The mean of the non-NaN ``values`` with its 95 % t-interval (none below two values)."""
    mean, _, n = interval_stats(values)
    ci = ci95(values)
    return Estimate(mean, *(ci or (math.nan, math.nan)), n)


def slope_estimate(xs: list[float], ys: list[float]) -> Estimate:
    """The least-squares slope of ``ys`` on ``xs`` (pairs with a NaN left out) with its 95 %
    t-interval: standard error ``sqrt(SSR / (n − 2) / Sxx)``, ``n − 2`` degrees of freedom.
    No slope below two distinct ``x``; no interval below three points."""
    pts = [(x, y) for x, y in zip(xs, ys) if not (math.isnan(x) or math.isnan(y))]
    n = len(pts)
    if n < 2 or len({x for x, _ in pts}) < 2:
        return Estimate(math.nan, math.nan, math.nan, n)
    mx = statistics.fmean(x for x, _ in pts)
    my = statistics.fmean(y for _, y in pts)
    sxx = sum((x - mx) ** 2 for x, _ in pts)
    slope = sum((x - mx) * (y - my) for x, y in pts) / sxx
    if n < 3:
        return Estimate(slope, math.nan, math.nan, n)
    ssr = sum((y - my - slope * (x - mx)) ** 2 for x, y in pts)
    half = t975(n - 2) * math.sqrt(ssr / (n - 2) / sxx)
    return Estimate(slope, slope - half, slope + half, n)
