"""Decode steps of a causal LM, eager vs ``torch.compile``: is compiling the decode step a
way toward the generation bound on CPU?

Both modes run the same step: ``--rows`` sequences that share a ``--prompt``-token prompt
(prefilled once at batch 1 and copied into every row of a transformers ``StaticCache``, so
shapes never change and nothing recompiles), one new token per row per step, greedy. The
compiled mode wraps the model's forward in ``torch.compile(dynamic=False)`` (inductor,
default mode); its first call's seconds are the compile time, reported apart. Order: eager,
compiled, eager again (the two eager medians show the drift of a shared machine); each
mode's median step over ``--steps`` steps after 3 warm-up steps. Run::

    python benchmarks/decode_compile.py --model smollm2-135m-instruct --threads 1 \
        --json benchmarks/results/decode_compile_smollm2.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch


def prefilled_cache(model, prompt: torch.Tensor, rows: int, max_len: int):
    """A ``StaticCache`` of ``rows`` rows, each holding ``prompt``'s keys and values
    (computed once at batch 1)."""
    from transformers import StaticCache

    one = StaticCache(config=model.config, max_cache_len=max_len)
    with torch.no_grad():
        model(
            input_ids=prompt[None],
            past_key_values=one,
            use_cache=True,
            cache_position=torch.arange(prompt.numel()),
            logits_to_keep=1,
        )
    cache = StaticCache(config=model.config, max_cache_len=max_len)
    for batch_layer, layer in zip(cache.layers, one.layers, strict=True):
        keys = layer.keys.expand(rows, -1, -1, -1)
        values = layer.values.expand(rows, -1, -1, -1)
        batch_layer.lazy_initialization(keys, values)
        batch_layer.is_initialized = True
        batch_layer.keys.copy_(keys)
        batch_layer.values.copy_(values)
        batch_layer.cumulative_length.fill_(prompt.numel())
    return cache


def decode_steps(model, forward, prompt: torch.Tensor, rows: int, steps: int) -> list[float]:
    """Seconds of each of ``steps`` greedy decode steps (``forward``: the model's forward,
    eager or compiled) after the shared prompt."""
    length = prompt.numel()
    cache = prefilled_cache(model, prompt, rows, length + steps + 1)
    nxt = torch.full((rows, 1), int(prompt[-1]))
    seconds = []
    with torch.no_grad():
        for s in range(steps):
            pos = torch.tensor([length + s])
            t0 = time.perf_counter()
            logits = forward(
                input_ids=nxt,
                past_key_values=cache,
                use_cache=True,
                cache_position=pos,
                position_ids=pos.expand(rows, 1),
                logits_to_keep=1,
            ).logits
            nxt = logits[:, -1].argmax(-1, keepdim=True)
            seconds.append(time.perf_counter() - t0)
    return seconds


def summarize(seconds: list[float], rows: int, warmup: int = 3) -> dict:
    """Median and min step (ms) and tokens/s after ``warmup`` steps; the first step's
    seconds (for a compiled forward, its compile time)."""
    kept = seconds[warmup:] or seconds
    median = statistics.median(kept)
    return {
        "first_step_s": round(seconds[0], 2),
        "median_step_ms": round(median * 1e3, 1),
        "min_step_ms": round(min(kept) * 1e3, 1),
        "tokens_per_s": round(rows / median, 1),
        "steps": len(kept),
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument("--rows", type=int, default=32)
    p.add_argument("--prompt", type=int, default=720, help="prompt tokens every row shares")
    p.add_argument("--steps", type=int, default=16, help="decode steps a mode (3 warm-up)")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--modes", nargs="+", default=["eager", "compiled", "eager"])
    p.add_argument("--json", help="write the record here")
    args = p.parse_args(argv)
    torch.set_num_threads(args.threads)
    from slca_lightning.models.policy import load_policy

    model, _ = load_policy(args.model)
    model.eval()
    prompt = torch.randint(100, min(model.config.vocab_size, 40000), (args.prompt,),
                           generator=torch.Generator().manual_seed(0))  # fmt: skip
    compiled = None
    modes = []
    for mode in args.modes:
        if mode == "compiled" and compiled is None:
            compiled = torch.compile(model.forward, dynamic=False)
        forward = compiled if mode == "compiled" else model.forward
        seconds = decode_steps(model, forward, prompt, args.rows, args.steps + 3)
        modes.append({"mode": mode, **summarize(seconds, args.rows)})
        print(json.dumps(modes[-1]), flush=True)
    record = {
        "model": args.model,
        "rows": args.rows,
        "prompt_tokens": args.prompt,
        "threads": args.threads,
        "load_average": [round(x, 2) for x in os.getloadavg()],
        "torch": torch.__version__,
        "cpu": f"{platform.machine()} {torch.backends.cpu.get_cpu_capability()}",
        "date": time.strftime("%Y-%m-%d"),
        "modes": modes,
    }
    eager = [m["median_step_ms"] for m in modes if m["mode"] == "eager"]
    comp = [m["median_step_ms"] for m in modes if m["mode"] == "compiled"]
    if eager and comp:
        record["compiled_over_eager_speed"] = round(statistics.median(eager) / comp[0], 2)
        print(f"compiled decode step speed / eager: {record['compiled_over_eager_speed']}x")
    if args.json:
        Path(args.json).write_text(json.dumps(record, indent=1) + "\n")
    return record


if __name__ == "__main__":
    main()
