"""The credit-assignment study: a dose-response in summary-judge noise σ, one command.

::

    python experiments/credit_assignment/run.py                 # the full study, resumable run by run
    python experiments/credit_assignment/run.py --quick --out /tmp/ca.md   # every path, 1-2 min

The default design (``--design dose-response``): SLCA-GRPO and GRPO at σ ∈ {0, 0.5, 1, 2}
and ToolPO, RLTR and MT-GRPO at σ ∈ {0, 0.5}, each × seeds 0–4 (70 runs), all from the
shipped ``suite-pooled-sft`` weights; the SLCA/GRPO pairs of every σ run first, seed by
seed, so the first runs give a first reading of the whole curve. ``--design grid`` is the
full cross ``--methods`` × ``--noise`` × ``--seeds`` (the archived studies' shape).

Every run is ``slca fit --config experiments/credit_assignment/base.yaml`` plus a per-run
overlay that sets only the router (the method), the judge's noise level and the seed, so
the methods are matched: same warm start, tasks, batch, caps, optimiser and step budget,
same reward head (HierR over a reply-only rule judge plus seeded noise, with the ToolPO and
RLTR channels computed for everyone). Runs go through ``slca_lightning.cli.commands.main`` in
worker processes (``--workers``, each with ``cores / workers`` torch threads); each writes
``<runs>/noise<σ>/<method>/seed<k>/`` (the overlay, ``metrics.csv``, a log), and
``report.py`` turns them into the Markdown report, the dose-response plot and the curves.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import contextlib
import json
import multiprocessing
import os
import shlex
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from experiments.credit_assignment import report  # noqa: E402
from experiments.credit_assignment.checks import ROUTERS  # noqa: E402
from experiments.credit_assignment.summary import load_runs, warm_start_id  # noqa: E402

#: The estimators of METHOD §5, each one ``model.router`` line.
METHODS = ROUTERS

#: The dose-response design, in the order its runs are made: each phase is (methods, σ
#: levels), its runs seed by seed, σ by σ, method by method. SLCA and GRPO at every σ come
#: first (the two runs of a pair side by side on two workers): after the first seed the
#: whole curve has one reading, after two the first intervals.
DOSE_RESPONSE: tuple[tuple[tuple[str, ...], tuple[float, ...]], ...] = (
    (("slca", "grpo"), (0.0, 0.5, 1.0, 2.0)),
    (("toolpo", "rltr", "mtgrpo"), (0.0, 0.5)),
)
DESIGNS = ("dose-response", "grid")


#: ``base.yaml``: its InDomainEval entry (held-out episodes scored with the judge's
#: noise-free base, so Success@τ means the same at every noise level) is the one every run
#: uses, with the run's own evaluation schedule.
BASE = HERE / "base.yaml"


def _evaluation_callback(job: Job) -> dict:
    import yaml

    (callback,) = yaml.safe_load(BASE.read_text())["trainer"]["callbacks"]
    callback["init_args"].update(
        num_tasks=job.eval_tasks, every_n_steps=job.eval_every, at_start=True, at_end=True
    )
    return callback


@dataclass
class Job:
    """One training run of the grid."""

    method: str
    noise: float
    seed: int
    steps: int
    eval_every: int
    eval_tasks: int
    folder: str
    overrides: dict = field(default_factory=dict)  # extra dotted settings (``--quick``)


def _set(tree: dict, dotted: str, value) -> None:
    keys = dotted.split(".")
    for k in keys[:-1]:
        tree = tree.setdefault(k, {})
    tree[keys[-1]] = value


def overlay(job: Job) -> dict:
    """The per-run config layered over ``base.yaml``: router, noise, seed, budget, paths."""
    out: dict = {}
    settings = {
        "seed_everything": job.seed,
        "trainer.max_steps": job.steps,
        "trainer.default_root_dir": job.folder,
        "trainer.logger": [
            {
                "class_path": "lightning.pytorch.loggers.CSVLogger",
                "init_args": {
                    "save_dir": job.folder,
                    "name": "logs",
                    "version": 0,
                    "flush_logs_every_n_steps": 6,
                },
            }
        ],
        "trainer.callbacks": [_evaluation_callback(job)],
        "model.router": {"class_path": METHODS[job.method]},
        "model.seed": job.seed,
        "model.reward_head.init_args.judge.init_args.noise_std": job.noise,
        "model.reward_head.init_args.judge.init_args.seed": job.seed,
        "data.seed": job.seed,
        **job.overrides,
    }
    for key, value in settings.items():
        _set(out, key, value)
    return out


def run_job(job: Job) -> dict:
    """Train one run in this process; return its summary (also written as ``run.json``)."""
    import yaml

    folder = Path(job.folder)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "overlay.yaml").write_text(yaml.safe_dump(overlay(job), sort_keys=False))
    args = ["fit", "--config", str(BASE), "--config", str(folder / "overlay.yaml")]
    t0 = time.perf_counter()
    error = None
    gold = None
    with (
        open(folder / "fit.log", "w") as log,
        contextlib.redirect_stdout(log),
        contextlib.redirect_stderr(log),
    ):
        try:
            from slca_lightning.cli.commands import main

            cli = main(args)
            heldout = cli.datamodule.source.heldout()[: job.eval_tasks]
            gold = sum(sum(len(step) for step in t.gold_calls) for t in heldout) / len(heldout)
        except Exception as exc:  # a failed run is reported, never hides the others
            import traceback

            traceback.print_exc()
            error = f"{type(exc).__name__}: {exc}"
    summary = {
        **asdict(job),
        "seconds": round(time.perf_counter() - t0, 1),
        "error": error,
        "gold_calls_per_episode": gold,
        "command": "slca " + " ".join(shlex.quote(a) for a in args),
    }
    (folder / "run.json").write_text(json.dumps(summary, indent=2))
    return summary


def finished(job: Job) -> bool:
    """True when ``job`` already ran to the end without error (its ``run.json`` and metrics
    are there and its settings are the same): a resumed study never redoes it."""
    folder = Path(job.folder)
    record = folder / "run.json"
    if not record.is_file() or not list(folder.glob("logs/version_*/metrics.csv")):
        return False
    try:
        done = json.loads(record.read_text())
    except ValueError:
        return False
    # the folder itself is where the record lies: a moved checkout keeps its finished runs
    same = all(done.get(k) == v for k, v in asdict(job).items() if k != "folder")
    return same and not done.get("error")


def other_starts(jobs: list[Job], start: str) -> dict[str, list[str]]:
    """Finished runs of ``jobs`` that began from other warm-start weights than ``start``
    (a :func:`~experiments.credit_assignment.summary.warm_start_id`, or a SHA-256 whose
    first 10 digits are one), read from their ``provenance.json``: id → folders. A warm
    start rebuilt on another machine can come out with other weights, and pairing across
    them confounds the study; a shipped warm start is the same weights on every machine."""
    out: dict[str, list[str]] = {}
    for job in jobs:
        prov = Path(job.folder) / "logs" / "version_0" / "provenance.json"
        if not finished(job) or not prov.is_file():
            continue
        theirs = warm_start_id(json.loads(prov.read_text()))
        if theirs and theirs != start[:10]:
            out.setdefault(theirs, []).append(job.folder)
    return out


def study_model(args) -> str:
    """The model every run of the study starts from (``base.yaml``'s, or ``--set``'s)."""
    import yaml

    return args.overrides.get("model.model") or yaml.safe_load(BASE.read_text())["model"]["model"]


def start_of(model: str, allow_unshipped: bool) -> str | None:
    """The warm-start id (:func:`~experiments.credit_assignment.summary.warm_start_id`) that
    ``model``'s runs will record, or None when ``model`` is no built-in warm start (a
    random model, a folder). A built-in warm start that is not shipped in this checkout
    stops the study unless ``allow_unshipped``: it would be trained here, and a warm start
    trained on other CPUs or library versions comes out with other weights."""
    from slca_lightning.cli.provenance import folder_digest
    from slca_lightning.models import shipped
    from slca_lightning.models.names import warm_start_base
    from slca_lightning.models.warm_start import warm_start

    base = warm_start_base(model)
    if base is None:
        return None
    if not shipped.is_shipped(model) and not allow_unshipped:
        raise SystemExit(
            f"{model} is not shipped in this checkout ({shipped.WEIGHTS_DIR / (model + '.json')} "
            "is missing): the study's runs all begin from the shipped weights, identical on "
            "every machine, and a warm start trained here would not be. Install the package "
            "data (slca_lightning/models/weights/README.md), or pass --mixed-starts to train "
            "and use this machine's own."
        )
    folder = warm_start(base=base)  # shipped: checked against its sha256, nothing trains
    return warm_start_id({"model_folder": folder, "model_sha256": folder_digest(folder)})


def _init_worker(threads: int) -> None:
    import torch

    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # what slca fit's thread setting honours
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def cells(args) -> list[tuple[int, float, str]]:
    """The study's runs as (seed, σ, method), in the order they are made.

    ``dose-response``: the phases of :data:`DOSE_RESPONSE` one after the other, each seed by
    seed, σ by σ; ``--methods`` and ``--noise`` (when given) keep only their cells.
    ``grid``: ``--methods`` × ``--noise`` × ``--seeds``, interleaved so that every method's
    runs are spread over the whole study."""
    if args.design == "grid":
        return [(k, n, m) for k in args.seeds for n in args.noise for m in args.methods]
    keep_m = set(args.methods) if args.methods else None
    keep_n = set(args.noise) if args.noise else None
    out = []
    for methods, noises in DOSE_RESPONSE:
        for seed in args.seeds:
            for noise in noises:
                for method in methods:
                    if (keep_m is None or method in keep_m) and (keep_n is None or noise in keep_n):
                        out.append((seed, noise, method))
    return out


def jobs_for(args) -> list[Job]:
    """The study's runs (:func:`cells`), each a :class:`Job` with its folder."""
    jobs = []
    for seed, noise, method in cells(args):
        folder = Path(args.runs) / f"noise{noise:g}" / method / f"seed{seed}"
        jobs.append(
            Job(
                method,
                noise,
                seed,
                args.steps,
                args.eval_every,
                args.eval_tasks,
                str(folder),
                dict(args.overrides),
            )
        )
    return jobs


QUICK = {  # every code path once, in seconds: random tiny model, tiny shapes
    "model.model": "tiny",
    "data.prompts_per_step": 2,
    "data.group_size": 2,
    "data.max_turns": 2,
    "data.max_new_tokens": 8,
    "data.max_response_tokens": 32,
    "data.tasks.init_args.n_train": 8,
    "data.tasks.init_args.n_heldout": 4,
}


def parse(argv: list[str] | None = None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument(
        "--design",
        choices=DESIGNS,
        default="dose-response",
        help="dose-response: SLCA and GRPO at σ 0, 0.5, 1, 2 and ToolPO, RLTR, MT-GRPO at σ 0, "
        "0.5, × --seeds (70 runs; --methods/--noise keep only their cells); grid: --methods × "
        "--noise × --seeds (default σ 0, 0.5)",
    )
    p.add_argument(
        "--methods", nargs="+", default=None, choices=list(METHODS), help="default: all five"
    )
    p.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2, 3, 4])
    p.add_argument("--noise", nargs="+", type=float, default=None, help="σ levels (see --design)")
    p.add_argument("--steps", type=int, default=40, help="rollout batches (= optimiser steps)")
    p.add_argument("--eval-every", type=int, default=10)
    p.add_argument("--eval-tasks", type=int, default=64)
    p.add_argument(
        "--target-metric",
        default="tool_call_validity",
        help="held-out metric of 'steps to target' (process: METHOD §4.1's tool-call score; "
        "tool_accuracy: every gold call exactly right; tool_call_validity: calls the agent "
        "loop accepts, what the pooled warm start has to learn)",
    )
    p.add_argument(
        "--target",
        type=float,
        default=0.9,
        help="its target value (suite-pooled-sft: validity 0.78 at step 0 in results_pooled/)",
    )
    p.add_argument("--workers", type=int, default=2, help="runs trained at once")
    p.add_argument(
        "--threads", type=int, default=None, help="torch threads per run (default: cores / workers)"
    )
    p.add_argument(
        "--runs",
        default=None,
        help="run folders (default results_shipped/, committed: a resumed study keeps every "
        "finished run; the archived studies: results/, results_pooled/; with --quick: "
        "<out>_runs beside --out)",
    )
    p.add_argument(
        "--out",
        default=None,
        help="the report (default REPORT.md here; with --quick: a temporary folder's)",
    )
    p.add_argument(
        "--quick",
        action="store_true",
        help="seed 0, 2 steps, random tiny model; never writes the study's own folders",
    )
    p.add_argument("--report-only", action="store_true", help="rebuild the report from --runs")
    p.add_argument(
        "--mixed-starts",
        action="store_true",
        help="resume even when finished runs began from other warm-start weights, or start "
        "from a warm start this checkout does not ship (trained here)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra dotted config setting for every run (YAML value), e.g. model.learning_rate=1e-4",
    )
    args = p.parse_args(argv)
    if args.design == "grid":
        args.methods = args.methods or list(METHODS)
        args.noise = args.noise or [0.0, 0.5]
    if args.quick:  # smoke runs never land in the committed results or report
        scratch = Path(tempfile.gettempdir()) / "credit_assignment_quick"
        args.out = args.out or str(scratch / "REPORT.md")
        args.runs = args.runs or str(Path(args.out).with_name(f"{Path(args.out).stem}_runs"))
    else:
        args.out = args.out or str(HERE / "REPORT.md")
        args.runs = args.runs or str(HERE / "results_shipped")
    args.overrides = dict(QUICK) if args.quick else {}
    if args.quick:
        args.seeds, args.steps, args.eval_every, args.eval_tasks = [0], 2, 1, 4
    import yaml

    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            p.error(f"--set expects KEY=VALUE, got {item!r}")
        parsed = yaml.safe_load(value)
        if isinstance(parsed, str):  # YAML 1.1 reads "1e-4" as a string
            with contextlib.suppress(ValueError):
                parsed = float(parsed)
        args.overrides[key] = parsed
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    argv_text = " ".join(shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
    command = f"python experiments/credit_assignment/run.py {argv_text}".strip()
    jobs = jobs_for(args)
    if not jobs:
        raise SystemExit(
            f"no run of the {args.design} design matches --methods {args.methods} "
            f"--noise {args.noise}"
        )
    t0 = time.perf_counter()
    if not args.report_only:
        if not args.quick:  # the shared warm start, written once before the workers start
            start = start_of(study_model(args), args.mixed_starts)
            others = other_starts(jobs, start) if start else {}
            if others and not args.mixed_starts:
                where = "; ".join(f"{k}: {len(v)} runs, e.g. {v[0]}" for k, v in others.items())
                raise SystemExit(
                    f"finished runs in {args.runs} began from other warm-start weights than "
                    f"this machine's ({start}): {where}. Start a fresh --runs folder, or "
                    "pass --mixed-starts to continue (the report pairs only runs from the same "
                    "weights)."
                )
        cores = os.cpu_count() or 1
        workers = max(1, min(args.workers, len(jobs)))
        threads = args.threads or max(1, cores // workers)
        todo = [j for j in jobs if not finished(j)]
        print(
            f"{len(jobs)} runs ({len(jobs) - len(todo)} already finished, kept), "
            f"{workers} workers × {threads} threads",
            flush=True,
        )
        ctx = multiprocessing.get_context("spawn")
        with cf.ProcessPoolExecutor(workers, ctx, _init_worker, (threads,)) as pool:
            futures = {pool.submit(run_job, job): job for job in todo}
            for done in cf.as_completed(futures):
                s = done.result()
                status = "FAILED " + s["error"] if s["error"] else "ok"
                print(
                    f"[{time.perf_counter() - t0:6.0f}s] {s['method']:>6} noise={s['noise']:g} "
                    f"seed={s['seed']} {s['seconds']:.0f}s {status}",
                    flush=True,
                )
    wall = time.perf_counter() - t0
    record = Path(args.runs) / "study.json"
    rebuilt_by, resumed = None, None
    if args.report_only and record.is_file():  # keep the command and wall time of the study
        study = json.loads(record.read_text())
        rebuilt_by, command, wall = command, study["command"], study["wall_seconds"]
        resumed = (study["ran"], study["kept"]) if study.get("kept") else None
    elif not args.report_only:
        # a resumed study: the wall time is this command's, for the runs it ran
        ran, kept = len(todo), len(jobs) - len(todo)
        resumed = (ran, kept) if kept else None
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(
            json.dumps(
                {"command": command, "wall_seconds": round(wall, 1), "ran": ran, "kept": kept}
            )
        )
    runs = load_runs([j.folder for j in jobs])
    text = report.write_report(
        runs,
        out=args.out,
        command=command,
        target=args.target,
        target_metric=args.target_metric,
        rebuilt_by=rebuilt_by,
        wall_seconds=None if args.report_only and not record.is_file() else wall,
        resumed=resumed,
        quick=args.quick,
        planned=len(jobs),
    )
    print(text.split("\n## ")[0][:2000])
    failed = [r for r in runs if r["error"]]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
