"""Which RL settings make the built-in suite model better at calling tools? Many quickstart
variants side by side, each with held-out evaluations every few steps.

::

    python experiments/learning/rl_sweep.py --jobs 2 --variants base neg0.25 value
    python experiments/learning/rl_sweep.py --jobs 15 --accelerator gpu --fallback-cpu --minutes 6

A variant is ``configs/quickstart.yaml`` with a few dotted-key overrides (``VARIANTS``),
run as ``slca fit`` in a child process with 1 torch thread, CSV logging only, checkpoints
off, the held-out evaluation (64 tasks, greedy) every ``--every`` steps, at the start and
at the end; ``--minutes`` caps each run's training wall time (Lightning's ``max_time``;
the end evaluation still runs). Each finished run appends one JSON line to ``--out``
(default ``results/rl_sweep.jsonl``): its held-out curve (strict tool accuracy, Success@0.9,
process, calls per episode) and its training curve summary (reward, HierR fmt and value,
invalid calls, KL, entropy; first and last 10 steps). A run already in ``--out`` is never
redone. Runs live in ``runs/rl_sweep/<variant>_seed<k>/`` (config, fit.log, metrics.csv;
a failed GPU attempt's log is kept beside the CPU retry's).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

_DR = {"class_path": "slca_lightning.advantages.SLCARouter", "init_args": {"norm_by_std": False}}
_GRPO = {"class_path": "slca_lightning.advantages.GRPORouter"}
#: RL on the warm start's own demonstration tasks 0-255 (the quickstart before 2026-12-04).
_DEMO_TASKS = {
    "data.tasks.init_args.n_train": 256,
    "data.tasks.init_args.train_start": 0,
    "data.tasks.init_args.heldout_start": 256,
}
_P16 = {"data.prompts_per_step": 16}
#: HierR's process weights tilted to argument values (the paper: value 0.20).
_VALUE = {
    "model.reward_head.init_args.process_weights": {
        "fmt": 0.1, "name": 0.15, "key": 0.05, "value": 0.6, "parallel": 0.1,
    }
}  # fmt: skip


#: 16 fixed training tasks, 60 steps.
_FIX16 = {
    "data.tasks.init_args.n_train": 16,
    "data.tasks.init_args.train_start": 1280,
    "trainer.max_steps": 60,
}


def _lr(value: float) -> dict:
    return {"model.learning_rate": value}


#: name -> dotted-key overrides of configs/quickstart.yaml (lr 5e-5, 40 steps, RL on tasks
#: 320-511). The 2026-12-04 sweep ran on the quickstart before that change: its records
#: (results/rl_sweep_2026-12-04.jsonl) carry their own overrides and base commit.
VARIANTS: dict[str, dict] = {
    "base": {},
    "demo-tasks": _DEMO_TASKS,
    "lr2e-5": _lr(2e-5),
    "lr1e-4": _lr(1e-4),
    "lr2e-4": _lr(2e-4),
    "p16": _P16,
    "g16": {"data.group_size": 16},
    "t1": {"model.temperature": 1.0},
    "dr": {"model.router": _DR},
    "kl05": {"model.kl_coef": 0.05},
    "trunc": {"model.mask_truncated": True},
    "seq": {"model.aggregation": "seq-mean-token-mean"},
    "grpo": {"model.router": _GRPO},
    "neg0.25": {"model.negative_weight": 0.25},
    "neg0": {"model.negative_weight": 0.0},
    "value": _VALUE,
    "value-neg0.25": {**_VALUE, "model.negative_weight": 0.25},
    "ppo2": {"model.ppo_epochs": 2, "trainer.max_steps": 80},  # max_steps counts optimiser steps
    # Can RL fit a fixed set at all? 16 training tasks (1280-1295: neither demos nor held-out),
    # each drawn ~15 times in 60 steps; read the training curve (--train-table).
    "fix16-lr1e-4": {**_FIX16, **_lr(1e-4)},
    "fix16-lr3e-4": {**_FIX16, **_lr(3e-4)},
    "fix16-lr1e-3-neg0": {**_FIX16, **_lr(1e-3), "model.negative_weight": 0.0},
}
EVAL_KEYS = ("tool_accuracy", "success@0.9", "process", "tool_calls_per_episode", "name_f1")
TRAIN_KEYS = (
    "reward/total", "reward/tool", "reward/fmt", "reward/value", "reward/action",
    "rollout/invalid_calls_per_episode", "train/kl_mean", "train/entropy_mean",
)  # fmt: skip


def set_dotted(cfg: dict, key: str, value) -> None:
    """``cfg["a"]["b"] = value`` for ``key == "a.b"``, creating dicts on the way."""
    *path, last = key.split(".")
    node = cfg
    for part in path:
        node = node.setdefault(part, {})
    node[last] = value


def build_config(name: str, seed: int, folder: Path, args) -> dict:
    """The quickstart config of one run (variant ``name``, ``seed``) writing into ``folder``."""
    from experiments.learning.run import run_config

    cfg = run_config(seed, folder)
    trainer = cfg["trainer"]
    trainer.update(max_steps=args.max_steps, accelerator=args.accelerator)
    if args.minutes:
        trainer["max_time"] = {"seconds": round(args.minutes * 60)}
    keep = []
    for cb in trainer.get("callbacks", []):
        if cb["class_path"].endswith("InDomainEval"):
            cb["init_args"].update(every_n_steps=args.every, save_episodes=False)
            keep.append(cb)
        elif cb["class_path"].endswith(("RewardCurves", "SimulatorStats")):
            keep.append(cb)
    trainer["callbacks"] = keep
    for key, value in VARIANTS[name].items():
        set_dotted(cfg, key, copy.deepcopy(value))
    return cfg


def summarize(name: str, seed: int, folder: Path, wall: float) -> dict:
    """One JSON-able record of a finished run read from its metrics.csv."""
    from experiments.common import read_metrics

    train, evals = read_metrics(folder)

    def mean(rs: list[dict], key: str) -> float | None:
        vals = [float(r[key]) for r in rs if r.get(key)]
        return round(sum(vals) / len(vals), 4) if vals else None

    curve = [
        {"step": int(r["step"]), **{k: float(r[f"eval/in_domain/{k}"]) for k in EVAL_KEYS
                                    if r.get(f"eval/in_domain/{k}")}}
        for r in evals
    ]  # fmt: skip
    return {
        "name": name,
        "seed": seed,
        "overrides": VARIANTS[name],
        "steps": len(train),
        "wall_s": round(wall, 1),
        "eval": curve,
        "first10": {k: mean(train[:10], k) for k in TRAIN_KEYS},
        "last10": {k: mean(train[-10:], k) for k in TRAIN_KEYS},
    }


def _short(key: str, value) -> str:
    """``key=value`` with the last key part and class paths cut to the class name."""
    if isinstance(value, dict) and "class_path" in value:
        args = ",".join(f"{k}={v}" for k, v in value.get("init_args", {}).items())
        value = f"{value['class_path'].rsplit('.', 1)[-1]}({args})"
    elif isinstance(value, dict):
        value = json.dumps(value, separators=(",", ":"))
    return f"{key.rsplit('.', 1)[-1]}={value}"


def render(records: list[dict]) -> str:
    """A markdown table of sweep records: the held-out curve and the training summary."""
    lines = [
        "| variant | seed | overrides | steps | held-out tool accuracy by step | Success@0.9 start → end "
        "| reward first10 → last10 | fmt first10 → last10 | entropy last10 |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        curve = " → ".join(f"{e['tool_accuracy']:.3f} ({e['step']})" for e in r["eval"])
        s0, s1 = (round(64 * r["eval"][i].get("success@0.9", float("nan"))) for i in (0, -1))
        f, last = r["first10"], r["last10"]
        over = ", ".join(_short(k, v) for k, v in r["overrides"].items())
        lines.append(
            f"| {r['name']} | {r['seed']} | {over or '–'} | {r['steps']} | {curve} | {s0} → {s1} "
            f"| {f['reward/total']:.3f} → {last['reward/total']:.3f} "
            f"| {f['reward/fmt']:.3f} → {last['reward/fmt']:.3f} | {last['train/entropy_mean']:.3f} |"
        )
    return "\n".join(lines) + "\n"


def render_train(records: list[dict]) -> str:
    """A markdown table of the training curves: first 10 → last 10 steps of the strict
    correctness of the training episodes (HierR's ``action``: calls exactly right), the value
    score, the call format and the policy's entropy."""
    lines = [
        "| variant | seed | overrides | steps | strictly right calls | value | fmt | entropy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        f, last = r["first10"], r["last10"]
        if f.get("reward/action") is None:
            continue  # recorded before the action reward was kept

        def arrow(key: str, f: dict = f, last: dict = last) -> str:
            return f"{f[key]:.3f} → {last[key]:.3f}"

        over = ", ".join(_short(k, v) for k, v in r["overrides"].items())
        lines.append(
            f"| {r['name']} | {r['seed']} | {over or '–'} | {r['steps']} | {arrow('reward/action')} "
            f"| {arrow('reward/value')} | {arrow('reward/fmt')} | {arrow('train/entropy_mean')} |"
        )
    return "\n".join(lines) + "\n"


def launch(name: str, seed: int, args) -> tuple[subprocess.Popen, Path, float]:
    import yaml

    folder = Path(args.runs) / f"{name}_seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.yaml").write_text(
        yaml.safe_dump(build_config(name, seed, folder, args), sort_keys=False)
    )
    from experiments.common import child_command

    argv = ["slca_lightning.cli.commands", "fit", "--config", str(folder / "config.yaml")]
    log_path = folder / "fit.log"
    if log_path.is_file():  # a retry keeps the failed attempt's log
        log_path.replace(folder / f"fit.{time.strftime('%H%M%S')}.log")
    with open(log_path, "w") as log:  # the child keeps its own copy of the fd
        proc = subprocess.Popen(**child_command(argv, 1), stdout=log, stderr=subprocess.STDOUT)
    return proc, folder, time.perf_counter()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--variants", nargs="+", default=list(VARIANTS), choices=list(VARIANTS))
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument(
        "--fallback-cpu", action="store_true", help="rerun a run that fails within 2 min on cpu"
    )
    p.add_argument("--max-steps", type=int, default=40)
    p.add_argument("--minutes", type=float, default=None, help="training wall cap per run")
    p.add_argument("--every", type=int, default=20, help="held-out evaluation every k steps")
    p.add_argument("--runs", default=str(ROOT / "runs" / "rl_sweep"))
    p.add_argument("--out", default=str(HERE / "results" / "rl_sweep.jsonl"))
    p.add_argument(
        "--table", action="store_true", help="print --out as a markdown table, run nothing"
    )
    p.add_argument(
        "--train-table", action="store_true", help="print --out's training curves, run nothing"
    )
    args = p.parse_args(argv)
    sys.path.insert(0, str(ROOT))  # experiments.learning.run, run as a script
    if args.table or args.train_table:
        records = [json.loads(line) for line in Path(args.out).read_text().splitlines()]
        print((render_train if args.train_table else render)(records), end="")
        return 0
    out = Path(args.out)
    done = set()
    if out.is_file():
        done = {(r["name"], r["seed"]) for r in map(json.loads, out.read_text().splitlines())}
    todo = [(v, s) for s in args.seeds for v in args.variants if (v, s) not in done]
    running: list[tuple[str, int, subprocess.Popen, Path, float]] = []
    retried: set[tuple[str, int]] = set()
    while todo or running:
        while todo and len(running) < args.jobs:
            name, seed = todo.pop(0)
            running.append((name, seed, *launch(name, seed, args)))
        time.sleep(2)
        for item in list(running):
            name, seed, proc, folder, t0 = item
            if proc.poll() is None:
                continue
            running.remove(item)
            wall = time.perf_counter() - t0
            if proc.returncode:
                print(
                    f"{name} seed {seed}: exit {proc.returncode}, see {folder}/fit.log", flush=True
                )
                if (
                    args.accelerator != "cpu"
                    and args.fallback_cpu
                    and wall < 120
                    and (name, seed) not in retried
                ):
                    retry = argparse.Namespace(**{**vars(args), "accelerator": "cpu"})
                    retried.add((name, seed))  # once: a config error fails on cpu too
                    running.append((name, seed, *launch(name, seed, retry)))
                    print(f"{name} seed {seed}: retrying on cpu", flush=True)
                continue
            try:
                record = summarize(name, seed, folder, wall)
            except (ValueError, KeyError, OSError) as exc:  # no metrics.csv, or no evaluation
                print(f"{name} seed {seed}: no summary ({exc!r}), see {folder}", flush=True)
                continue
            with out.open("a") as fh:
                fh.write(json.dumps(record) + "\n")
            accs = " ".join(
                f"{e['step']}:{e.get('tool_accuracy', float('nan')):.3f}" for e in record["eval"]
            )
            print(f"{name} seed {seed}: {record['steps']} steps {wall:.0f}s acc {accs}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
