"""Update throughput and peak memory: micro-batches by row count vs by token budget.

What is timed: one ``PolicyUpdate.run`` of an ``SLCAGRPOModule`` (forward with per-token
log-probs and entropy, loss, backward, clipping, AdamW step; driven as
:mod:`bench_update` drives it: no Lightning loop, plain ``loss.backward()``) on one fixed
rollout batch whose rows have mixed lengths, as multi-turn episodes do: ``prompts`` groups
of ``group`` rows, each group sharing a ``prompt_len``-token prompt, row lengths drawn from a
Pareto tail (index ``alpha``) between ``min_len`` and ``max_len`` tokens, the longest row at
``max_len`` (it sets the padded width ``T``), right-padded. Three splits of the same batch:

- **rows**: ``micro_batch_size = m`` (the default split): every micro-batch is ``m`` rows of
  the batch's full width ``T``, so ``m × T`` padded tokens however short its rows are;
- **budget (same memory)**: ``micro_batch_tokens = m × T`` (the rows split's padded tokens
  per micro-batch), ``micro_batch_size = B``: rows sorted by length and packed so that rows
  × the longest row stays within it, each micro-batch cut to its longest row;
- **budget (less memory)**: ``micro_batch_tokens = fraction × m × T`` (``--small-fraction``,
  default 0.5).

The gradients are the same in all three (``tests/unit/training/test_token_budget.py``; the
measured call's gradient norms are compared here too).

How it measures: each split runs in its own fresh child process (alternated round by round,
order rotated). The child builds the module, batch and AdamW, runs one small warm-up update
(two rows cut to 64 tokens: kernels, gradients and optimiser state allocated), records its
RSS (``/proc/self/status`` VmRSS), resets the peak (``/proc/self/clear_refs`` 5), runs the
measured update(s) and reads the peak since (VmHWM). **Δ peak** = that peak − the RSS
before: the memory the update needed on top of the weights, gradients and optimiser state
(activations, mostly). Where the peak cannot be reset, the child's whole-life peak RSS from
``os.wait4`` is used instead (then it includes loading the model). The parent imports no
torch, so it inflates no child's peak. Tokens/s = the batch's real (non-pad) tokens ÷ the
update's wall time. Ratios are medians over rounds of same-round pairs (budget ÷ rows).

Goal: the token budget gives ≥ 1.3× the rows split's tokens/s at the same peak memory (Δ peak
within 10 %), or the same tokens/s (≥ 0.95×) at ≤ 0.6× the Δ peak.

::

    python benchmarks/bench_token_budget.py --model smollm2-135m-instruct --threads 1 \\
        --out benchmarks/results/token_budget_smollm2.json
    python benchmarks/bench_token_budget.py --model tiny --prompts 1 --group 4 --min-len 16 \\
        --max-len 160 --prompt-len 8 --micro-batch 2 --rounds 1   # smoke run, seconds

Defaults (SmolLM2-135M-Instruct, 1 thread, a 2-core box): 2 × 8 rows, 150-token prompts,
lengths 200–2000 (median ≈ 400), ``m = 2`` (4 rows × 2000 tokens would need about 15 GB of
activations): about 10 GB peak RSS in the rows child, about 8 min a round, 3 rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import child_json, run_record

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

#: The splits, in the order of the table.
SPLITS = ("rows", "budget", "budget_small")
LABELS = {"rows": "rows", "budget": "budget (same memory)", "budget_small": "budget (less memory)"}
#: Goal: ≥ SPEEDUP × tokens/s within SAME_MEMORY of the Δ peak, or ≥ SAME_SPEED × tokens/s at
#: ≤ LESS_MEMORY × the Δ peak.
SPEEDUP, SAME_MEMORY, SAME_SPEED, LESS_MEMORY = 1.3, 1.10, 0.95, 0.6


@dataclass
class BudgetShape:
    """The batch and the splits."""

    model: str = "smollm2-135m-instruct"
    prompts: int = 2  # groups
    group: int = 8  # rows per group
    prompt_len: int = 150  # each group's shared prompt
    min_len: int = 200  # row lengths (prompt + response) in tokens
    max_len: int = 2000
    alpha: float = 1.2  # Pareto tail index of the lengths (smaller: longer tail)
    micro_batch: int = 2  # m: the rows split's micro_batch_size (4 × 2000 SmolLM2 tokens: ~15 GB)
    small_fraction: float = 0.5
    rounds: int = 3
    calls: int = 1  # measured updates per child (median), after the warm-up
    threads: int = 1
    shared_prefix: bool = True
    seed: int = 0


# -- the batch (shared with gpu_scale.py) -----------------------------------------------------
def mixed_lengths(n: int, lo: int, hi: int, alpha: float, seed: int = 0):
    """``[n]`` row lengths: ``lo × U^(-1/alpha)`` (Pareto) clipped to ``hi``; the first at ``hi``."""
    import torch

    u = torch.rand(n, generator=torch.Generator().manual_seed(seed)).clamp_min(1e-6)
    lengths = (lo * u.pow(-1.0 / alpha)).clamp(max=hi).long()
    lengths[0] = hi  # the longest row sets the padded width
    return lengths


def mixed_batch(
    groups: int, group: int, prompt_len: int, lengths, vocab: int, pad_id: int, seed: int = 0
):
    """``(RolloutBatch, advantages [B, T])``: ``groups × group`` right-padded rows of ``lengths``
    (group-major, as collation lays them out), each group's rows sharing a random
    ``prompt_len``-token prompt; the rest of each row is its response (loss-carrying), with a
    random per-row advantage."""
    import torch

    from slca_lightning.types import RolloutBatch

    g = torch.Generator().manual_seed(seed)
    b, t = groups * group, int(lengths.max())
    if len(lengths) != b or int(lengths.min()) <= prompt_len:
        raise ValueError(f"need {b} lengths, each > prompt_len={prompt_len}")
    ids = torch.full((b, t), pad_id, dtype=torch.long)
    attention = torch.zeros((b, t), dtype=torch.bool)
    assistant = torch.zeros((b, t), dtype=torch.bool)
    prompts = torch.randint(3, vocab, (groups, prompt_len), generator=g)
    for r, n in enumerate(lengths.tolist()):
        ids[r, :prompt_len] = prompts[r // group]
        ids[r, prompt_len:n] = torch.randint(3, vocab, (n - prompt_len,), generator=g)
        attention[r, :n] = True
        assistant[r, prompt_len:n] = True
    batch = RolloutBatch(
        input_ids=ids, attention_mask=attention, assistant_mask=assistant,
        group_ids=torch.arange(groups).repeat_interleave(group),
    )  # fmt: skip
    advantages = torch.randn(b, generator=g)[:, None] * assistant.float()
    return batch, advantages


def split_settings(split: str, rows: int, width: int, m: int, small_fraction: float) -> dict:
    """``micro_batch_size`` / ``micro_batch_tokens`` of ``split`` for ``rows`` rows of
    padded width ``width`` (see module docstring)."""
    if split == "rows":
        return {"micro_batch_size": m, "micro_batch_tokens": None}
    budget = m * width if split == "budget" else int(small_fraction * m * width)
    return {"micro_batch_size": rows, "micro_batch_tokens": max(budget, 1)}


def plan_stats(plan, lengths, width: int, cut: bool) -> dict:
    """Micro-batches of a partition and the padded tokens they run (each cut to its longest
    row when ``cut``, else the batch's ``width``)."""
    padded = [len(m) * (int(lengths[m].max()) if cut else width) for mini in plan for m in mini]
    return {"micro_batches": len(padded), "padded_tokens": sum(padded), "max_padded": max(padded)}


# -- the child: one split, measured in this process -------------------------------------------
def _status_mb(key: str) -> float:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024.0
    raise RuntimeError(f"{key} not in /proc/self/status")


def _reset_peak() -> bool:
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")  # VmHWM := VmRSS (Linux ≥ 4.0)
        return True
    except OSError:
        return False


def measure(shape: BudgetShape, split: str) -> dict:
    """Build, warm up and time one split's update (see module docstring)."""
    import gc

    import torch

    from slca_lightning.training.module import SLCAGRPOModule
    from slca_lightning.training.update import row_lengths

    torch.set_num_threads(shape.threads)
    b = shape.prompts * shape.group
    lengths = mixed_lengths(b, shape.min_len, shape.max_len, shape.alpha, shape.seed)
    width = int(lengths.max())
    settings = split_settings(split, b, width, shape.micro_batch, shape.small_fraction)
    lr = 1e-5
    module = SLCAGRPOModule(
        model=shape.model, kl_coef=0.0, learning_rate=lr, max_grad_norm=1.0,
        shared_prefix=shape.shared_prefix, seed=shape.seed, **settings,
    )  # fmt: skip
    module.configure_model()
    module.policy.train()
    tok = module.tokenizer
    pad = tok.pad_token_id if tok.pad_token_id is not None else 0
    batch, advantages = mixed_batch(
        shape.prompts, shape.group, shape.prompt_len, lengths, len(tok), pad, shape.seed
    )
    params = [p for p in module.policy.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=lr, weight_decay=0.0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    update, ctx = module.policy_update, module.update_context()

    def call(on, adv) -> tuple[float, float]:
        t0 = time.perf_counter()
        out = update.run(
            module.policy, on, adv, on.assistant_mask, None, None, ctx, optimizer=opt,
            scheduler=sched, backward=lambda loss: loss.backward(),
            gen=torch.Generator().manual_seed(0),
        )  # fmt: skip
        return time.perf_counter() - t0, float(out["train/grad_norm"])

    # warm-up on two rows cut to 64 tokens: kernels, gradients and AdamW state allocated
    keep = min(64, width)
    small = type(batch)(
        input_ids=batch.input_ids[:2, :keep].clone(),
        attention_mask=batch.attention_mask[:2, :keep].clone(),
        assistant_mask=batch.assistant_mask[:2, :keep].clone(),
        group_ids=batch.group_ids[:2].clone(),
    )
    call(small, advantages[:2, :keep].clone())
    gc.collect()
    baseline = _status_mb("VmRSS")
    reset = _reset_peak()
    timed = [call(batch, advantages) for _ in range(shape.calls)]
    peak = _status_mb("VmHWM") if reset else None
    plan = update.partition(b, torch.Generator().manual_seed(0), row_lengths(batch))
    stats = plan_stats(plan, row_lengths(batch), width, settings["micro_batch_tokens"] is not None)
    return {
        "split": split,
        **settings,
        **stats,
        "rows": b,
        "width": width,
        "tokens": int(batch.attention_mask.sum()),
        "lengths": lengths.tolist(),
        "seconds": statistics.median(s for s, _ in timed),
        "grad_norm": timed[0][1],
        "baseline_mb": baseline,
        "peak_mb": peak,
        "delta_mb": None if peak is None else peak - baseline,
        "threads": torch.get_num_threads(),
    }


# -- the parent: child processes alternated round by round -------------------------------------
def run_child(split: str, shape: BudgetShape) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", split,
           "--shape", json.dumps(asdict(shape))]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(shape.threads), "TOKENIZERS_PARALLELISM": "false"}
    out, life_peak_mb = child_json(cmd, env, ROOT, f"split {split}")
    out["life_peak_mb"] = life_peak_mb
    if out["delta_mb"] is None:  # no peak reset here: the child's whole-life peak
        out["peak_mb"] = out["life_peak_mb"]
        out["delta_mb"] = out["peak_mb"] - out["baseline_mb"]
    return out


def summarise(got: dict[str, list[dict]]) -> dict:
    med = statistics.median
    rows = got["rows"]
    out: dict = {"splits": {}}
    for split, fits in got.items():
        first = fits[0]
        per = {
            "micro_batch_size": first["micro_batch_size"],
            "micro_batch_tokens": first["micro_batch_tokens"],
            "micro_batches": first["micro_batches"],
            "padded_tokens": first["padded_tokens"],
            "max_padded": first["max_padded"],
            "tokens_per_s": med(f["tokens"] / f["seconds"] for f in fits),
            "seconds": med(f["seconds"] for f in fits),
            "delta_mb": med(f["delta_mb"] for f in fits),
            "peak_mb": med(f["peak_mb"] for f in fits),
            "life_peak_mb": max(f["life_peak_mb"] for f in fits),
        }
        speed = [r["seconds"] / f["seconds"] for f, r in zip(fits, rows, strict=True)]
        memory = [f["delta_mb"] / max(r["delta_mb"], 1e-9) for f, r in zip(fits, rows, strict=True)]
        per["speed_ratio"], per["speed_range"] = med(speed), (min(speed), max(speed))
        per["memory_ratio"], per["memory_range"] = med(memory), (min(memory), max(memory))
        per["peak_ratio"] = med(
            f["peak_mb"] / max(r["peak_mb"], 1e-9) for f, r in zip(fits, rows, strict=True)
        )
        norm = rows[0]["grad_norm"]
        per["grad_norm_rel_diff"] = abs(first["grad_norm"] - norm) / max(abs(norm), 1e-12)
        out["splits"][split] = per
    same, small = out["splits"]["budget"], out["splits"]["budget_small"]
    out["goal_same_memory"] = same["speed_ratio"] >= SPEEDUP and same["memory_ratio"] <= SAME_MEMORY
    out["goal_less_memory"] = (
        small["speed_ratio"] >= SAME_SPEED and small["memory_ratio"] <= LESS_MEMORY
    )
    out["goal_met"] = out["goal_same_memory"] or out["goal_less_memory"]
    return out


def render(result: dict) -> str:
    sh, s, m = result["shape"], result["summary"], result["machine"]
    first = result["rounds"]["rows"][0]
    lengths = sorted(first["lengths"])
    load = lambda xs: ", ".join(f"{x:.2f}" for x in xs)  # noqa: E731
    lines = [
        f"Update by token budget vs rows: `{sh['model']}`, {sh['prompts']} groups × {sh['group']} "
        f"rows sharing a {sh['prompt_len']}-token prompt, row lengths {lengths[0]}–{lengths[-1]} "
        f"(median {statistics.median(lengths):.0f}, Pareto α {sh['alpha']}), {first['tokens']} "
        f"real tokens, padded width {first['width']}; shared_prefix {sh['shared_prefix']}; one "
        f"`PolicyUpdate.run` (fwd, loss, bwd, clip, AdamW), {sh['calls']} per child after a "
        f"warm-up, {sh['rounds']} alternated rounds, each split in its own process",
        "",
        f"Machine: {m['cpus']} × {m['cpu']}; torch threads {result['threads']} per process; "
        f"load average before {load(result['load_before'])}, after {load(result['load_after'])}; "
        f"{result['date']}, {result['wall_s'] / 60:.1f} min. Δ peak: the peak RSS during the "
        "update minus the RSS before it (weights, gradients and AdamW state already allocated).",
        "",
        "| split | setting | micro-batches | padded tokens | tokens/s | s/update | Δ peak MB "
        "| peak RSS MB | tokens/s ÷ rows (range) | Δ peak ÷ rows | grad-norm rel. diff |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for split in SPLITS:
        p = s["splits"][split]
        setting = (
            f"micro_batch_size={p['micro_batch_size']}"
            if p["micro_batch_tokens"] is None
            else f"micro_batch_tokens={p['micro_batch_tokens']}"
        )
        lo, hi = p["speed_range"]
        lines.append(
            f"| {LABELS[split]} | {setting} | {p['micro_batches']} | {p['padded_tokens']} | "
            f"{p['tokens_per_s']:.0f} | {p['seconds']:.2f} | {p['delta_mb']:.0f} | "
            f"{p['peak_mb']:.0f} | {p['speed_ratio']:.2f}× ({lo:.2f}–{hi:.2f}) | "
            f"{p['memory_ratio']:.2f}× | {p['grad_norm_rel_diff']:.1e} |"
        )
    same, small = s["splits"]["budget"], s["splits"]["budget_small"]
    lines += [
        "",
        f"Goal: ≥ {SPEEDUP}× tokens/s at the same memory (Δ peak ≤ {SAME_MEMORY}×): "
        f"{same['speed_ratio']:.2f}× at {same['memory_ratio']:.2f}× "
        f"({'met' if s['goal_same_memory'] else 'not met'}); or ≥ {SAME_SPEED}× tokens/s at "
        f"≤ {LESS_MEMORY}× memory: {small['speed_ratio']:.2f}× at {small['memory_ratio']:.2f}× "
        f"({'met' if s['goal_less_memory'] else 'not met'}). Overall: "
        f"{'met' if s['goal_met'] else 'NOT met'}",
    ]
    return "\n".join(lines)


def run(shape: BudgetShape) -> dict:
    t0 = time.perf_counter()
    load_before = os.getloadavg()
    got: dict[str, list[dict]] = {s: [] for s in SPLITS}
    for r in range(shape.rounds):
        k = r % len(SPLITS)
        for split in SPLITS[k:] + SPLITS[:k]:  # each split first in turn
            got[split].append(run_child(split, shape))
            f = got[split][-1]
            print(
                f"round {r + 1}/{shape.rounds} {split}: {f['tokens'] / f['seconds']:.0f} tokens/s, "
                f"Δ peak {f['delta_mb']:.0f} MB",
                file=sys.stderr,
                flush=True,
            )
    result = run_record(asdict(shape), got, t0, load_before, threads=got["rows"][0]["threads"])
    result["summary"] = summarise(got)
    result["markdown"] = render(result)
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    d = BudgetShape()
    p.add_argument("--model", default=d.model, help="name, source or HF folder")
    p.add_argument("--prompts", type=int, default=d.prompts, help="groups in the batch")
    p.add_argument("--group", type=int, default=d.group, help="rows per group")
    p.add_argument("--prompt-len", type=int, default=d.prompt_len)
    p.add_argument("--min-len", type=int, default=d.min_len)
    p.add_argument("--max-len", type=int, default=d.max_len)
    p.add_argument("--alpha", type=float, default=d.alpha, help="Pareto tail index")
    p.add_argument("--micro-batch", type=int, default=d.micro_batch, help="m, the rows split")
    p.add_argument("--small-fraction", type=float, default=d.small_fraction)
    p.add_argument("--rounds", type=int, default=d.rounds)
    p.add_argument("--calls", type=int, default=d.calls, help="measured updates per child")
    p.add_argument("--threads", type=int, default=d.threads)
    p.add_argument("--no-shared-prefix", action="store_true")
    p.add_argument("--out", default=None, help="write the figures and the table as JSON here")
    p.add_argument("--child", choices=SPLITS, help=argparse.SUPPRESS)
    p.add_argument("--shape", default=None, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.child:  # one split, in this (child) process
        sys.path.insert(0, str(ROOT))
        print("RESULT " + json.dumps(measure(BudgetShape(**json.loads(a.shape)), a.child)))
        return {}
    if not 0 < a.prompt_len < a.min_len <= a.max_len:
        p.error("need 0 < --prompt-len < --min-len ≤ --max-len")
    if not 0 < a.small_fraction < 1:
        p.error("--small-fraction must be in (0, 1)")
    if min(a.rounds, a.calls, a.micro_batch, a.prompts, a.group) < 1:
        p.error("--rounds, --calls, --micro-batch, --prompts and --group must be ≥ 1")
    shape = BudgetShape(
        model=a.model, prompts=a.prompts, group=a.group, prompt_len=a.prompt_len,
        min_len=a.min_len, max_len=a.max_len, alpha=a.alpha, micro_batch=a.micro_batch,
        small_fraction=a.small_fraction, rounds=a.rounds, calls=a.calls, threads=a.threads,
        shared_prefix=not a.no_shared_prefix,
    )  # fmt: skip
    result = run(shape)
    print(result["markdown"])
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
