"""Torch threads on this machine now: one thread vs every core, for generation and an update.

The measurement behind :mod:`slca_lightning.training.threads`' default. Greedy generation (8 prompts
× 32 new tokens) and one forward + backward of the same 8 rows run with 1 thread and with
``os.cpu_count()`` threads, alternated in one process (``_timing.alternate``), and the
paired ratio ``t(all cores) / t(1 thread)`` is printed with the load average before and
after, and the thread count the default rule picks at that load. Run it once idle and once
with another job on the machine::

    python benchmarks/threads.py --model smollm2-135m-instruct --rounds 3
    python benchmarks/threads.py --model suite-sft
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _timing import alternate, paired_ratio

from slca_lightning.models.policy import load_policy
from slca_lightning.training.threads import choose_threads


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="suite-sft")
    p.add_argument("--rows", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args(argv)
    cores = os.cpu_count() or 1
    load_before = os.getloadavg()
    default, why = choose_threads(None)
    model, tok = load_policy(args.model)
    model.eval()
    prompts = [
        f"<|im_start|>user\nWhat is the weather in city number {i} tomorrow?<|im_end|>\n"
        "<|im_start|>assistant\n"
        for i in range(args.rows)
    ]
    tok.padding_side = "left"
    batch = tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)

    def generate(n: int):
        def run() -> None:
            torch.set_num_threads(n)
            with torch.no_grad():
                model.generate(
                    **batch, max_new_tokens=args.new_tokens, min_new_tokens=args.new_tokens,
                    do_sample=False, pad_token_id=tok.pad_token_id,
                )  # fmt: skip

        return run

    def update(n: int):
        def run() -> None:
            torch.set_num_threads(n)
            out = model(**batch, labels=batch["input_ids"])
            out.loss.backward()
            model.zero_grad(set_to_none=True)

        return run

    systems = {}
    for n in sorted({1, cores}):
        systems[f"generate@{n}"] = generate(n)
        systems[f"update@{n}"] = update(n)
    times = alternate(systems, rounds=args.rounds)
    result = {
        "model": args.model,
        "cores": cores,
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in os.getloadavg()],
        "default_threads": default,
        "default_reason": why,
        "median_s": {k: round(statistics.median(v), 3) for k, v in times.items()},
    }
    if cores > 1:
        for what in ("generate", "update"):
            ratio = paired_ratio(times[f"{what}@{cores}"], times[f"{what}@1"])
            result[f"{what}: t({cores} threads) / t(1 thread)"] = round(ratio, 2)
    for key, value in result.items():
        print(f"{key}: {value}")
    return result


if __name__ == "__main__":
    main()
