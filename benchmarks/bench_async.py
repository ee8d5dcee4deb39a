"""Whole-step throughput of ``slca fit`` with asynchronous rollouts: ``data.max_staleness: 1`` vs 0.

Two real fits of the quickstart (``configs/quickstart.yaml``: HFEngine with prefix sharing,
the agent loop over the synthetic suite's tools through the schema-guided simulator,
HierarchicalReward, MaskRunSegmenter, SLCARouter, the k3 KL reference; 4 prompts × 8
rollouts, ≤ 3 turns; its evaluation callbacks, loggers and checkpoints off), alternated round
by round:

- **sync**: ``data.max_staleness: 0``, the quickstart as shipped: each batch is generated
  when training asks for it, by the latest weights, while the trainer waits;
- **async**: ``data.max_staleness: 1`` and ``model.tis_cap: 2.0``
  (:mod:`slca_lightning.rollout.async_stream`): a worker thread with its own copy of the
  policy generates batch ``i + 1`` while the trainer updates on batch ``i``. It also
  recomputes the old log-probs (``time/old_logprobs``: one no-grad forward the sync run
  skips, since the batch was sampled by older weights) and weights the loss by the
  truncated importance ratio.

Each fit runs in its own child process (fresh state, its own peak RSS from ``os.wait4``) with
``--threads T`` and ``OMP_NUM_THREADS=T``; with T = 1 the worker's generation runs on one
core and the trainer's update on another, so the measurement wants two cores free of other
work (with the second core busy, the ratio measures the contention instead).

Measured, per fit: the wall time between the end of the warm-up step (the first) and the
end of the last of ``steps`` further steps, the tokens those steps trained (non-pad tokens of
each batch: prompt, replies and tool results), and each step's logged ``time/rollout`` (the
agent loop's wall time, on the worker's thread for async), ``time/rollout_wait`` (async: how
long the trainer waited for the batch; sync waits for the whole rollout), ``time/old_logprobs``,
``time/update`` and ``rollout/staleness`` (the trainer's step minus the step of the weights
that sampled the batch). A round runs one fit of each system, in alternating order; the
ratio is the median over rounds of async ÷ sync of the same round (:mod:`_timing`'s
pairing), with its per-round range. Goal: async tokens/s ≥ 1.4 × sync.

::

    python benchmarks/bench_async.py --threads 1 --out benchmarks/results/async_suite-pooled-sft.json
    python benchmarks/bench_async.py --model tiny --prompts 1 --group 2 --turns 1 \\
        --new-tokens 8 --steps 1 --rounds 1          # smoke run: every path once, seconds

Defaults: 4 steps after a warm-up per fit, 5 rounds (10 fits): about 8–10 minutes on a 2-core
box with the second core idle.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import child_json, run_record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
QUICKSTART = ROOT / "configs" / "quickstart.yaml"

#: async tokens/s ÷ sync tokens/s the comparison checks for.
GOAL = 1.4
#: The per-step metrics each fit reports (medians over its measured steps).
STEP_METRICS = (
    "time/rollout",
    "time/generate",
    "time/rollout_wait",
    "time/old_logprobs",
    "time/ref_logprobs",
    "time/update",
    "rollout/staleness",
    "rollout/logprob_mismatch",
)


@dataclass
class AsyncShape:
    """Settings of the comparison; None keeps the quickstart's value."""

    model: str = "suite-pooled-sft"
    prompts: int | None = None  # data.prompts_per_step (quickstart: 4)
    group: int | None = None  # data.group_size (8)
    turns: int | None = None  # data.max_turns (3)
    new_tokens: int | None = None  # data.max_new_tokens (96)
    steps: int = 4  # measured steps per fit, after one warm-up step
    rounds: int = 5
    threads: int = 1
    staleness: int = 1
    tis_cap: float = 2.0


def fit_args(shape: AsyncShape, staleness: int, root: str, extra: tuple = ()) -> list[str]:
    """``slca fit`` arguments: the quickstart without callbacks, loggers or checkpoints,
    ``shape.steps + 1`` steps, ``staleness`` (with ``model.tis_cap`` when > 0)."""
    args = [
        "--config", str(QUICKSTART), f"--model.model={shape.model}",
        f"--trainer.max_steps={shape.steps + 1}", "--trainer.callbacks=[]",
        "--trainer.logger=false", "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={root}", f"--data.max_staleness={staleness}",
    ]  # fmt: skip
    if shape.threads:
        args.append(f"--threads={shape.threads}")
    if staleness:
        args.append(f"--model.tis_cap={shape.tis_cap}")
    overrides = {
        "prompts_per_step": shape.prompts, "group_size": shape.group,
        "max_turns": shape.turns, "max_new_tokens": shape.new_tokens,
    }  # fmt: skip
    args += [f"--data.{k}={v}" for k, v in overrides.items() if v is not None]
    return args + list(extra)


def fit_once(shape: AsyncShape, staleness: int, extra: tuple = ()) -> dict:
    """One ``slca fit`` in this process; its measured steps' figures (see module docstring)."""
    import lightning as L
    import torch

    from slca_lightning.cli.commands import main

    class Recorder(L.Callback):
        def __init__(self) -> None:
            self.marks: list[float] = []
            self.tokens: list[int] = []
            self.metrics: list[dict[str, float]] = []

        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            self.marks.append(time.perf_counter())
            self.tokens.append(int(batch.attention_mask.sum()))
            got = trainer.callback_metrics
            self.metrics.append({k: float(got[k]) for k in STEP_METRICS if k in got})

    with tempfile.TemporaryDirectory(prefix="slca_bench_async_") as root:
        cli = main(fit_args(shape, staleness, root, extra), run=False)
        if shape.threads:
            torch.set_num_threads(shape.threads)  # main() restores the caller's count
        rec = Recorder()
        cli.trainer.callbacks.append(rec)
        cli.trainer.fit(cli.model, cli.datamodule)
        dm = cli.datamodule
        setting = {
            "prompts": dm.prompts_per_step, "group": dm.group_size,
            "turns": int(dm.caps["max_turns"]), "new_tokens": int(dm.sampling.max_new_tokens),
            "device": str(cli.model.device),
        }  # fmt: skip
    if len(rec.marks) != shape.steps + 1:
        raise RuntimeError(f"expected {shape.steps + 1} steps, the fit ran {len(rec.marks)}")
    measured = rec.metrics[1:]  # the first step is the warm-up
    return {
        "staleness_setting": staleness,
        "seconds": rec.marks[-1] - rec.marks[0],
        "tokens": sum(rec.tokens[1:]),
        "steps": shape.steps,
        "medians": {
            k: statistics.median(m[k] for m in measured)
            for k in STEP_METRICS
            if all(k in m for m in measured)
        },
        "staleness": [m.get("rollout/staleness", 0.0) for m in measured],
        "setting": setting,
        "threads": torch.get_num_threads(),
    }


# -- the parent: child processes alternated round by round -------------------------------------
def run_child(name: str, shape: AsyncShape) -> dict:
    """One fit in a fresh child process; its figures plus its peak RSS (``os.wait4``)."""
    staleness = 0 if name == "sync" else shape.staleness
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", str(staleness),
           "--shape", json.dumps(asdict(shape))]  # fmt: skip
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    if shape.threads:
        env["OMP_NUM_THREADS"] = str(shape.threads)
    out, peak_mb = child_json(cmd, env, ROOT, f"{name} fit")
    return {**out, "peak_rss_mb": peak_mb}


def summarise(got: dict[str, list[dict]]) -> dict:
    """Per-system medians over rounds and the paired async ÷ sync ratios."""
    med = statistics.median
    out: dict = {"systems": {}}
    for name, fits in got.items():
        per = {
            "tokens_per_s": med(f["tokens"] / f["seconds"] for f in fits),
            "steps_per_s": med(f["steps"] / f["seconds"] for f in fits),
            "step_seconds": med(f["seconds"] / f["steps"] for f in fits),
            "tokens_per_step": med(f["tokens"] / f["steps"] for f in fits),
            "peak_rss_mb": max(f["peak_rss_mb"] for f in fits),
        }
        for key in STEP_METRICS:
            values = [f["medians"][key] for f in fits if key in f["medians"]]
            per[key] = med(values) if values else None
        staleness = [s for f in fits for s in f["staleness"]]
        per["staleness_mean"] = sum(staleness) / len(staleness)
        per["staleness_max"] = max(staleness)
        # what the trainer waited for: the whole rollout (sync) or time/rollout_wait (async)
        per["wait"] = per["time/rollout_wait"] if per["time/rollout_wait"] is not None else (
            per["time/rollout"]
        )  # fmt: skip
        out["systems"][name] = per
    for what in ("tokens", "steps"):
        ratios = [
            (a[what] / a["seconds"]) / (s[what] / s["seconds"])
            for a, s in zip(got["async"], got["sync"], strict=True)
        ]
        out[f"{what}_per_s_ratio"] = med(ratios)
        out[f"{what}_per_s_ratio_range"] = (min(ratios), max(ratios))
    out["goal"] = GOAL
    out["goal_met"] = out["tokens_per_s_ratio"] >= GOAL
    return out


def _f(value, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def render(result: dict) -> str:
    """The Markdown report: header lines, the table, the ratio line."""
    sh, s, m = result["shape"], result["summary"], result["machine"]
    st = result["setting"]
    load = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = [
        f"Asynchronous rollouts: `slca fit` (configs/quickstart.yaml), `{sh['model']}`, "
        f"{st['prompts']} prompts × {st['group']} rollouts, ≤ {st['turns']} turns × "
        f"{st['new_tokens']} new tokens; {sh['steps']} steps after a warm-up step per fit, "
        f"{sh['rounds']} alternated rounds, each fit in its own process; device {st['device']}",
        "",
        f"Machine: {m['cpus']} × {m['cpu']}; torch threads {result['threads']} per process "
        f"(OMP_NUM_THREADS); load average before {load(result['load_before'])}, after "
        f"{load(result['load_after'])}; {result['date']}, {result['wall_s'] / 60:.1f} min",
        "",
        "| system | tokens/s | steps/s | s/step | tokens/step | time/rollout s | trainer waits s "
        "| time/old_logprobs s | time/update s | rollout/staleness mean (max) | peak RSS MB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, label in (("sync", "sync (max_staleness 0)"),
                        ("async", f"async (max_staleness {sh['staleness']}, tis_cap {sh['tis_cap']})")):  # fmt: skip
        p = s["systems"][name]
        wait = _f(p["wait"]) + (" (= rollout)" if name == "sync" else " (time/rollout_wait)")
        lines.append(
            f"| {label} | {p['tokens_per_s']:.0f} | {p['steps_per_s']:.3f} | "
            f"{p['step_seconds']:.2f} | {p['tokens_per_step']:.0f} | {_f(p['time/rollout'])} | "
            f"{wait} | {_f(p['time/old_logprobs'])} | {_f(p['time/update'])} | "
            f"{p['staleness_mean']:.2f} ({p['staleness_max']:.0f}) | {p['peak_rss_mb']:.0f} |"
        )
    lo, hi = s["tokens_per_s_ratio_range"]
    slo, shi = s["steps_per_s_ratio_range"]
    lines += [
        "",
        f"async ÷ sync: tokens/s **{s['tokens_per_s_ratio']:.2f}×** (per-round {lo:.2f}–{hi:.2f}), "
        f"steps/s {s['steps_per_s_ratio']:.2f}× (per-round {slo:.2f}–{shi:.2f}); goal tokens/s "
        f"≥ {GOAL}×: {'met' if s['goal_met'] else 'NOT met'}",
    ]
    return "\n".join(lines)


def run(shape: AsyncShape) -> dict:
    """Alternate the two fits for ``shape.rounds`` rounds; the figures and the report."""
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    got: dict[str, list[dict]] = {"sync": [], "async": []}
    for r in range(shape.rounds):
        order = ("sync", "async") if r % 2 == 0 else ("async", "sync")
        for name in order:
            got[name].append(run_child(name, shape))
            print(
                f"round {r + 1}/{shape.rounds} {name}: "
                f"{got[name][-1]['tokens'] / got[name][-1]['seconds']:.0f} tokens/s",
                file=sys.stderr,
                flush=True,
            )
    result = run_record(
        asdict(shape), got, t0, load_before,
        setting=got["sync"][0]["setting"], threads=got["sync"][0]["threads"],
    )  # fmt: skip
    result["summary"] = summarise(got)
    result["markdown"] = render(result)
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="suite-pooled-sft", help="name, source or HF folder")
    p.add_argument("--prompts", type=int, default=None, help="prompts per step (quickstart: 4)")
    p.add_argument("--group", type=int, default=None, help="rollouts per prompt (8)")
    p.add_argument("--turns", type=int, default=None, help="max assistant turns (3)")
    p.add_argument("--new-tokens", type=int, default=None, help="per turn (96)")
    p.add_argument("--steps", type=int, default=4, help="measured steps per fit (+1 warm-up)")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--threads", type=int, default=1, help="torch threads per process")
    p.add_argument("--staleness", type=int, default=1, help="the async fit's max_staleness")
    p.add_argument("--tis-cap", type=float, default=2.0)
    p.add_argument("--out", default=None, help="write the figures and the table as JSON here")
    p.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    p.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child is not None:  # one fit, in this (child) process
        sys.path.insert(0, str(ROOT))
        print("RESULT " + json.dumps(fit_once(AsyncShape(**json.loads(a.shape)), a.child)))
        return {}
    if a.steps < 1 or a.rounds < 1 or a.staleness < 1:
        p.error("--steps, --rounds and --staleness must be ≥ 1")
    shape = AsyncShape(
        model=a.model, prompts=a.prompts, group=a.group, turns=a.turns, new_tokens=a.new_tokens,
        steps=a.steps, rounds=a.rounds, threads=a.threads, staleness=a.staleness,
        tis_cap=a.tis_cap,
    )  # fmt: skip
    result = run(shape)
    print(result["markdown"])
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
