"""All side-by-side benchmarks in one command, written as one Markdown table.

::

    python benchmarks/run_all.py [--quick] [--out benchmarks/RESULTS.md] [--embed README.md]

1. time per phase of an ``slca fit`` step (:mod:`bench_fit`), as fractions of the step;
2. training-step throughput, ``slca fit`` vs TRL 1.16.0 ``GRPOTrainer.train()``, whole steps
   with sampling, alternated (:mod:`bench_step`); and the update alone, slca vs TRL
   (:mod:`bench_update`);
3. framework overhead: segmenter + reward head + router (+ the contamination / leakage
   diagnostics) time ÷ step time (:mod:`bench_fit`);
4. peak memory, naive ÷ chunked token log-probs (:mod:`logprob_memory`, fresh subprocesses);
5. ``HFEngine`` rollout tokens/s ÷ a bare ``model.generate`` loop, alternated
   (:mod:`bench_generation`), distinct prompts and G=4 shared prompts;
6. vLLM on a GPU: measured only where a GPU is present (never on CPU-only machines).

Times come from a shared machine: systems are alternated in one process and compared by
the median of paired per-round ratios (:mod:`_timing`); absolute seconds are shown for
scale only. ``--quick`` shrinks every shape so that every code path runs once in seconds
(smoke test); its figures mean nothing.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import bench_fit  # noqa: E402
import bench_generation  # noqa: E402
import bench_step  # noqa: E402
import bench_update  # noqa: E402

COLUMNS = ("#", "measure", "setting / what is compared", "slca", "baseline", "ratio", "goal")


def shapes(quick: bool) -> dict:
    """The benchmark shapes: full (defaults) or ``--quick`` (every path once, tiny)."""
    if quick:
        return {
            "fit": bench_fit.FitShape(
                model="tiny",
                steps=1,
                prompts_per_step=1,
                group_size=2,
                max_turns=1,
                max_new_tokens=4,
                micro_batch_size=4,
                n_train=4,
            ),
            "step": bench_step.StepShape(
                prompts_per_step=1, group_size=2, max_new_tokens=4, steps=1, rounds=1, n_train=4
            ),
            "update": bench_update.UpdateShape(
                groups=1, group_size=2, prompt_len=48, completion_len=8, rounds=1, warmup=0
            ),
            "generation": bench_generation.GenerationShape(
                rows=4, prompt_len=80, max_new_tokens=4, rounds=1, warmup=0
            ),
            "memory": {"B": 2, "T": 64, "V": 2048, "chunk_size": 32},
        }
    return {
        "fit": bench_fit.FitShape(steps=3),
        "step": bench_step.StepShape(),
        "update": bench_update.UpdateShape(),
        "generation": bench_generation.GenerationShape(),
        "memory": {"B": 4, "T": 2048, "V": 32000, "chunk_size": 1024},
    }


def memory_rows(mem: dict) -> list[dict]:
    """Naive vs chunked Δ peak RSS (bf16 logits), fwd and fwd+bwd: ``logprob_memory.py``.

    Run as its own small process, before this one loads any model: on Linux a child's
    ``ru_maxrss`` starts at its parent's RSS at fork time, so a big parent would inflate it.
    """
    cmd = [sys.executable, str(HERE / "logprob_memory.py"), "--dtypes", "bf16"]
    cmd += [f"--{k.replace('_', '-')}={v}" for k, v in mem.items()]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{proc.stdout}{proc.stderr}")
    out = []
    for line in proc.stdout.splitlines():
        if line.startswith("| bf16 |"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            out.append({"mode": cells[1], "naive": float(cells[2]), "chunked": float(cells[3])})
    if len(out) != 2:
        raise RuntimeError(f"unexpected output of {' '.join(cmd)}:\n{proc.stdout}")
    return out


def _pct(x: float) -> str:
    return f"{100 * x:.1f} %" if x >= 0.01 else f"{100 * x:.2f} %"


def table(
    fit: dict,
    step: dict,
    upd: dict,
    gen: list[dict],
    mem: list[dict],
    mem_label: str,
    gpu: str,
) -> list[str]:
    """The Markdown rows (header first) of all figures."""
    rows = []
    fs = fit["shape"]
    setting = (
        f"`{fs.model}`, {fs.prompts_per_step} prompts × G={fs.group_size}, ≤{fs.max_turns} "
        f"turns × {fs.max_new_tokens} new tokens; median of {fit['steps']} steps "
        f"({fit['step_seconds']:.1f} s/step)"
    )
    names = {
        "time/rollout": "rollout (agent loop)",
        "time/generate": "… of which generate",
        "time/tools": "… of which tools",
        "time/reward_and_advantage": "reward + segments + router",
        "time/diagnostics": "contamination + leakage diagnostics",
        "time/old_logprobs": "old log-probs",
        "time/ref_logprobs": "reference log-probs",
        "time/update": "update (fwd, loss, bwd, step)",
    }
    for i, (key, label) in enumerate(names.items()):
        where = setting if i == 0 else "same fit"
        rows.append(
            ("1", f"step phase: {label}", where, _pct(fit["fractions"][key]), "—", "—", "—")
        )
    ss = step["shape"]
    lo, hi = step["speedup_spread"]
    rows.append((
        "2", "training-step throughput vs TRL GRPOTrainer (whole step, sampling included)",
        f"`tiny`, {ss.prompts_per_step} prompts × G={ss.group_size}, 1 turn × "
        f"{ss.max_new_tokens} new tokens, synthetic-suite prompts; `slca fit` vs "
        f"`GRPOTrainer.train()`, {ss.steps} steps after a warm-up, {ss.rounds} alternated "
        f"rounds; {step['tokens_per_step']['slca']:.0f} / {step['tokens_per_step']['trl']:.0f} "
        f"tokens/step, {step['step_seconds']['slca']:.1f} / {step['step_seconds']['trl']:.1f} "
        f"s/step; per-round range {lo:.2f}–{hi:.2f}",
        f"{step['tokens_per_s']['slca']:.0f} tok/s", f"{step['tokens_per_s']['trl']:.0f} tok/s",
        f"{step['speedup']:.2f}×", "≥ 1.0",
    ))  # fmt: skip
    us = upd["shape"]
    batch = (
        f"`tiny`, {us.groups} prompts × G={us.group_size}, {us.prompt_len} prompt + "
        f"≤{us.completion_len} completion tokens ({upd['tokens']} tokens); tokens/s of one "
        f"update, median of {us.rounds} alternated rounds; grad-norm rel. diff "
        f"{upd['grad_norm_rel_diff']:.1e}"
    )
    tps = upd["tokens_per_s"]
    lo, hi = upd["speedup_spread"]
    rows.append((
        "2", "update only vs TRL GRPOTrainer (fixed batch)", batch + f"; per-round range {lo:.2f}–{hi:.2f}",
        f"{tps['slca']:.0f} tok/s", f"{tps['trl']:.0f} tok/s", f"{upd['speedup']:.2f}×", "≥ 1.0",
    ))  # fmt: skip
    rows.append((
        "2", "… same, `shared_prefix=False`", "as above",
        f"{tps['slca_no_prefix']:.0f} tok/s", f"{tps['trl']:.0f} tok/s",
        f"{upd['speedup_no_prefix']:.2f}×", "≥ 1.0",
    ))  # fmt: skip
    rows += separate_rows()  # the long item-2 runs, read from their committed JSON
    rows.append((
        "3", "framework overhead (segmenter + reward head + router + diagnostics)",
        f"(time/reward_and_advantage + time/diagnostics) ÷ time/step, same fit; median {fit['reward_and_advantage_ms']:.0f} ms/step, "
        f"max fraction {_pct(fit['framework_fraction_max'])}",
        _pct(fit["framework_fraction"]), "—", "—", "< 2 %",
    ))  # fmt: skip
    for r in mem:
        rows.append((
            "4", f"peak memory of token log-probs ({r['mode']}), naive ÷ chunked", mem_label,
            f"{r['chunked']:.0f} MB", f"{r['naive']:.0f} MB",
            f"{r['naive'] / max(r['chunked'], 1e-9):.1f}×", "—",
        ))  # fmt: skip
    for g in gen:
        kind = "G=4 shared prompts" if g["shared"] else "distinct prompts"
        lo, hi = g["ratio_spread"]
        rows.append((
            "5", f"rollout tokens/s vs bare `model.generate` ({kind})",
            f"`tiny`, greedy, {g['rows']} rows, {g['prompt_tokens']} prompt tokens in all, "
            f"{g['new_tokens']['hf_engine']:.0f} / {g['new_tokens']['bare']:.0f} new tokens; per-round range "
            f"{lo:.2f}–{hi:.2f}",
            f"{g['tokens_per_s']['hf_engine']:.0f} tok/s", f"{g['tokens_per_s']['bare']:.0f} tok/s",
            f"{g['ratio']:.2f}×", "≥ 0.9",
        ))  # fmt: skip
    rows.append(("6", "vLLM (GPU)", gpu, "not measured", "—", "—", "—"))
    lines = ["| " + " | ".join(COLUMNS) + " |", "|---|---|---|---:|---:|---:|---|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines


#: Figures of benchmarks too long for this script, each a committed JSON of its own run.
SEPARATE = HERE / "results"


def separate_rows() -> list[tuple[str, ...]]:
    """Rows of the committed separate runs (``benchmarks/results/multiturn_*.json``, written
    by ``bench_multiturn.py --out``), each marked as such with its date-free command shape."""
    import json

    rows = []
    for path in sorted(SEPARATE.glob("multiturn_*.json")):
        r = json.loads(path.read_text())
        sh, tps = r["shape"], r["tokens_per_s"]
        lo, hi = r["speedup_spread"]
        calls = r["tool_calls_per_episode"]
        rows.append((
            "2", "multi-turn step with tools vs TRL `GRPOTrainer(tools=...)` (separate run)",
            f"{sh['model']}, {sh['prompts_per_step']} prompts × G={sh['group_size']}, ≤{sh['turns']} "
            f"turns × {sh['max_new_tokens']} new tokens, {r.get('threads', 1)} thread, "
            f"{sh['micro_batch'] or sh['prompts_per_step'] * sh['group_size']} rows a "
            f"forward/backward; {sh['steps']} steps after a warm-up × {sh['rounds']} round(s); "
            f"{r['tokens_per_step']['slca']:.0f} / {r['tokens_per_step']['trl']:.0f} tokens/step, "
            f"{r['step_seconds']['slca']:.1f} / {r['step_seconds']['trl']:.1f} s/step; tool results "
            f"per episode {calls['slca']:.2f} / {calls['trl']:.2f}; per-round range {lo:.2f}–{hi:.2f} "
            f"(`{path.relative_to(HERE.parent)}`)",
            f"{tps['slca']:.0f} tok/s", f"{tps['trl']:.0f} tok/s", f"{r['speedup']:.2f}×", "≥ 1.5",
        ))  # fmt: skip
    return rows


def gpu_note() -> str:
    import torch

    if torch.cuda.is_available():
        return f"GPU present ({torch.cuda.get_device_name(0)}) but this script has no vLLM path"
    return "not measured: no GPU lent (CPU-only machine)"


def header(argv: list[str], seconds: float) -> list[str]:
    import torch
    import transformers
    import trl

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(
                line.split(":", 1)[1].strip() for line in fh if line.startswith("model name")
            )
    except (OSError, StopIteration):
        pass
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    cmd = " ".join(["python", "benchmarks/run_all.py", *map(shlex.quote, argv)])
    return [
        "# Benchmarks",
        "",
        f"Command: `{cmd}` ({seconds / 60:.1f} min)  ",
        f"Date: {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M UTC}  ",
        f"Machine: {os.cpu_count()} × {cpu}, shared with other jobs (load average {load} at the end); "
        f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}  ",
        "Timings alternate the systems in one process and report medians of paired per-round "
        "ratios; absolute seconds are for scale only. What each row times: the docstrings of "
        "`benchmarks/bench_fit.py`, `bench_step.py`, `bench_update.py`, `bench_generation.py`, `logprob_memory.py`.",
        "",
    ]


def main(argv: list[str] | None = None) -> list[str]:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="tiny shapes: every path once")
    parser.add_argument("--out", default=None, help="write the Markdown here (also printed)")
    parser.add_argument(
        "--embed",
        default=None,
        help=f"also replace the table between {EMBED_BEGIN!r} and {EMBED_END!r} in this file",
    )
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    sh = shapes(args.quick)
    mem = sh["memory"]
    mem_label = (
        f"bf16 logits B={mem['B']}, T={mem['T']}, V={mem['V']}, chunk {mem['chunk_size']} rows; "
        "Δ peak RSS of a fresh subprocess"
    )
    memory = memory_rows(mem)  # first: see memory_rows
    with tempfile.TemporaryDirectory(prefix="slca_bench_fit_") as root:
        fit = bench_fit.run(sh["fit"], root)
    step = bench_step.run(sh["step"])
    upd = bench_update.run(sh["update"])
    gen = bench_generation.run(sh["generation"])
    lines = header(argv, time.perf_counter() - t0) + table(
        fit, step, upd, gen, memory, mem_label, gpu_note()
    )
    text = "\n".join(lines) + "\n"
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    if args.embed:
        embed_table(Path(args.embed), [ln for ln in lines if ln.startswith("|")])
    return lines


EMBED_BEGIN = "<!-- benchmarks table: begin (python benchmarks/run_all.py --embed README.md) -->"
EMBED_END = "<!-- benchmarks table: end -->"


def embed_table(path: Path, table_lines: list[str]) -> None:
    """Replace the lines between the two markers of ``path`` with ``table_lines``.

    The markers and the text around them stay as they are, each marker on a line of its own;
    a file without both markers, in that order, is a one-line error naming the file and the
    marker (nothing is written).
    """
    text = path.read_text()
    head, found, rest = text.partition(EMBED_BEGIN)
    if not found:
        raise SystemExit(f"{path}: no {EMBED_BEGIN!r} marker to replace the table after")
    _, found, tail = rest.partition(EMBED_END)
    if not found:
        raise SystemExit(f"{path}: no {EMBED_END!r} marker after {EMBED_BEGIN!r}")
    body = "\n".join(table_lines).rstrip("\n")
    path.write_text(f"{head}{EMBED_BEGIN}\n{body}\n{EMBED_END}{tail}")


if __name__ == "__main__":
    main()
