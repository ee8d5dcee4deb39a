"""Does RL beat its SFT start on the held-out tasks, beyond the noise of 64 tasks?

::

    python experiments/smollm2/seeds.py experiments/smollm2/results/effect_seed0 \\
        experiments/smollm2/results/effect_seed1 --out experiments/smollm2/results/EFFECT.md

Reads each ``run.py`` folder's held-out episodes (``rl/logs/*/in_domain_episodes``: the
evaluation before RL, i.e. the SFT model, and after the last step), pairs them by task and
counts the tasks RL gained (wrong → strictly right) and lost (right → wrong). The test is
McNemar's exact test on those discordant tasks (a two-sided binomial test at ½): the same
64 tasks are scored twice, so only the tasks that changed carry information about the
difference, and an unpaired comparison of two accuracies would throw that pairing away.

``--control`` reads ``run.py --control`` folders instead: the SFT start, SFT + RL and the
control (SFT continued for RL's training time) side by side, each gain from the start, and
RL against the control paired by task (the README's ``smollm2 pooled`` block)::

    python experiments/smollm2/seeds.py experiments/smollm2/results/pooled_seed0 \\
        experiments/smollm2/results/pooled_seed1 --control --embed experiments/smollm2/README.md

``--versus`` compares RL runs in pairs (reference, variant) that share an SFT start and a
seed and differ in one setting: each run's start and end, its multi-call tasks answered
with too few calls, and each variant's end against its reference's end paired by task (the
README's ``smollm2 stop decision`` block)::

    python experiments/smollm2/seeds.py experiments/smollm2/results/pooled_seed0 \\
        experiments/smollm2/results/pooled_stop_seed0 experiments/smollm2/results/pooled_seed1 \\
        experiments/smollm2/results/pooled_stop_seed1 --versus --embed experiments/smollm2/README.md
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script

from experiments.common import read_jsonl, replace_block, short_stats

__all__ = [
    "control_table",
    "embed",
    "mcnemar_p",
    "paired_flips",
    "summarize",
    "versus_control",
    "versus_table",
]


def mcnemar_p(gained: int, lost: int) -> float:
    """Two-sided exact McNemar p-value: P(a split at least this uneven | no effect)."""
    n = gained + lost
    if n == 0:
        return 1.0
    k = min(gained, lost)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n
    return min(1.0, 2 * tail)


def _exact(rows: list[dict]) -> dict[str, bool]:
    return {r["task_id"]: bool(r["exact"]) for r in rows}


def _episodes(path: Path) -> dict[str, bool]:
    return _exact(read_jsonl(path))


def _rl_evaluations(run: Path) -> list[Path]:
    """The RL stage's saved held-out episodes, ``step_<k>.jsonl`` by step (at least two)."""
    folders = sorted((run / "rl").glob("logs/*/in_domain_episodes"))
    if not folders:
        raise FileNotFoundError(f"{run}: no rl/logs/*/in_domain_episodes (run.py's RL stage)")
    files = sorted(folders[-1].glob("step_*.jsonl"), key=lambda p: int(p.stem.split("_")[1]))
    if len(files) < 2:
        raise FileNotFoundError(f"{folders[-1]}: needs the evaluation before and after RL")
    return files


def paired_flips(run: Path) -> dict:
    """Held-out strict tool accuracy before and after RL of one run, paired by task."""
    files = _rl_evaluations(run)
    before, after = _episodes(files[0]), _episodes(files[-1])
    if before.keys() != after.keys():
        raise ValueError(f"{run}: the two evaluations scored different tasks")
    gained = sum(after[t] and not before[t] for t in before)
    lost = sum(before[t] and not after[t] for t in before)
    n = len(before)
    return {
        "run": run.name,
        "tasks": n,
        "steps": int(files[-1].stem.split("_")[1]),
        "sft": sum(before.values()) / n,
        "sft+rl": sum(after.values()) / n,
        "gained": gained,
        "lost": lost,
        "p": mcnemar_p(gained, lost),
    }


def summarize(runs: list[Path]) -> str:
    """A Markdown table, one row per run and one pooled row (tasks × seeds as pairs)."""
    rows = [paired_flips(r) for r in runs]
    lines = [
        "| run | RL steps | tasks | tool acc. SFT | tool acc. SFT + RL | Δ | gained | lost | McNemar p |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['run']} | {r['steps']} | {r['tasks']} | {r['sft']:.3f} | {r['sft+rl']:.3f} | "
            f"{r['sft+rl'] - r['sft']:+.3f} | {r['gained']} | {r['lost']} | {r['p']:.3f} |"
        )
    if len(rows) > 1:
        g, lo = sum(r["gained"] for r in rows), sum(r["lost"] for r in rows)
        n = sum(r["tasks"] for r in rows)
        deltas = [r["sft+rl"] - r["sft"] for r in rows]
        mean = sum(deltas) / len(deltas)
        lines.append(
            f"| pooled ({len(rows)} seeds) | | {n} | | | {mean:+.3f} | {g} | {lo} | "
            f"{mcnemar_p(g, lo):.3f} |"
        )
    n = rows[0]["tasks"]
    lines += [
        "",
        f"One task is {1 / n:.3f} of accuracy. With d tasks changing between the two "
        "evaluations, a difference is told from noise (McNemar, p < 0.05) only when the split "
        "of those d is lopsided enough: e.g. 6–0, 8–1, 10–2, 15–5 (gained–lost).",
    ]
    return "\n".join(lines) + "\n"


def _result(run: Path, stage: str) -> dict:
    path = run / stage / "result.json"
    if not path.is_file():
        raise FileNotFoundError(f"{path}: missing (run.py --control writes it)")
    return json.loads(path.read_text())


def versus_control(run: Path) -> dict:
    """One ``run.py --control`` folder: strict tool accuracy, call validity and Success@0.9 of
    the SFT start, of SFT + RL and of the control (SFT continued for RL's training time), and
    RL against the control paired by task (the RL run's last evaluation against the
    control's saved episodes)."""
    rl, control = _result(run, "rl"), _result(run, "control_eval")
    flips = paired_flips(run)
    after = _episodes(_rl_evaluations(run)[-1])
    episodes = run / "control_eval" / "in_domain_episodes.jsonl"
    if not episodes.is_file():
        raise FileNotFoundError(f"{episodes}: missing (the control's evaluation saves it)")
    ctrl = _episodes(episodes)
    if ctrl.keys() != after.keys():
        raise ValueError(f"{run}: RL and the control were scored on different tasks")
    keys = ("tool_accuracy", "tool_call_validity", "success@0.9")
    row = {
        "run": run.name,
        "steps": flips["steps"],
        "control_seconds": _result(run, "control").get("seconds_budget"),
        "sft": {k: rl["evals"]["sft"].get(k) for k in keys},
        "rl": {k: rl["evals"]["sft+rl"].get(k) for k in keys},
        "control": {k: control["metrics"].get(k) for k in keys},
        "rl_over_control": sum(after[t] and not ctrl[t] for t in after),
        "control_over_rl": sum(ctrl[t] and not after[t] for t in after),
    }
    row["p"] = mcnemar_p(row["rl_over_control"], row["control_over_rl"])
    return row


def _f(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def control_table(runs: list[Path]) -> str:
    """A Markdown table, one row per seed and a mean row: each metric for the SFT start, SFT +
    RL and the SFT-continued control, the two gains, and the tasks only RL or only the control
    solves (McNemar p)."""
    rows = [versus_control(r) for r in runs]
    lines = [
        "| run | RL steps | control (s) | tool acc. SFT / RL / control | gain RL | gain control "
        "| validity SFT / RL / control | Success@0.9 SFT / RL / control | only RL – only control "
        "| McNemar p |",
        "|---|---:|---:|---|---:|---:|---|---|---:|---:|",
    ]

    def triple(r: dict, k: str) -> str:
        return " / ".join(_f(r[m][k]) for m in ("sft", "rl", "control"))

    def gain(r: dict, m: str) -> float:
        return r[m]["tool_accuracy"] - r["sft"]["tool_accuracy"]

    for r in rows:
        lines.append(
            f"| {r['run']} | {r['steps']} | {r['control_seconds']} | {triple(r, 'tool_accuracy')} | "
            f"{gain(r, 'rl'):+.3f} | {gain(r, 'control'):+.3f} | {triple(r, 'tool_call_validity')} | "
            f"{triple(r, 'success@0.9')} | {r['rl_over_control']}–{r['control_over_rl']} | {r['p']:.3f} |"
        )
    if len(rows) > 1:
        g = sum(gain(r, "rl") for r in rows) / len(rows)
        c = sum(gain(r, "control") for r in rows) / len(rows)
        a, b = sum(r["rl_over_control"] for r in rows), sum(r["control_over_rl"] for r in rows)
        lines.append(
            f"| mean ({len(rows)} seeds) | | | | {g:+.3f} | {c:+.3f} | | | {a}–{b} | "
            f"{mcnemar_p(a, b):.3f} |"
        )
    return "\n".join(lines) + "\n"


def versus_table(runs: list[Path]) -> str:
    """A Markdown table of RL runs given in pairs, ``reference, variant, reference, variant,
    ...``: the two runs of a pair share the SFT start and the seed and differ in one setting
    (e.g. the segmenter). One row per run: strict tool accuracy, call validity and
    Success@0.9 before and after RL, the multi-call tasks (multi-step or parallel) answered
    after fewer calls than gold has (``short_stats``) before and after; on a variant's row,
    the tasks only its end or only its reference's end solves (McNemar p). With more than one
    pair, a pooled row (tasks × pairs)."""
    if not runs or len(runs) % 2:
        raise ValueError(f"--versus takes runs in pairs (reference, variant); got {len(runs)}")
    keys = ("tool_accuracy", "tool_call_validity", "success@0.9")
    lines = [
        "| run | RL steps | tool acc. start → end | validity start → end | Success@0.9 start → end "
        "| multi-call tasks answered short, start → end | only this run – only its reference "
        "| McNemar p |",
        "|---|---:|---|---|---|---|---:|---:|",
    ]
    wins = losses = 0
    for reference_run, variant in zip(runs[::2], runs[1::2]):
        reference = None
        for run in (reference_run, variant):
            evals = _result(run, "rl")["evals"]
            first, *_, last = _rl_evaluations(run)
            start_rows, end_rows = read_jsonl(first), read_jsonl(last)
            end = _exact(end_rows)
            short = [short_stats(start_rows), short_stats(end_rows)]
            cells = [f"{_f(evals['sft'].get(k))} → {_f(evals['sft+rl'].get(k))}" for k in keys]
            if reference is None:
                reference, versus = end, "| – | – |"
            else:
                if end.keys() != reference.keys():
                    raise ValueError(f"{run}: scored other held-out tasks than {reference_run}")
                a = sum(end[t] and not reference[t] for t in end)
                b = sum(reference[t] and not end[t] for t in end)
                wins, losses = wins + a, losses + b
                versus = f"| {a}–{b} | {mcnemar_p(a, b):.3f} |"
            lines.append(
                f"| {run.name} | {int(last.stem.split('_')[1])} | {' | '.join(cells)} | "
                f"{short[0]['short']} → {short[1]['short']} of {short[1]['multicall']} {versus}"
            )
    if len(runs) > 2:
        lines.append(
            f"| pooled ({len(runs) // 2} pairs) | | | | | | {wins}–{losses} | "
            f"{mcnemar_p(wins, losses):.3f} |"
        )
    return "\n".join(lines) + "\n"


BEGIN, END = "<!-- smollm2 effect: begin -->", "<!-- smollm2 effect: end -->"
CONTROL_BEGIN, CONTROL_END = "<!-- smollm2 pooled: begin -->", "<!-- smollm2 pooled: end -->"
VERSUS_BEGIN = "<!-- smollm2 stop decision: begin -->"
VERSUS_END = "<!-- smollm2 stop decision: end -->"


def embed(readme: Path, text: str, markers: tuple[str, str] = (BEGIN, END)) -> None:
    """Rewrite the block between ``markers`` (the effect markers) of ``readme`` with ``text``."""
    replace_block(readme, *markers, text)


def main(argv: list[str] | None = None) -> str:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("runs", nargs="+", type=Path, help="run.py output folders")
    p.add_argument("--out", type=Path, help="also write the table here")
    p.add_argument("--embed", type=Path, metavar="README", help="and into this README's block")
    p.add_argument(
        "--control",
        action="store_true",
        help="RL against the SFT-continued control (run.py --control)",
    )
    p.add_argument(
        "--versus",
        action="store_true",
        help="RL runs in pairs (reference, variant): one setting changed (e.g. the segmenter)",
    )
    args = p.parse_args(argv)
    if args.control and args.versus:
        p.error("--control and --versus are two different tables: pick one")
    if args.versus:
        text, markers = versus_table(args.runs), (VERSUS_BEGIN, VERSUS_END)
    elif args.control:
        text, markers = control_table(args.runs), (CONTROL_BEGIN, CONTROL_END)
    else:
        text, markers = summarize(args.runs), (BEGIN, END)
    if args.out:
        args.out.write_text(text)
    if args.embed:
        embed(args.embed, text, markers)
    print(text)
    return text


if __name__ == "__main__":
    main()
