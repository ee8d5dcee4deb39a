"""How much can RL lift held-out accuracy? pass@k of a policy against its greedy accuracy.

GRPO-style RL raises the probability of episodes the policy already samples and that score
well; an episode it never samples gets no gradient towards it. So the greedy accuracy RL
can reach on a set of tasks is, to a first approximation, bounded by the policy's pass@k
there (the share of tasks with at least one exactly right episode among k samples), and
the room RL has is ``pass@k − greedy``. This script measures both for a policy (the
quickstart's warm start by default, or an RL checkpoint) on the quickstart's tasks,
through the real agent loop, simulator and reward head of a config::

    python -m experiments.learning.passk --k 8 --out passk.json
    python -m experiments.learning.passk --checkpoint runs/quickstart/logs/version_0/checkpoints/last.ckpt

It prints, per task kind (single, parallel, multi-step, irrelevant) and overall: greedy
exact episodes, mean exact rate of the samples (sampled pass@1), the unbiased pass@j
estimates (Chen et al. 2021) for j = 1, 2, 4, ..., k, and how many tasks have mixed
outcomes (some samples exact, some not: the only tasks whose group advantages carry a
signal towards exactness). "Exact" is strict tool accuracy's episode criterion
(``episode_stats(...).exact``: every gold call made exactly right, or a correct abstention).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import math
import time
from dataclasses import replace
from pathlib import Path

import torch

from experiments.common import config_policy

ROOT = Path(__file__).resolve().parents[2]


def pass_at(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from ``n`` samples of which ``c`` are correct (Chen et al. 2021)."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def summarise(rows: list[dict], k: int) -> dict:
    """Aggregate per-task rows (``greedy`` 0/1, ``correct`` of ``k`` samples) into figures."""
    js = [j for j in (1, 2, 4, 8, 16, 32, 64) if j <= k]
    if k not in js:
        js.append(k)
    n = len(rows)
    out = {
        "tasks": n,
        "greedy_exact": sum(r["greedy"] for r in rows) / n,
        "sampled_exact": sum(r["correct"] for r in rows) / (n * k),
        "mixed_tasks": sum(0 < r["correct"] < k for r in rows),
        "never_exact_tasks": sum(r["correct"] == 0 for r in rows),
        "reachable_greedy_misses": sum(r["correct"] > 0 and not r["greedy"] for r in rows),
    }
    for j in js:
        out[f"pass@{j}"] = sum(pass_at(k, r["correct"], j) for r in rows) / n
    out["headroom"] = out[f"pass@{k}"] - out["greedy_exact"]
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    p.add_argument(
        "--checkpoint", default=None, help="an RL checkpoint (default: the config's model)"
    )
    p.add_argument("--split", choices=("heldout", "train"), default="heldout")
    p.add_argument("--tasks", type=int, default=64)
    p.add_argument("--k", type=int, default=8, help="samples per task")
    p.add_argument("--temperature", type=float, default=None, help="default: the config's")
    p.add_argument("--seed", type=int, default=0, help="sampling seed")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=64, help="episodes generated together")
    p.add_argument("--out", default=None, help="JSON with the figures and the per-task rows")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)

    from slca_lightning.eval.in_domain import greedy_loop
    from slca_lightning.eval.metrics import episode_stats

    t0 = time.perf_counter()
    cli, policy, tokenizer = config_policy(args.config, args.seed, args.checkpoint)
    dm = cli.datamodule
    source = dm.source
    tasks = (source.heldout() if args.split == "heldout" else source.train())[: args.tasks]
    greedy = greedy_loop(dm, policy, tokenizer, batch_size=args.batch)
    temperature = dm.sampling.temperature if args.temperature is None else args.temperature
    sampler = copy.copy(greedy)  # the same engine, caps and simulator; sampled turns
    sampler.sampling = replace(dm.sampling, temperature=temperature, seed=args.seed)
    per_batch = max(1, args.batch // args.k)
    rows = []
    with torch.no_grad():
        for start in range(0, len(tasks), per_batch):
            chunk = tasks[start : start + per_batch]
            g = greedy.run(chunk, group_size=1)
            s = sampler.run(chunk, group_size=args.k)
            for i, task in enumerate(chunk):
                samples = s[i * args.k : (i + 1) * args.k]
                rows.append(
                    {
                        "task_id": task.task_id,
                        "kind": task.metadata.get("kind", task.subset),
                        "greedy": int(episode_stats(g[i]).exact),
                        "correct": int(sum(episode_stats(e).exact for e in samples)),
                    }
                )
    by_kind = collections.defaultdict(list)
    for row in rows:
        by_kind[row["kind"]].append(row)
    result = {
        "config": args.config,
        "checkpoint": args.checkpoint,
        "split": args.split,
        "k": args.k,
        "temperature": temperature,
        "seed": args.seed,
        "threads": args.threads,
        "seconds": round(time.perf_counter() - t0, 1),
        "overall": summarise(rows, args.k),
        "by_kind": {kind: summarise(r, args.k) for kind, r in sorted(by_kind.items())},
        "rows": rows,
    }
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def table(result: dict) -> str:
    """The figures as a Markdown table, one row per task kind and one overall."""
    k = result["k"]
    cols = ["tasks", "greedy_exact", "sampled_exact"]
    cols += [c for c in result["overall"] if c.startswith("pass@")]
    cols += ["headroom", "mixed_tasks", "never_exact_tasks"]
    lines = [
        f"{result['split']} tasks, k = {k} samples at T = {result['temperature']} "
        f"(seed {result['seed']}, {result['threads']} thread(s), {result['seconds']} s)",
        "",
        "| kind | " + " | ".join(cols) + " |",
        "|---|" + "---|" * len(cols),
    ]
    items = [*result["by_kind"].items(), ("all", result["overall"])]
    for kind, figures in items:
        cells = [
            f"{figures[c]:.3f}" if isinstance(figures[c], float) else str(figures[c]) for c in cols
        ]
        lines.append(f"| {kind} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
