"""Does RL make the built-in model better at calling tools? The quickstart over seeds, with a
control that spends RL's wall time on more SFT instead, and the README's figures.

::

    python experiments/learning/run.py                       # seeds 0 1 2 + controls
    python experiments/learning/run.py --seeds 0 --no-control --router slca_lightning.advantages.GRPORouter

For each seed ``k``: ``slca fit --config configs/quickstart.yaml`` with ``seed_everything``,
``model.seed`` and ``data.seed`` set to ``k`` (the SFT warm start is shared: it is fixed by
its own criterion, ``experiments/warm_start/README.md``), in a child process whose wall
time, peak RSS, torch threads and load average are recorded; then the control: the same
warm start trained by SFT for RL's measured wall time (``control.py``), evaluated on the
same 64 held-out tasks. Every run writes ``experiments/learning/results/<name>/result.json`` (committed); a finished run is
never redone (delete its folder to rerun it). ``REPORT.md`` gathers the tables, the gains
and two held-out transcripts before and after RL (a tool task and an abstention) when the
first run's ``in_domain_episodes/`` are on disk (they are not committed: rerunning that
run writes them). ``--report-only`` rebuilds ``REPORT.md`` from the ``result.json`` files
and runs nothing.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from experiments.common import child, read_metrics  # noqa: E402

CONFIG = ROOT / "configs" / "quickstart.yaml"
METRICS = ("tool_accuracy", "success@0.9", "name_f1", "arg_match", "process")
METRICS += ("tool_calls_per_episode", "reference/summary", "reference/success@0.9")
METRICS += ("tool_call_validity",)


def provenance(threads: int) -> dict:
    """:func:`slca_lightning.cli.provenance.provenance` of this process, with the torch threads
    the child runs on (each fit also writes its own ``provenance.json``)."""
    from slca_lightning.cli.provenance import provenance as record

    return {**record(), "threads": threads}


def run_config(seed: int, folder: Path, config: Path = CONFIG) -> dict:
    """``config`` (default ``configs/quickstart.yaml``) for one seed (``seed_everything``, ``model.seed``,
    ``data.seed``), writing into ``folder``: CSV logging only (metrics.csv is what the
    reports read), no progress bar, no checkpoints (the figures are the output)."""
    import yaml

    cfg = yaml.safe_load(Path(config).read_text())
    cfg["seed_everything"] = cfg["model"]["seed"] = cfg["data"]["seed"] = seed
    cfg["trainer"].update(
        default_root_dir=str(folder),
        enable_progress_bar=False,
        enable_checkpointing=False,
        logger=[
            {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {"save_dir": str(folder), "name": "logs"},
            }
        ],
    )
    return cfg


def merge(base: dict, over: dict) -> dict:
    """``over`` laid over ``base``, much as jsonargparse layers ``--config`` files: mappings
    merge key by key, except that a mapping naming another ``class_path`` replaces the old
    one whole (its ``init_args`` belonged to the old class); anything else (lists
    included) is replaced."""
    out = dict(base)
    for key, value in over.items():
        old = out.get(key)
        both = isinstance(value, dict) and isinstance(old, dict)
        swapped = both and value.get("class_path", old.get("class_path")) != old.get("class_path")
        out[key] = merge(old, value) if both and not swapped else value
    return out


def merged_config(configs: list[Path], runs: Path) -> Path:
    """The one config of ``configs`` (a base, then overlays): the file itself when alone,
    else their merge written to ``runs/config.yaml`` (what the runs and controls read)."""
    import yaml

    if len(configs) == 1:
        return configs[0]
    cfg: dict = {}
    for path in configs:
        cfg = merge(cfg, yaml.safe_load(path.read_text()) or {})
    out = runs / "config.yaml"
    sources = " + ".join(str(c) for c in configs)
    out.write_text(
        f"# merged by experiments/learning/run.py: {sources}\n"
        + yaml.safe_dump(cfg, sort_keys=False)
    )
    return out


def _mean(rows: list[dict], key: str) -> float:
    vals = [float(r[key]) for r in rows if r.get(key)]
    return sum(vals) / len(vals) if vals else float("nan")


def rl_run(seed: int, args, runs: Path) -> dict:
    import yaml

    name = f"rl_seed{seed}" + (f"_{args.router.rsplit('.', 1)[-1]}" if args.router else "")
    folder = runs / name
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    cfg = run_config(seed, folder, Path(args.config))
    if args.router:
        cfg["model"]["router"] = {"class_path": args.router}
    (folder / "config.yaml").write_text(yaml.safe_dump(cfg, sort_keys=False))
    before = provenance(args.threads)
    stats = child(
        ["slca_lightning.cli.commands", "fit", "--config", str(folder / "config.yaml")],
        folder / "fit.log",
        args.threads,
    )
    train, evals = read_metrics(folder)
    cache = Path(os.environ.get("SLCA_CACHE") or Path.home() / ".cache" / "slca_lightning")
    # e.g. suite-pooled-sft-shipped-<sha>/slca_shipped_warm_start.json (or a trained cache)
    pattern = f"{cfg['model']['model']}-*/slca_*warm_start.json"
    done_files = sorted(cache.glob(pattern), key=os.path.getmtime)
    if done_files:  # the newest warm start is this run's: its SFT time and settings
        (folder / "warm_start.json").write_text(done_files[-1].read_text())
    first, last = evals[0], evals[-1]
    result = {
        "name": name,
        "seed": seed,
        "router": cfg["model"]["router"]["class_path"],
        "model": cfg["model"]["model"],
        **stats,
        "rl_seconds": round(sum(float(r["time/step"]) for r in train), 1),
        "steps": len(train),
        "reward_first10": _mean(train[:10], "reward/total"),
        "reward_last10": _mean(train[-10:], "reward/total"),
        "before": {
            k: float(first[f"eval/in_domain/{k}"])
            for k in METRICS
            if first.get(f"eval/in_domain/{k}")
        },
        "after": {
            k: float(last[f"eval/in_domain/{k}"])
            for k in METRICS
            if last.get(f"eval/in_domain/{k}")
        },
        "before_step": int(first["step"]),
        "after_step": int(last["step"]),
        "curve": [  # every held-out evaluation of the run (the README's plot)
            {
                "step": int(e["step"]),
                **{
                    k: float(e[f"eval/in_domain/{k}"])
                    for k in METRICS
                    if e.get(f"eval/in_domain/{k}")
                },
            }
            for e in evals
        ],
        "provenance": before,
        "load_average_after": os.getloadavg(),
    }
    done.write_text(json.dumps(result, indent=2))
    return result


def control_run(seed: int, seconds: float, args, runs: Path) -> dict:
    folder = runs / f"control_seed{seed}"
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    argv = [
        "experiments.learning.control", "--seconds", str(seconds), "--seed", str(seed),
        "--out", str(done), "--config", str(args.config),
    ]  # fmt: skip
    stats = child(argv, folder / "control.log", args.threads)
    result = json.loads(done.read_text())
    result.update(stats, provenance=provenance(args.threads))
    done.write_text(json.dumps(result, indent=2))
    return result


def train(args, runs: Path) -> None:
    """Each seed's RL run and, unless ``--no-control``, its control (finished ones are read)."""
    for seed in args.seeds:
        rl = rl_run(seed, args, runs)
        print(
            f"seed {seed}: RL {rl['wall_s']:.0f}s, tool accuracy {rl['before'].get('tool_accuracy'):.3f} -> {rl['after'].get('tool_accuracy'):.3f}",
            flush=True,
        )
        if not args.no_control:
            ctl = control_run(seed, rl["rl_seconds"], args, runs)
            print(
                f"seed {seed}: control {ctl['wall_s']:.0f}s, tool accuracy -> {ctl['metrics'].get('tool_accuracy'):.3f}",
                flush=True,
            )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    p.add_argument(
        "--config",
        nargs="+",
        default=[str(CONFIG)],
        help="the RL config (default: the quickstart), then overlays merged over it, e.g. "
        "configs/quickstart.yaml configs/overlays/clean_demos.yaml",
    )
    p.add_argument("--router", default=None, help="another model.router class path")
    p.add_argument("--no-control", action="store_true")
    p.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "1")))
    p.add_argument("--runs", default=str(HERE / "results" / "quickstart"))
    p.add_argument("--out", default=str(HERE / "REPORT.md"))
    p.add_argument("--embed", default=None, help="also rewrite the README's learning block")
    p.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild --out (and --embed) from the result.json files in --runs; run nothing",
    )
    args = p.parse_args(argv)
    runs = Path(args.runs)
    if args.report_only:
        if not runs.is_dir():
            p.error(f"--report-only: no runs folder {runs}")
    else:
        runs.mkdir(parents=True, exist_ok=True)
        args.config = merged_config([Path(c) for c in args.config], runs)
        train(args, runs)
    from experiments.learning import report

    report.plot(runs)
    Path(args.out).write_text(report.render(runs, ROOT))
    print(f"wrote {args.out}")
    if args.embed:
        report.embed(Path(args.embed), report.readme_block(runs))
        print(f"embedded the figures in {args.embed}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
