"""Turn the study's runs into ``REPORT.md``, the dose-response plot and the learning curves.

Every figure comes from the runs' own ``metrics.csv`` (what ``slca fit`` logged): held-out
evaluations (``eval/in_domain/*``, greedy, the same tasks for every run) and the per-step
training metrics (``reward/*``, ``adv/*``, ``rollout/*``). Means ± std are over seeds; the
SLCA − GRPO differences are paired by seed (the same seed gives both methods the same task
order, sampling seeds and first batch).

The dose-response section: each run's gain is its held-out strict tool accuracy at the last
evaluation minus at step 0; per method and σ the mean gain with a 95 % t-interval over
seeds; SLCA − GRPO per σ paired by seed; per method the least-squares slope of gain on σ
over its runs, and the difference of slopes as the slope of the paired differences on σ;
and a reading computed from those intervals (:func:`dose_response_reading`).
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from experiments.credit_assignment.checks import (
    constant_channels,
    noise_invariance,
    warm_start_table,
)
from experiments.credit_assignment.summary import (
    FINAL,
    LABEL,
    NO_ESTIMATE,
    ORDER,
    Estimate,
    ci95,
    grouped,
    interval_stats,
    mean_estimate,
    min_detectable,
    paired,
    pm,
    slope_estimate,
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


def dose_table(groups, noises: list[float]) -> list[str]:
    """Per σ, over every method's runs: the training rewards' spread across a step's
    rollouts (``reward/summary_std``, ``reward/tool_std``, mean over steps), mean ± std over
    runs. The judge's noisy score is clipped to [0, 1], so its spread cannot pass 0.5: this
    is the noise the summary channel actually carries at each σ."""
    head = ["σ", "runs", "summary reward spread", "tool reward spread", "summary ÷ tool"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
    for noise in noises:
        rows = [r for (n, _), rs in groups.items() if n == noise for r in rs]
        ratio = [r["spread/summary"] / r["spread/tool"] for r in rows if r["spread/tool"] > 0]
        cells = [f"{noise:g}", str(len(rows)), pm([r["spread/summary"] for r in rows])]
        cells += [pm([r["spread/tool"] for r in rows]), pm(ratio, 2)]
        lines.append("| " + " | ".join(cells) + " |")
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


def reading(groups, noises: list[float], task: float = 1 / 64) -> list[str]:
    """Statements computed from the numbers (no claim is written by hand here); ``task`` is
    one held-out task's share of tool accuracy."""
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
                f"({mean:+.3f}, 95 % CI [{ci[0]:+.3f}, {ci[1]:+.3f}], n={k}; one task = {task:.3f})."
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
                    f"{min_detectable(d):.3f} ({min_detectable(d) / task:.1f} tasks of "
                    f"{round(1 / task)})."
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


# ----------------------------------------------------------------------------- dose-response
#: The per-run figure of the dose-response: held-out strict tool accuracy (every gold call
#: exactly right) at the last evaluation minus at step 0, from the run's own start.
DOSE_KEY = "gain/tool_accuracy"


@dataclass
class DoseResponse:
    """The dose-response statistics of a set of runs (every figure from the runs)."""

    noises: list[float]  # the σ levels with runs, ascending
    cells: dict[tuple[str, float], Estimate]  # (method, σ) → mean gain over seeds
    points: dict[str, list[tuple[float, float]]]  # method → (σ, gain) of each run
    slopes: dict[str, Estimate]  # method → least-squares slope of gain on σ
    diffs: dict[float, Estimate]  # σ → SLCA − GRPO gain, paired by seed
    diff_points: list[tuple[float, float]]  # (σ, SLCA − GRPO) of each pair
    diff_slope: Estimate  # the slope of the paired differences on σ


def dose_response(groups, methods: list[str]) -> DoseResponse:
    """Gains per method and σ, SLCA − GRPO per σ (paired by seed, same warm start), the
    slope of gain on σ per method (least squares over its runs) and the difference of
    slopes (least squares over the paired differences: with every pair present, exactly
    SLCA's slope minus GRPO's, with an interval that uses the pairing)."""
    noises = sorted({n for n, _ in groups})
    cells, points, slopes = {}, {}, {}
    for m in methods:
        pts = []
        for n in noises:
            gains = [r.get(DOSE_KEY, math.nan) for r in groups.get((n, m), [])]
            if gains:
                cells[(m, n)] = mean_estimate(gains)
                pts += [(n, g) for g in gains if not math.isnan(g)]
        if pts:
            points[m] = pts
            slopes[m] = slope_estimate([x for x, _ in pts], [y for _, y in pts])
    diffs, diff_points = {}, []
    for n in noises:
        d = paired(groups.get((n, "slca"), []), groups.get((n, "grpo"), []), DOSE_KEY)
        if d:
            diffs[n] = mean_estimate(d)
            diff_points += [(n, x) for x in d]
    diff_slope = (
        slope_estimate([x for x, _ in diff_points], [y for _, y in diff_points])
        if diff_points
        else NO_ESTIMATE
    )
    return DoseResponse(noises, cells, points, slopes, diffs, diff_points, diff_slope)


def dose_response_table(dr: DoseResponse, methods: list[str]) -> list[str]:
    """Mean gain [95 % CI] (runs) per method and σ, the slope per method, and the paired
    SLCA − GRPO row."""
    head = ["gain in held-out strict tool accuracy"] + [f"σ = {n:g}" for n in dr.noises]
    head += ["slope per unit σ [95 % CI] (runs)"]
    lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]

    def cell(e: Estimate | None) -> str:
        return "–" if e is None or e.n == 0 else f"{e.text()} ({e.n})"

    for m in methods:
        if m not in dr.points:
            continue
        cells = [LABEL[m]] + [cell(dr.cells.get((m, n))) for n in dr.noises]
        lines.append("| " + " | ".join([*cells, cell(dr.slopes.get(m))]) + " |")
    if dr.diffs:
        cells = ["SLCA − GRPO, paired by seed"] + [cell(dr.diffs.get(n)) for n in dr.noises]
        lines.append("| " + " | ".join([*cells, cell(dr.diff_slope)]) + " |")
    return lines


def _slope_text(e: Estimate, unit: str = "runs") -> str:
    return f"{e.value:+.3f} per unit σ, 95 % CI [{e.lo:+.3f}, {e.hi:+.3f}], {e.n} {unit}"


def _overlap(a: Estimate, b: Estimate) -> bool:
    return a.lo <= b.hi and b.lo <= a.hi


def _difference_lines(diffs: dict[float, Estimate], task: float) -> list[str]:
    """From which σ the SLCA − GRPO difference in gain excludes 0, and by how much."""
    noises = sorted(n for n, e in diffs.items() if e.has_interval)
    if not noises:
        return ["- No σ has two or more SLCA–GRPO pairs: the difference in gain has no interval."]
    of = round(1 / task)

    def at(n: float) -> str:
        d = diffs[n]
        return f"{d.text()} at σ = {n:g} ({d.value / task:+.1f} tasks of {of}, {d.n} pairs)"

    above = [n for n in noises if diffs[n].above_zero]
    below = [n for n in noises if diffs[n].below_zero]
    tail: list[float] = []
    for n in reversed(noises):  # the largest σ levels whose intervals all lie above 0
        if not diffs[n].above_zero:
            break
        tail.insert(0, n)
    out = []
    if tail:
        out.append(
            f"- The SLCA − GRPO difference in gain (paired by seed) excludes 0 from σ = "
            f"{tail[0]:g} on: " + "; ".join(at(n) for n in tail) + "."
        )
    elif above:
        out.append(
            "- The SLCA − GRPO difference in gain (paired by seed) excludes 0 at σ = "
            + ", ".join(f"{n:g}" for n in above)
            + " but not at every larger σ: "
            + "; ".join(at(n) for n in noises)
            + "."
        )
    else:
        out.append(
            "- At no σ does the SLCA − GRPO difference in gain (paired by seed) exclude 0: "
            + "; ".join(at(n) for n in noises)
            + "."
        )
    if below:
        out.append(
            "- SLCA's gain is below GRPO's (interval below 0) at σ = "
            + ", ".join(f"{n:g}" for n in below)
            + "."
        )
    return out


def dose_response_reading(
    slopes: dict[str, Estimate],
    diff_slope: Estimate,
    diffs: dict[float, Estimate],
    task: float = 1 / 64,
) -> list[str]:
    """The dose-response reading, computed from the intervals (nothing typed by hand).

    The mechanism predicts that GRPO's gain falls as σ grows and SLCA's does not. It holds
    when GRPO's slope interval lies below 0, SLCA's does not, and the difference of slopes
    (SLCA − GRPO, paired by seed) lies above 0; when both fall and the difference lies above
    0 it holds in part (SLCA's gain falls less steeply); otherwise the data do not show it,
    with the reasons. Then: from which σ the paired SLCA − GRPO difference in gain excludes 0,
    and by how much (``task``: one held-out task's share of tool accuracy).
    """
    g, s = slopes.get("grpo", NO_ESTIMATE), slopes.get("slca", NO_ESTIMATE)
    if not (g.has_interval and s.has_interval):
        return [
            "- **Not enough runs for a dose-response reading**: a slope with an interval "
            f"needs three or more runs at two or more σ per method (GRPO: {g.n} runs, "
            f"SLCA: {s.n})."
        ]
    if diff_slope.has_interval:
        dtext = f"difference of slopes SLCA − GRPO {_slope_text(diff_slope, 'pairs')}"
    else:
        dtext = "no difference of slopes (too few SLCA–GRPO pairs at two or more σ)"
    grpo_falls, slca_falls, apart = g.below_zero, s.below_zero, diff_slope.above_zero
    rises = "; it rises" if s.above_zero else ""
    if grpo_falls and not slca_falls and apart:
        head = (
            f"- **As the mechanism predicts, GRPO's gain falls as σ grows ({_slope_text(g)}) "
            f"and SLCA's does not ({_slope_text(s)}{rises})**; {dtext}."
        )
    elif grpo_falls and slca_falls and apart:
        head = (
            f"- **Only in part as predicted: GRPO's gain falls as σ grows ({_slope_text(g)}), "
            f"and SLCA's falls too ({_slope_text(s)}), less steeply**: {dtext}."
        )
    else:
        reasons = []
        if g.above_zero:
            reasons.append(f"GRPO's gain rises as σ grows ({_slope_text(g)})")
        elif not grpo_falls:
            reasons.append(
                f"GRPO's gain does not fall detectably as σ grows ({_slope_text(g)}: the "
                "interval contains 0)"
            )
        else:
            reasons.append(f"GRPO's gain falls as σ grows ({_slope_text(g)})")
        if slca_falls:
            reasons.append(f"SLCA's falls too ({_slope_text(s)})")
        else:
            reasons.append(f"SLCA's slope is {_slope_text(s)}")
        if not diff_slope.has_interval:
            reasons.append(dtext)
        elif diff_slope.below_zero:
            reasons.append(f"SLCA's slope is the lower one ({dtext})")
        elif not apart:
            reasons.append(
                f"the slopes do not differ detectably ({dtext}: the interval contains 0)"
            )
        overlap = " (the two slopes' intervals overlap)" if _overlap(g, s) else ""
        head = (
            "- **The data do not show the predicted pattern** (GRPO's gain falling as σ grows "
            "and SLCA's not): " + "; ".join(reasons) + overlap + "."
        )
    return [head, *_difference_lines(diffs, task)]


def plot_dose_response(dr: DoseResponse, methods: list[str], path: str) -> None:
    """Gain against σ per method (mean with its 95 % interval, each run a point, the
    least-squares line dashed) and the paired SLCA − GRPO difference against σ."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [m for m in methods if m in dr.points]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.4))
    spread = 0.02 * (max(dr.noises) - min(dr.noises) or 1.0)  # side by side at each σ
    for i, m in enumerate(shown):
        offset = (i - (len(shown) - 1) / 2) * spread
        xs = [n for n in dr.noises if (m, n) in dr.cells]
        est = [dr.cells[(m, n)] for n in xs]
        (line,) = axes[0].plot(
            [x + offset for x in xs], [e.value for e in est], marker="o", label=LABEL[m]
        )
        colour = line.get_color()
        bars = [(x + offset, e) for x, e in zip(xs, est) if e.has_interval]
        if bars:
            axes[0].errorbar(
                [x for x, _ in bars],
                [e.value for _, e in bars],
                yerr=[[e.value - e.lo for _, e in bars], [e.hi - e.value for _, e in bars]],
                fmt="none",
                ecolor=colour,
                capsize=3,
            )
        pts = dr.points[m]
        seen: dict[tuple, int] = defaultdict(int)  # runs with equal gains side by side
        shifted = []
        for x, y in pts:
            shifted.append(x + offset + 0.15 * spread * seen[(x, y)])
            seen[(x, y)] += 1
        axes[0].scatter(shifted, [y for _, y in pts], s=12, alpha=0.35, color=colour)
        slope = dr.slopes.get(m, NO_ESTIMATE)
        if not math.isnan(slope.value) and len(xs) > 1:
            mx = statistics.fmean(x for x, _ in pts)
            my = statistics.fmean(y for _, y in pts)
            ends = [min(xs), max(xs)]
            axes[0].plot(
                [x + offset for x in ends],
                [my + slope.value * (x - mx) for x in ends],
                ls="--",
                lw=1,
                color=colour,
            )
    axes[0].set_title("gain in held-out strict tool accuracy from each run's start", fontsize=10)
    axes[0].set_ylabel("last evaluation − step 0")
    if dr.diffs:
        xs = sorted(dr.diffs)
        est = [dr.diffs[n] for n in xs]
        axes[1].plot(xs, [e.value for e in est], marker="o", color="black", label="mean")
        bars = [(x, e) for x, e in zip(xs, est) if e.has_interval]
        if bars:
            axes[1].errorbar(
                [x for x, _ in bars],
                [e.value for _, e in bars],
                yerr=[[e.value - e.lo for _, e in bars], [e.hi - e.value for _, e in bars]],
                fmt="none",
                ecolor="black",
                capsize=3,
            )
        axes[1].scatter(
            [x for x, _ in dr.diff_points],
            [y for _, y in dr.diff_points],
            s=12,
            alpha=0.4,
            color="black",
            label="one seed",
        )
        axes[1].legend(fontsize=8)
    axes[1].set_title("SLCA − GRPO, paired by seed", fontsize=10)
    for ax in axes:
        ax.axhline(0.0, color="grey", lw=0.8)
        ax.set_xlabel("summary-judge noise σ")
        ax.set_xticks(dr.noises)
        ax.grid(alpha=0.3)
    if shown:
        axes[0].legend(fontsize=8)
    fig.suptitle("credit-assignment study: dose-response (means with 95 % intervals; points: runs)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def grid_text(runs: list[dict]) -> str:
    """The grid the runs cover, e.g. ``SLCA-GRPO and GRPO at σ ∈ {0, 0.5, 1, 2}; ToolPO at
    σ ∈ {0, 0.5}`` (methods with the same σ levels together, in :data:`ORDER`)."""
    levels: dict[str, set[float]] = defaultdict(set)
    for r in runs:
        levels[r["method"]].add(r["noise"])
    by_levels: dict[tuple, list[str]] = defaultdict(list)
    for m in sorted(levels, key=lambda m: (-len(levels[m]), ORDER.index(m))):
        by_levels[tuple(sorted(levels[m]))].append(LABEL[m])
    parts = []
    for noises, names in by_levels.items():
        who = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
        parts.append(f"{who} at σ ∈ {{{', '.join(f'{n:g}' for n in noises)}}}")
    return "; ".join(parts)


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


def _warm_start_intro(runs: list[dict]) -> str:
    starts = {r.get("warm_start") for r in runs if not r.get("error") and r["eval"]}
    if starts == {None}:
        return "No run records warm-start weights (a random model, or no provenance.json)."
    if len(starts) == 1:
        (sha,) = starts
        return (
            f"Every run began from the same weights (`{sha}`; for a shipped warm start the "
            "sha256 of its weights file, the same on every machine); gains are measured from "
            "each run's own step-0 evaluation."
        )
    return (
        f"The runs began from {len(starts)} sets of weights (a warm start rebuilt by SFT "
        "when the cache is empty can come out with other weights on other CPUs or library "
        "versions); runs are paired only with runs from the same weights, and gains are "
        "measured from each run's own step-0 evaluation."
    )


def write_report(
    runs: list[dict],
    out: str,
    command: str,
    target: float,
    wall_seconds: float | None,
    quick: bool = False,
    target_metric: str = "process",
    rebuilt_by: str | None = None,
    planned: int | None = None,
    resumed: tuple[int, int] | None = None,
) -> str:
    """Write the Markdown report (the dose-response plot ``<stem>_dose_response.png`` and
    one learning-curve PNG per noise level beside it); return the text. ``planned``: the
    number of runs the design has (the report says how many of them it holds); ``resumed``:
    ``(ran, kept)`` when the command resumed a study, so its wall time covers ``ran`` runs
    only (``kept`` had finished before)."""
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
    sizes = {r.get("eval_tasks") for r in runs if r.get("eval_tasks")}
    task = 1 / sizes.pop() if len(sizes) == 1 else 1 / 64  # one held-out task's share
    stem = Path(out).stem.lower()
    of = f" of the design's {planned}" if planned is not None else ""
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
        + (
            f" for the {resumed[0]} runs this command ran ({resumed[1]} had finished before "
            "and were kept)"
            if wall_seconds is not None and resumed
            else ""
        )
        + f". {len(runs)} runs{of}"
        + (
            f" (seeds {', '.join(map(str, seeds))}: {grid_text(runs)}), {max_step} steps each"
            if runs
            else ""
        )
        + (f"; {len(failed)} FAILED: " + ", ".join(r["folder"] for r in failed) if failed else "")
        + ". Design and how to read it: [README.md](README.md).",
        "",
    ]
    if not runs:
        lines += [
            "No run of the study has finished yet: this report fills in as runs finish "
            "(`run.py` resumes run by run; `--report-only` rebuilds it from the run folders).",
            "",
        ]
        text = "\n".join(lines)
        Path(out).write_text(text)
        return text
    dr = dose_response(groups, methods)
    png = Path(out).with_name(f"{stem}_dose_response.png")
    plot_dose_response(dr, methods, str(png))
    lines += [
        "## Dose-response: gain in held-out strict tool accuracy against summary noise σ",
        "",
        "Each run's gain: held-out strict tool accuracy (every gold call exactly right) at its "
        "last evaluation minus at step 0. Per method and σ: the mean over seeds with its 95 % "
        "t-interval (runs); the slope: least squares of gain on σ over the method's runs, "
        "t-interval on n − 2 degrees of freedom; SLCA − GRPO: differences paired by seed (and "
        "warm start), their slope the least-squares slope of those differences on σ "
        f"(the difference of the two slopes). One task of {round(1 / task)} = {task:.3f}.",
        "",
        *dose_response_table(dr, methods),
        "",
        f"![gain against σ per method]({png.name})",
        "",
        *dose_response_reading(dr.slopes, dr.diff_slope, dr.diffs, task),
        "",
    ]
    lines += [
        "## The dose: the summary channel's spread at each σ",
        "",
        "Standard deviation of each channel's training reward across a step's rollouts, mean "
        "over the run's steps, mean ± std over the runs at that σ (all methods). The judge's "
        "noisy score is clipped to [0, 1], so the summary channel's spread cannot pass 0.5.",
        "",
        *dose_table(groups, noises),
        "",
    ]
    for noise in noises:
        png = Path(out).with_name(f"{stem}_noise{noise:g}.png")
        plot(groups, noise, methods, str(png))
        lines += [f"## Judge noise σ = {noise:g}", ""]
        lines += [*method_table(groups, noise, methods, max_step, target, target_metric), ""]
        lines += [f"![curves at σ = {noise:g}]({png.name})", ""]
    lines += ["## Warm starts", "", _warm_start_intro(runs), "", *warm_start_table(runs), ""]
    lines += ["## SLCA − GRPO, paired by seed", "", *paired_table(groups, noises), ""]
    lines += ["## Tool-call count drift (per-segment normalisation risk)", ""]
    for noise in noises:
        lines += [f"σ = {noise:g}:", "", *calls_table(groups, noise, methods), ""]
    lines += ["## Reading (computed from the tables above)", ""]
    lines += [*constant_channels(runs), *noise_invariance(runs), *reading(groups, noises, task), ""]
    text = "\n".join(lines)
    Path(out).write_text(text)
    return text
