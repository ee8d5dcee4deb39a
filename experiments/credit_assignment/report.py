"""Turn the study's runs into ``REPORT.md`` and the PNG learning curves.

Every figure comes from the runs' own ``metrics.csv`` (what ``slca fit`` logged): held-out
evaluations (``eval/in_domain/*``, greedy, the same tasks for every run) and the per-step
training metrics (``reward/*``, ``adv/*``, ``rollout/*``). Means ± std are over seeds; the
SLCA − GRPO differences are paired by seed (the same seed gives both methods the same task
order, sampling seeds and first batch).
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from collections import defaultdict
from pathlib import Path

from experiments.credit_assignment.checks import (
    constant_channels,
    noise_invariance,
    warm_start_table,
)
from experiments.credit_assignment.summary import (
    FINAL,
    LABEL,
    ORDER,
    ci95,
    grouped,
    interval_stats,
    min_detectable,
    paired,
    pm,
)


def _steps_cell(rows: list[dict], max_step: int) -> str:
    """Mean steps to the target over the runs that reached it after step 0; a run whose
    warm start was already there shows ``start`` and is left out of the mean."""
    hits = [r.get("steps_to_target", math.nan) for r in rows]
    reached = [h for h in hits if not math.isnan(h) and h > 0]
    per_seed = ", ".join("–" if math.isnan(h) else "start" if h == 0 else f"{h:.0f}" for h in hits)
    if not reached:
        return f"not reached in {max_step} ({per_seed})"
    return f"{statistics.fmean(reached):.1f} ({len(reached)}/{len(hits)}: {per_seed})"


# ----------------------------------------------------------------------------- the report
def method_table(
    groups, noise: float, methods: list[str], max_step: int, target: float, metric: str
):
    head = ["method", f"steps to held-out {metric} ≥ {target:g}", "mean held-out process"]
    head += [name for _, name in FINAL] + ["Δ tool acc. (from own start)", "Δ Success@0.9"]
    head += ["contamination", "summary leakage"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m in methods:
        rows = groups.get((noise, m), [])
        if not rows:
            continue
        cells = [LABEL[m], _steps_cell(rows, max_step), pm([r["mean_process"] for r in rows])]
        cells += [pm([r[f"final/{k}"] for r in rows]) for k, _ in FINAL]
        cells += [pm([r.get(f"gain/{k}", math.nan) for r in rows]) for k in GAINS]
        cells += [pm([r["contamination"] for r in rows]), pm([r["leakage"] for r in rows])]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def calls_table(groups, noise: float, methods: list[str]):
    head = [
        "method",
        "gold calls/ep. (held-out)",
        "held-out calls/ep.: start → end",
        "training calls/ep.: first → last third",
        "Δ training calls/ep.",
    ]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for m in methods:
        rows = groups.get((noise, m), [])
        if not rows:
            continue
        delta = [r["train_calls/late"] - r["train_calls/early"] for r in rows]
        lines.append(
            "| "
            + " | ".join(
                [
                    LABEL[m],
                    pm([r["gold_calls"] for r in rows], 2),
                    f"{pm([r['start/tool_calls_per_episode'] for r in rows], 2)} → "
                    f"{pm([r['final/tool_calls_per_episode'] for r in rows], 2)}",
                    f"{pm([r['train_calls/early'] for r in rows], 2)} → "
                    f"{pm([r['train_calls/late'] for r in rows], 2)}",
                    pm(delta, 2),
                ]
            )
            + " |"
        )
    return lines


GAINS = ("tool_accuracy", "success@0.9")


def _ci_cell(values: list[float]) -> str:
    ci = ci95(values)
    return "" if ci is None else f" [{ci[0]:+.3f}, {ci[1]:+.3f}]"


PAIRED_KEYS = (
    ("gain/tool_accuracy", "Δ tool acc. from the run's own start"),
    ("mean_process", "mean held-out process over the evaluations (convergence)"),
    ("final/process", "final held-out process"),
    ("final/tool_accuracy", "final tool acc."),
    ("final/success@0.9", "final Success@0.9"),
    ("final/name_f1", "final Name F1"),
    ("final/arg_match", "final ArgMatch"),
    ("final/tool_calls_per_episode", "final held-out calls/ep."),
    ("final/tool_call_validity", "final held-out valid calls"),
    (
        "mean_validity",
        "mean held-out valid calls over the evaluations (how fast calls become valid)",
    ),
    ("train_tool/late", "training tool reward, last third"),
)


def paired_table(groups, noises: list[float]):
    head = ["SLCA − GRPO (paired by seed): mean ± std [95 % CI]"] + [f"σ = {n:g}" for n in noises]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for key, name in PAIRED_KEYS:
        cells = [name]
        for n in noises:
            d = paired(groups.get((n, "slca"), []), groups.get((n, "grpo"), []), key)
            wins = sum(x > 0 for x in d)
            cells.append(f"{pm(d)}{_ci_cell(d)} (>0 in {wins}/{len(d)})" if d else "–")
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def reading(groups, noises: list[float]) -> list[str]:
    """Statements computed from the numbers (no claim is written by hand here)."""
    out = []

    def verdict(d: list[float]) -> str:
        mean, std, n = interval_stats(d)
        if n == 0:
            return "no paired runs"
        se = std / math.sqrt(n) if n > 1 else math.inf
        if n > 1 and abs(mean) > 2 * se:
            side = "higher" if mean > 0 else "lower"
            return f"SLCA {side} by {abs(mean):.3f} (paired mean, > 2 standard errors, n={n})"
        return (
            f"no detectable difference ({mean:+.3f} ± {std:.3f}, n={n}: within 2 standard errors)"
        )

    intervals = excluding = 0
    for n in noises:
        for m in ORDER:
            gains = [r.get("gain/tool_accuracy", math.nan) for r in groups.get((n, m), [])]
            mean, _, k = interval_stats(gains)
            ci = ci95(gains)
            if ci is None:
                continue
            learns = "rises" if ci[0] > 0 else "falls" if ci[1] < 0 else "does not move detectably"
            intervals += 1
            excluding += learns != "does not move detectably"
            out.append(
                f"- σ = {n:g}, {LABEL[m]}: held-out tool accuracy {learns} from its start "
                f"({mean:+.3f}, 95 % CI [{ci[0]:+.3f}, {ci[1]:+.3f}], n={k}; one task = 0.016)."
            )
    if intervals:
        out.append(
            f"- {excluding} of these {intervals} intervals exclude 0; with {intervals} "
            f"independent 95 % intervals and no true change, {0.05 * intervals:.1f} would on "
            "average."
        )
    gaps = {}
    for n in noises:
        s, g = groups.get((n, "slca"), []), groups.get((n, "grpo"), [])
        for key, name in (("gain/tool_accuracy", "Δ tool accuracy"),):
            d = paired(s, g, key)
            if len(d) >= 2 and len(set(d)) == 1:  # no spread: no power statement to make
                out.append(
                    f"- σ = {n:g}, SLCA − GRPO on {name}: all {len(d)} pairs differ by exactly "
                    f"{d[0]:+.3f}; more seeds are needed to say what the design can detect."
                )
            elif len(d) >= 2:
                out.append(
                    f"- σ = {n:g}, SLCA − GRPO on {name}: with n={len(d)} pairs and this spread the "
                    f"design detects (80 % power, 5 % two-sided) only differences above "
                    f"{min_detectable(d):.3f} ({min_detectable(d) / 0.015625:.1f} tasks of 64)."
                )
        d = paired(s, g, "mean_process")
        gaps[n] = interval_stats(d)[0]
        out.append(f"- σ = {n:g}, convergence (mean held-out process): {verdict(d)}.")
        out.append(
            f"- σ = {n:g}, final held-out process: {verdict(paired(s, g, 'final/process'))}."
        )
        out.append(
            f"- σ = {n:g}, final tool accuracy: {verdict(paired(s, g, 'final/tool_accuracy'))}."
        )
        out.append(f"- σ = {n:g}, final Name F1: {verdict(paired(s, g, 'final/name_f1'))}.")
        leak_s = interval_stats([r["leakage"] for r in s])[0]
        leak_g = interval_stats([r["leakage"] for r in g])[0]
        out.append(
            f"- σ = {n:g}, summary leakage into tool credit: SLCA {leak_s:.3f}, GRPO {leak_g:.3f}."
        )
        calls = paired(s, g, "train_calls/late")
        out.append(
            f"- σ = {n:g}, training calls/ep. in the last third (SLCA − GRPO): {verdict(calls)}."
        )
    if len(noises) >= 2 and all(not math.isnan(gaps[n]) for n in noises):
        lo, hi = min(noises), max(noises)
        grows = "grows" if gaps[hi] > gaps[lo] else "does not grow"
        out.append(
            f"- The SLCA − GRPO convergence gap {grows} with summary noise: "
            f"{gaps[lo]:+.3f} at σ = {lo:g}, {gaps[hi]:+.3f} at σ = {hi:g} "
            "(point estimates; read them with the spreads above)."
        )
    return out


def plot(groups, noise: float, methods: list[str], path: str) -> None:
    """Mean ± std over seeds per method: held-out tool accuracy, training tool reward,
    training calls per episode, summary leakage."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("eval", "process", "held-out process (greedy)"),
        ("train", "reward/tool", "training tool reward (process)"),
        ("train", "rollout/tool_calls_per_episode", "training calls / episode"),
        ("train", "adv/summary_leakage", "summary leakage into tool credit"),
    )
    fig, axes = plt.subplots(1, len(panels), figsize=(5 * len(panels), 3.8))
    for ax, (kind, key, title) in zip(axes, panels):
        for m in methods:
            curves = groups.get((noise, m), [])
            runs = [r for r in curves if "_run" in r]
            if not runs:
                continue
            by_step: dict[int, list[float]] = defaultdict(list)
            for r in runs:
                source = r["_run"]["eval"] if kind == "eval" else r["_run"]["train"]
                for s, mets in source.items():
                    if key in mets:
                        by_step[s].append(mets[key])
            steps = sorted(by_step)
            if not steps:
                continue
            if kind == "train":  # 3-step moving average of the per-step means
                # leakage is a ratio whose denominator can be ~0 in a step: median over seeds
                centre = statistics.median if key == "adv/summary_leakage" else statistics.fmean
                means = [centre(by_step[s]) for s in steps]
                smooth = [statistics.fmean(means[max(0, i - 2) : i + 1]) for i in range(len(means))]
                ax.plot(steps, smooth, label=LABEL[m])
            else:
                mean = [statistics.fmean(by_step[s]) for s in steps]
                std = [statistics.pstdev(by_step[s]) for s in steps]
                ax.plot(steps, mean, marker="o", label=LABEL[m])
                ax.fill_between(
                    steps,
                    [a - b for a, b in zip(mean, std)],
                    [a + b for a, b in zip(mean, std)],
                    alpha=0.15,
                )
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"credit-assignment study, judge noise σ = {noise:g} (mean over seeds)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(
    runs: list[dict],
    out: str,
    command: str,
    target: float,
    wall_seconds: float | None,
    quick: bool = False,
    target_metric: str = "process",
    rebuilt_by: str | None = None,
) -> str:
    """Write the Markdown report (and one PNG per noise level beside it); return the text."""
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    groups = grouped(runs, target, target_metric)
    by_key = {(r["noise"], r["method"], r["seed"]): r for r in runs}
    for (noise, method), rows in groups.items():
        for row in rows:
            row["_run"] = by_key[(noise, method, row["seed"])]
    noises = sorted({n for n, _ in groups})
    methods = [m for m in ORDER if any(m == mm for _, mm in groups)]
    seeds = sorted({r["seed"] for r in runs})
    max_step = max((r["steps"] for r in runs), default=0)
    failed = [r for r in runs if r.get("error")]
    lines = [
        "# Credit-assignment study: SLCA-GRPO vs GRPO, ToolPO, RLTR, MT-GRPO",
        "",
        f"Command: `{command}`"
        + (" (quick: smoke settings, figures mean nothing)" if quick else "")
        + (f"; this report rebuilt from its runs by `{rebuilt_by}`" if rebuilt_by else ""),
        "",
        f"Written {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')} on {platform.machine()}, "
        f"{os.cpu_count()} cores"
        + (f"; wall time {wall_seconds / 60:.1f} min" if wall_seconds is not None else "")
        + f". {len(runs)} runs ({len(methods)} methods × {len(seeds)} seeds × "
        f"{len(noises)} noise levels), {max_step} steps each"
        + (f"; {len(failed)} FAILED: " + ", ".join(r["folder"] for r in failed) if failed else "")
        + ". Design and how to read it: [README.md](README.md).",
        "",
    ]
    for noise in noises:
        png = Path(out).with_name(f"{Path(out).stem.lower()}_noise{noise:g}.png")
        plot(groups, noise, methods, str(png))
        lines += [f"## Judge noise σ = {noise:g}", ""]
        lines += [*method_table(groups, noise, methods, max_step, target, target_metric), ""]
        lines += [f"![curves at σ = {noise:g}]({png.name})", ""]
    lines += [
        "## Warm starts",
        "",
        "The warm start is rebuilt (SFT) when the cache is empty, and CPUs or library versions "
        "that differ give different weights; runs are paired only with runs from the same "
        "weights, and gains are measured from each run's own step-0 evaluation.",
        "",
        *warm_start_table(runs),
        "",
    ]
    lines += ["## SLCA − GRPO, paired by seed", "", *paired_table(groups, noises), ""]
    lines += ["## Tool-call count drift (per-segment normalisation risk)", ""]
    for noise in noises:
        lines += [f"σ = {noise:g}:", "", *calls_table(groups, noise, methods), ""]
    lines += ["## Reading (computed from the tables above)", ""]
    lines += [*constant_channels(runs), *noise_invariance(runs), *reading(groups, noises), ""]
    text = "\n".join(lines)
    Path(out).write_text(text)
    return text
