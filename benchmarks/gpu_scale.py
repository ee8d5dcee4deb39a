"""Scaling benchmark for a lent GPU: rollout tokens/s (VLLMEngine vs HFEngine) and training-step
time / peak memory with and without FSDP2, on a random-initialised model of Qwen2.5-0.5B's
size and shape (built from a config in code: nothing is downloaded).

What it measures (each section runs in its own subprocess, so one failure or one engine's
memory never spoils another; a failed or timed-out section prints its error in the table):

- ``rollout-hf`` / ``rollout-vllm``: ``prompts`` random prompts of ``prompt_len`` tokens,
  ``new_tokens`` sampled at T=1 (no stop strings); tokens/s = sampled tokens / wall time of
  one ``generate`` call after a warm-up call. The vLLM row also times engine start, one
  full weight sync (:meth:`VLLMEngine.sync_weights`, bucketed, from the trainer's copy) and,
  on CUDA, one sleep + wake.
- ``train`` / ``train-fsdp2``: ``steps`` optimiser steps (after one warm-up step) of the
  project's loss path (:func:`sequence_logprobs` → :func:`policy_loss` → AdamW) on a
  ``batch × seq_len`` random batch, fp32 master weights, bf16 compute (autocast without
  FSDP; ``MixedPrecisionPolicy`` through :func:`shard_fsdp2` with FSDP2, world size 1).
  Peak memory: ``torch.cuda.max_memory_allocated`` on GPU, the process's peak RSS on CPU.

Usage::

    python benchmarks/gpu_scale.py            # on the GPU machine, ~3-5 min, < 8 min
    python benchmarks/gpu_scale.py --dry-run  # CPU, tiny config, ~20 s (vLLM row only
                                              # where vllm imports: .venvs/vllm-cpu)
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent

#: Qwen2.5-0.5B's shape (its config.json), ~494 M parameters with tied embeddings.
QWEN25_05B = dict(
    vocab_size=151936,
    hidden_size=896,
    intermediate_size=4864,
    num_hidden_layers=24,
    num_attention_heads=14,
    num_key_value_heads=2,
    max_position_embeddings=32768,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
)
TINY = dict(QWEN25_05B, vocab_size=1024, hidden_size=128, intermediate_size=256)
TINY.update(num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2)
TINY.update(max_position_embeddings=2048)

FULL = dict(prompts=64, prompt_len=256, new_tokens=256, batch=8, seq_len=1024, steps=5)
DRY = dict(prompts=4, prompt_len=16, new_tokens=16, batch=2, seq_len=64, steps=2)
TIMEOUTS = {"train": 75, "train-fsdp2": 75, "rollout-hf": 75, "rollout-vllm": 240}


def build_model(shape: dict, seed: int = 0):
    """A random-initialised Qwen2ForCausalLM of ``shape`` (fp32, on CPU)."""
    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(**shape, eos_token_id=shape["vocab_size"] - 1, rope_theta=1e6)
    torch.manual_seed(seed)
    return Qwen2ForCausalLM(config)


def _peak_mb(device) -> float:
    import torch

    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _sync(device) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize(device)


def section_train(cfg: dict, fsdp: bool) -> dict:
    """Optimiser-step time and peak memory of the loss path, with or without FSDP2."""
    import torch

    from slca_lightning.logprobs.causal_lm import sequence_logprobs
    from slca_lightning.models.fsdp import shard_fsdp2
    from slca_lightning.training.losses import policy_loss

    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    model = build_model(cfg["shape"]).to(device)
    model.gradient_checkpointing_enable()
    if fsdp:
        import torch.distributed as dist
        from torch.distributed.device_mesh import init_device_mesh

        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ.setdefault("MASTER_PORT", str(29500 + os.getpid() % 1000))
        dist.init_process_group("nccl" if cuda else "gloo", rank=0, world_size=1)
        mesh = init_device_mesh(device.type, (1,), mesh_dim_names=("data_parallel",))
        shard_fsdp2(model, mesh, "bfloat16" if cuda else None)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    gen = torch.Generator().manual_seed(0)
    vocab = cfg["shape"]["vocab_size"]
    ids = torch.randint(0, vocab, (cfg["batch"], cfg["seq_len"]), generator=gen).to(device)
    mask = torch.ones_like(ids, dtype=torch.bool)
    adv = torch.randn(cfg["batch"], generator=gen).to(device)
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=cuda and not fsdp)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        with autocast:
            logp = sequence_logprobs(model, ids, mask.long())
        loss, _ = policy_loss(logp, logp.detach(), adv, mask)
        loss.backward()
        opt.step()

    step()  # warm-up (allocator, kernels, optimiser state)
    _sync(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for _ in range(cfg["steps"]):
        step()
    _sync(device)
    out = {"step_s": (time.perf_counter() - t0) / cfg["steps"], "peak_mb": _peak_mb(device)}
    if fsdp:
        torch.distributed.destroy_process_group()
    return out


def _prompts(cfg: dict) -> list[list[int]]:
    import torch

    gen = torch.Generator().manual_seed(1)
    vocab = cfg["shape"]["vocab_size"] - 1  # never the EOS id
    shape = (cfg["prompts"], cfg["prompt_len"])
    return torch.randint(0, vocab, shape, generator=gen).tolist()


def _tokenizer():
    from slca_lightning.models.tiny import build_tiny_tokenizer

    return build_tiny_tokenizer()  # HFEngine reads only its pad/eos ids (no stop strings)


def section_rollout(cfg: dict, engine_name: str) -> dict:
    """Sampled tokens/s of one batched ``generate`` call (after a warm-up call)."""
    import tempfile

    import torch

    from slca_lightning.rollout.engine import SamplingConfig
    from slca_lightning.rollout.hf_engine import HFEngine

    cuda = torch.cuda.is_available()
    dtype = torch.bfloat16 if cuda else torch.float32
    model = build_model(cfg["shape"]).to(dtype).to("cuda" if cuda else "cpu")
    sampling = SamplingConfig(cfg["new_tokens"], temperature=1.0, stop_strings=[], seed=0)
    prompts = _prompts(cfg)
    out: dict = {}
    if engine_name == "hf":
        engine = HFEngine(model, _tokenizer(), max_batch_size=len(prompts))
    else:
        from slca_lightning.rollout.vllm_engine import VLLMEngine

        folder = tempfile.mkdtemp(prefix="gpu_scale_")
        model.save_pretrained(folder)
        engine = VLLMEngine(
            model_path=folder,
            dtype="bfloat16" if cuda else "float32",
            gpu_memory_utilization=0.3,
            max_model_len=cfg["prompt_len"] + cfg["new_tokens"] + 8,
            enforce_eager=cfg.get("enforce_eager", False),
            engine_kwargs={"skip_tokenizer_init": True},
        )
        engine.bind(model, None)
        t0 = time.perf_counter()
        engine.start()
        out["start_s"] = time.perf_counter() - t0
    engine.generate(prompts[:2], SamplingConfig(4, stop_strings=[], seed=0))  # warm-up
    t0 = time.perf_counter()
    gens = engine.generate(prompts, sampling)
    wall = time.perf_counter() - t0
    tokens = sum(len(g.token_ids) for g in gens)
    out.update(tokens=tokens, wall_s=wall, tokens_per_s=tokens / wall)
    if engine_name == "vllm":
        try:  # a failure here keeps the tokens/s measured above
            with torch.no_grad():
                for p in model.parameters():
                    p.mul_(1.001)
            engine.policy_version += 1
            engine.sync_weights(model)
            out.update(sync_s=engine.last_sync_s, sync_mb=engine.last_sync_mb)
            if cuda:
                t0 = time.perf_counter()
                engine.sleep()
                engine.wake()
                out["sleep_wake_s"] = time.perf_counter() - t0
        except Exception as exc:  # reported in the table's note column
            out["error"] = f"after generate: {type(exc).__name__}: {str(exc)[:120]}"
        engine.close()
    elif cuda:
        out["peak_mb"] = _peak_mb(torch.device("cuda:0"))
    return out


def run_section(name: str, cfg: dict) -> dict:
    if name.startswith("train"):
        return section_train(cfg, fsdp=name == "train-fsdp2")
    return section_rollout(cfg, name.removeprefix("rollout-"))


def _child_result(name: str, args: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--section", name]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--enforce-eager"] if args.enforce_eager else []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    limit = TIMEOUTS[name] * (2 if args.dry_run else 1)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=limit, env=env)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {limit} s"}
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT ") :])
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": f"exit {proc.returncode}: {tail[0][:160]}"}


def _fmt(value, spec: str = ".2f") -> str:
    return "—" if value is None else format(value, spec)


def render(results: dict, cfg: dict, device: str) -> str:
    """The two Markdown tables (rollout, training) of ``results``."""
    lines = [
        f"GPU scaling benchmark on {device}: Qwen2.5-0.5B shape" if not cfg["dry"] else
        f"GPU scaling benchmark DRY RUN on {device}: tiny config (numbers meaningless)",
        "",
        f"Rollout: {cfg['prompts']} prompts × {cfg['prompt_len']} tokens, "
        f"{cfg['new_tokens']} new tokens each, T=1",
        "",
        "| engine | tokens/s | generate s | start s | weight sync s (MB) | sleep+wake s | note |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]  # fmt: skip
    for name, label in (("rollout-hf", "HFEngine"), ("rollout-vllm", "VLLMEngine")):
        r = results[name]
        sync = f"{r['sync_s']:.2f} ({r['sync_mb']:.0f})" if "sync_s" in r else "—"
        lines.append(
            f"| {label} | {_fmt(r.get('tokens_per_s'), '.0f')} | {_fmt(r.get('wall_s'))} | "
            f"{_fmt(r.get('start_s'))} | {sync} | {_fmt(r.get('sleep_wake_s'))} | "
            f"{r.get('error', '')} |"
        )
    lines += [
        "",
        f"Training step: batch {cfg['batch']} × {cfg['seq_len']} tokens, fp32 master weights, "
        f"bf16 compute, activation checkpointing, AdamW; mean of {cfg['steps']} steps",
        "",
        "| setup | step s | peak memory MB | note |",
        "|---|---:|---:|---|",
    ]
    for name, label in (("train", "no FSDP"), ("train-fsdp2", "FSDP2 (world size 1)")):
        r = results[name]
        lines.append(
            f"| {label} | {_fmt(r.get('step_s'), '.3f')} | {_fmt(r.get('peak_mb'), '.0f')} | "
            f"{r.get('error', '')} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="CPU, tiny config, seconds")
    parser.add_argument("--enforce-eager", action="store_true", help="vLLM without CUDA graphs")
    parser.add_argument("--section", choices=sorted(TIMEOUTS), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    cfg = dict(DRY if args.dry_run else FULL, dry=args.dry_run, enforce_eager=args.enforce_eager)
    cfg["shape"] = TINY if args.dry_run else QWEN25_05B
    if args.section:
        sys.path.insert(0, str(REPO_ROOT))
        print("RESULT " + json.dumps(run_section(args.section, cfg)), flush=True)
        return 0
    import torch

    if not args.dry_run and not torch.cuda.is_available():
        parser.error("no CUDA device: run on the GPU machine, or pass --dry-run")
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    t0 = time.perf_counter()
    results = {}
    for name in ("train", "train-fsdp2", "rollout-hf", "rollout-vllm"):
        if name == "rollout-vllm" and importlib.util.find_spec("vllm") is None:
            results[name] = {"error": "skipped: vllm not installed"}
            continue
        results[name] = _child_result(name, args)
    print(render(results, cfg, device))
    print(f"\nTotal {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
