"""Which channel credits the decision to stop calling tools? Measured on sampled groups.

The first token of an episode's last assistant turn chooses between another tool call and
the answer. Under the paper's mask-run segmentation that token belongs to the summary
segment, so on a multi-step task a rollout that answers after its first call is credited
for stopping by its summary score alone, while the execution channel's lower process
reward for the missing step lands on the call it did make. ``MaskRunSegmenter(
stop_decision_tokens=1)`` credits that token with the tool channel instead.

This script samples groups of the policy on the multi-step tasks of a config's held-out
and training splits through the real agent loop, simulator and reward head, routes the
advantages with the real router and segmenter (one token per assistant turn stands in for
the turn: the routers' values are per row, so this is exact for the stop token), and
reports the advantage the stop token gets under each segmentation, for rollouts that
stopped early (fewer call turns than the gold has steps) and for complete ones::

    python -m experiments.credit_assignment.stop_decision --out stop.json
    python -m experiments.credit_assignment.stop_decision --config configs/smollm2.yaml \
        --model /path/to/sft_folder --k 8 --tasks 16

``--from-json F`` prints the table of a saved result instead of sampling, and ``--embed
README`` writes it between the README's ``stop decision`` markers (as
experiments/smollm2/README.md shows ``results/stop_decision/smollm2_sft.json``).
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from dataclasses import replace
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]


def turn_mask(episodes: list) -> torch.Tensor:
    """``BoolTensor[B, T]`` with one sampled token per assistant turn, turns separated by a
    0 (the tool response): the mask-run segmenter sees the same runs as on real tokens."""
    width = max(2 * len(e.assistant_texts) for e in episodes)
    mask = torch.zeros(len(episodes), width, dtype=torch.bool)
    for b, e in enumerate(episodes):
        for t in range(len(e.assistant_texts)):
            mask[b, 2 * t] = True
    return mask


def call_turns(episode) -> int:
    """Assistant turns that made at least one call attempt (a tool result came back)."""
    return sum(1 for results in episode.tool_results if results)


def stop_credit(episodes: list, rewards, router, group_ids: torch.Tensor) -> dict:
    """The stop token's advantage of every row under both segmentations."""
    from slca_lightning.segmenters import mask_run_segments

    mask = turn_mask(episodes)
    last = [2 * (len(e.assistant_texts) - 1) for e in episodes]  # the answer turn's token
    out = {}
    for name, n in (("paper", 0), ("stop_decision_tokens=1", 1)):
        adv = router(rewards, mask_run_segments(mask, stop_decision_tokens=n), group_ids)
        out[name] = [float(adv[b, t]) for b, t in enumerate(last)]
    return out


def classify(episode) -> str:
    """``early``: answered after fewer call turns than gold steps (at least one call);
    ``complete``: as many call turns as gold steps; ``none``: no call; ``other``: cut off."""
    steps = len(episode.task.gold_calls)
    calls = call_turns(episode)
    if calls == 0:
        return "none"
    if episode.finish_reason != "stop" or episode.tool_results[-1]:
        return "other"  # ended on a call (turn or token cap): no answer turn
    return "early" if calls < steps else "complete"


def summarise(rows: list[dict]) -> dict:
    """Mean stop-token advantage and share positive per class and segmentation."""
    out = {}
    for cls in ("early", "complete"):
        sel = [r for r in rows if r["class"] == cls]
        entry = {"rollouts": len(sel)}
        for seg in ("paper", "stop_decision_tokens=1"):
            vals = [r[seg] for r in sel]
            entry[seg] = {
                "mean": sum(vals) / len(vals) if vals else None,
                "positive": sum(v > 1e-6 for v in vals) / len(vals) if vals else None,
            }
        out[cls] = entry
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--config", default=str(ROOT / "configs" / "quickstart.yaml"))
    p.add_argument("--model", default=None, help="overrides the config's model:")
    p.add_argument("--tasks", type=int, default=16, help="multi-step tasks from each split")
    p.add_argument("--k", type=int, default=8, help="rollouts per task (a group)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--batch", type=int, default=32, help="episodes generated together")
    p.add_argument("--out", default=None, help="JSON with the figures and per-rollout rows")
    p.add_argument("--from-json", type=Path, help="a saved --out result: its table, no sampling")
    p.add_argument("--embed", type=Path, metavar="README", help="write the table into README")
    args = p.parse_args(argv)
    if args.from_json:
        text = table(json.loads(args.from_json.read_text()))
        if args.embed:
            embed(args.embed, text)
        print(text)
        return 0
    torch.set_num_threads(args.threads)

    from experiments.common import config_policy
    from slca_lightning.eval.in_domain import greedy_loop

    t0 = time.perf_counter()
    cli, policy, tokenizer = config_policy(args.config, args.seed, model=args.model)
    module = cli.model
    dm = cli.datamodule
    source = dm.source
    tasks = []
    for split in (source.heldout(), source.train()):
        tasks += [t for t in split if len(t.gold_calls) >= 2][: args.tasks]
    sampler = copy.copy(greedy_loop(dm, policy, tokenizer, batch_size=args.batch))
    sampler.sampling = replace(dm.sampling, seed=args.seed)
    rows = []
    per_batch = max(1, args.batch // args.k)
    with torch.no_grad():
        for start in range(0, len(tasks), per_batch):
            chunk = tasks[start : start + per_batch]
            episodes = sampler.run(chunk, group_size=args.k)
            rewards = module.reward_head(episodes)
            groups = torch.tensor([e.group_id for e in episodes])
            credit = stop_credit(episodes, rewards, module.router, groups)
            for b, e in enumerate(episodes):
                rows.append(
                    {
                        "task_id": e.task.task_id,
                        "class": classify(e),
                        "call_turns": call_turns(e),
                        "gold_steps": len(e.task.gold_calls),
                        "tool": float(rewards.channels["tool"][b]),
                        "summary": float(rewards.channels["summary"][b]),
                        **{k: v[b] for k, v in credit.items()},
                    }
                )
    result = {
        "config": args.config,
        "model": args.model or str(module.hparams.get("model")),
        "router": type(module.router).__name__,
        "tasks": len(tasks),
        "k": args.k,
        "temperature": dm.sampling.temperature,
        "seed": args.seed,
        "threads": args.threads,
        "seconds": round(time.perf_counter() - t0, 1),
        "summary": summarise(rows),
        "rows": rows,
    }
    print(table(result))
    if args.out:
        Path(args.out).write_text(json.dumps(result, indent=2))
    return 0


def table(result: dict) -> str:
    """The figures as a Markdown table: one row per rollout class and segmentation."""
    lines = [
        f"`{result['model']}`, {result['router']}, {result['tasks']} multi-step tasks × "
        f"{result['k']} rollouts at T = {result['temperature']} (seed {result['seed']}, "
        f"{result['threads']} thread(s), {result['seconds']} s)",
        "",
        "| rollouts | n | stop token credited by | mean advantage | share > 0 |",
        "|---|---:|---|---:|---:|",
    ]
    for cls, entry in result["summary"].items():
        for seg in ("paper", "stop_decision_tokens=1"):
            fig = entry[seg]
            mean = "–" if fig["mean"] is None else f"{fig['mean']:+.3f}"
            pos = "–" if fig["positive"] is None else f"{fig['positive']:.2f}"
            label = "summary (paper)" if seg == "paper" else "tool (`stop_decision_tokens: 1`)"
            lines.append(f"| {cls} | {entry['rollouts']} | {label} | {mean} | {pos} |")
    return "\n".join(lines)


BEGIN, END = "<!-- stop decision: begin -->", "<!-- stop decision: end -->"


def embed(readme: Path, text: str) -> None:
    """Rewrite the block between the ``stop decision`` markers of ``readme`` with ``text``."""
    from experiments.common import replace_block

    replace_block(readme, BEGIN, END, text)


if __name__ == "__main__":
    raise SystemExit(main())
