"""Whole training steps: ``slca fit`` vs TRL 1.16.0 ``GRPOTrainer.train()``, tokens/s.

Where :mod:`bench_update` times only the part both systems share (one policy-gradient
update on a fixed batch), this times what a user waits for: a full RL step, sampling
included, through each system's own training loop, alternated in one process.

- **slca**: a real ``slca fit`` (``slca_lightning.cli.commands.main`` → ``Trainer.fit``) on the
  built-in synthetic suite: HFEngine sampling from the policy, the agent loop (one turn),
  HierarchicalReward (rule judge), MaskRunSegmenter, SLCARouter, the update.
- **TRL**: a real ``GRPOTrainer(...).train()`` on the same prompts (the synthetic tasks'
  prompts rendered by the same chat template, tools in the system prompt), generating
  with ``model.generate``, scored by a cheap rule reward (the reply's length; TRL has no
  tool simulator, so its reward does less work than slca's: that favours TRL).

Matched: the ``"tiny"`` policy (same seed, same initial weights), float32, CPU, prompts
per step, group size G, ``max_new_tokens``, temperature 1, no KL term (``beta = kl_coef =
0``, so neither builds a reference model), one PPO epoch of one mini-batch (ratio 1, no
old log-probs), one micro-batch, loss ``grpo``, max grad norm 1, AdamW, no activation
checkpointing (TRL's ``GRPOConfig`` turns it on by default; it is turned off here because
slca's default leaves it off; with it on, TRL's step took 1.3× longer here). The randomly
initialised policy almost never samples EOS, so both sides generate ``max_new_tokens``
per rollout and process near-equal tokens per step.

Measured: the wall time between the ends of consecutive optimiser steps (everything a step
does, loop overhead and data loading included), on ``steps`` steps after one warm-up step,
and the tokens each step processed (prompt + completion, padding excluded: slca's
attention mask, TRL's ``num_input_tokens_seen``). A round runs one fit of each system; the
ratio is the median over rounds of (slca tokens/s) ÷ (TRL tokens/s) of the same round.
"""

from __future__ import annotations

import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass

import lightning as L
from bench_fit import bare_trainer_args


@dataclass
class StepShape:
    """Settings of the whole-step comparison."""

    prompts_per_step: int = 2
    group_size: int = 8
    max_new_tokens: int = 64
    steps: int = 3
    rounds: int = 3
    n_train: int = 64
    lr: float = 1e-5
    model: str = "tiny"  # or a named source / folder, e.g. "smollm2-135m-instruct"
    micro_batch: int | None = None  # rows per forward/backward on both sides (None: all)


class _StepClock(L.Callback):
    """slca side: time and token count at the end of every optimiser step."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.marks.append((time.perf_counter(), int(batch.attention_mask.sum())))


def per_step(marks: list[tuple[float, int]], cumulative: bool) -> tuple[float, float]:
    """(tokens, seconds) of the steps after the first (warm-up) one.

    ``marks[i]`` is (time, tokens) at the end of step ``i + 1``; the measured interval runs
    from the end of the warm-up step to the end of the last one.
    """
    if len(marks) < 2:
        raise RuntimeError(f"need ≥ 2 step marks (warm-up + 1), got {len(marks)}")
    seconds = marks[-1][0] - marks[0][0]
    # TRL's num_input_tokens_seen counts from the start of training; slca's are per step
    tokens = marks[-1][1] - marks[0][1] if cumulative else sum(n for _, n in marks[1:])
    return float(tokens), seconds


def slca_args(shape, root: str, max_turns: int = 1) -> list[str]:
    """The ``slca fit`` arguments of the matched run (``shape``: a :class:`StepShape` or any
    object with its fields; ``max_turns`` > 1 lets episodes call tools)."""
    b = shape.prompts_per_step * shape.group_size
    return [
        f"--model.model={shape.model}",
        "--data.engine.class_path=slca_lightning.rollout.hf_engine.HFEngine",
        "--data.engine.init_args.share_prefix=true",  # as every shipped config
        f"--model.learning_rate={shape.lr}",
        "--model.temperature=1.0",
        "--model.kl_coef=0.0",
        "--model.aggregation=grpo",
        f"--model.micro_batch_size={shape.micro_batch or b}",
        "--model.max_grad_norm=1.0",
        "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
        f"--data.tasks.init_args.n_train={shape.n_train}",
        "--data.tasks.init_args.n_heldout=4",
        f"--data.prompts_per_step={shape.prompts_per_step}",
        f"--data.group_size={shape.group_size}",
        f"--data.max_turns={max_turns}",
        f"--data.max_new_tokens={shape.max_new_tokens}",
        "--data.render_check=off",
        *bare_trainer_args(shape.steps + 1, root),
        *(
            [f"--data.max_response_tokens={max_turns * shape.max_new_tokens + 512}"]
            * (max_turns > 1)
        ),
    ]


def run_slca(shape: StepShape) -> tuple[float, float]:
    """One ``slca fit``; (tokens, seconds) of the measured steps."""
    from slca_lightning.cli.commands import main

    with tempfile.TemporaryDirectory(prefix="slca_bench_step_") as root:
        cli = main(slca_args(shape, root), run=False)
        clock = _StepClock()
        cli.trainer.callbacks.append(clock)
        cli.trainer.fit(cli.model, cli.datamodule)
    return per_step(clock.marks, cumulative=False)


def task_prompts(n: int, model: str = "tiny") -> list[str]:
    """The synthetic training tasks' prompts, rendered as slca's agent loop renders them."""
    from slca_lightning.data.task_sources import SyntheticTasks
    from slca_lightning.models.policy import load_policy

    _, tokenizer = load_policy(model)
    tasks = SyntheticTasks(n_train=n, n_heldout=4, seed=0).train()
    return [
        tokenizer.apply_chat_template(t.messages, tokenize=False, add_generation_prompt=True)
        for t in tasks
    ]


def trl_config(shape, out: str, **overrides):
    """TRL's ``GRPOConfig`` matched to slca's side (see the module docstring): ``shape``'s
    batch, group, rate and steps, ``micro_batch`` rows a forward/backward with the rest
    accumulated (one generation a step), T = 1, no KL, loss ``grpo``, clip 1, constant rate,
    fp32 on CPU, no checkpointing, logging or saving; ``overrides`` set the rest."""
    from trl import GRPOConfig

    b = shape.prompts_per_step * shape.group_size
    m = shape.micro_batch or b
    return GRPOConfig(
        output_dir=out, per_device_train_batch_size=m, num_generations=shape.group_size,
        gradient_accumulation_steps=b // m, temperature=1.0, beta=0.0, loss_type="grpo",
        learning_rate=shape.lr, weight_decay=0.0, max_grad_norm=1.0, lr_scheduler_type="constant",
        warmup_steps=0, max_steps=shape.steps + 1, report_to=[], use_cpu=True, bf16=False,
        logging_strategy="no", save_strategy="no", seed=0, dataloader_num_workers=0,
        disable_tqdm=True, gradient_checkpointing=False, **overrides,
    )  # fmt: skip


def run_trl(shape: StepShape, prompts: list[str]) -> tuple[float, float]:
    """One ``GRPOTrainer.train()``; (tokens, seconds) of the measured steps."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from slca_lightning.models.policy import load_policy

    marks: list[tuple[float, int]] = []

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), int(state.num_input_tokens_seen)))

    model, tokenizer = load_policy(shape.model, seed=0)
    model.train()  # as slca trains it (a folder loads in eval mode; dropout is 0 either way)
    with tempfile.TemporaryDirectory(prefix="slca_bench_trl_step_") as out:
        args = trl_config(shape, out, max_completion_length=shape.max_new_tokens)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = GRPOTrainer(
                model=model,
                reward_funcs=lambda completions, **kw: [len(c) / 100.0 for c in completions],
                args=args,
                train_dataset=Dataset.from_dict({"prompt": prompts}),
                processing_class=tokenizer,
                callbacks=[Clock()],
            )
            trainer.train()
    return per_step(marks, cumulative=True)


def run(shape: StepShape) -> dict:
    """Alternate whole fits of TRL and slca for ``shape.rounds`` rounds; return figures."""
    prompts = task_prompts(shape.n_train, shape.model)
    got: dict[str, list[tuple[float, float]]] = {"trl": [], "slca": []}
    for r in range(shape.rounds):
        order = ("trl", "slca") if r % 2 == 0 else ("slca", "trl")
        for name in order:
            got[name].append(run_slca(shape) if name == "slca" else run_trl(shape, prompts))
    tps = {n: [tok / sec for tok, sec in v] for n, v in got.items()}
    ratios = [s / t for s, t in zip(tps["slca"], tps["trl"])]
    step_s = {n: statistics.median(sec / shape.steps for _, sec in v) for n, v in got.items()}
    tokens = {n: statistics.median(tok / shape.steps for tok, _ in v) for n, v in got.items()}
    return {
        "shape": shape,
        "tokens_per_s": {n: statistics.median(v) for n, v in tps.items()},
        "tokens_per_step": tokens,
        "step_seconds": step_s,
        "speedup": statistics.median(ratios),
        "speedup_spread": (min(ratios), max(ratios)),
    }


def main(argv: list[str] | None = None) -> dict:
    """``python benchmarks/bench_step.py --model smollm2-135m-instruct --threads 1 ...``"""
    import argparse

    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="tiny")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--steps", type=int, default=3, help="measured steps per fit (+1 warm-up)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--micro-batch",
        type=int,
        default=None,
        help="rows per forward/backward on both sides (TRL: per-device batch, the rest "
        "accumulated; one generation per optimiser step); default: the whole batch",
    )
    args = p.parse_args(argv)
    b = args.prompts * args.group
    if args.micro_batch is not None and (args.micro_batch < 1 or b % args.micro_batch):
        p.error(f"--micro-batch {args.micro_batch} must divide the batch of {b} rollouts")
    torch.set_num_threads(args.threads)
    shape = StepShape(
        prompts_per_step=args.prompts, group_size=args.group, max_new_tokens=args.new_tokens,
        steps=args.steps, rounds=args.rounds, model=args.model, micro_batch=args.micro_batch,
    )  # fmt: skip
    out = run(shape)
    print(
        f"{args.model}, {args.threads} thread(s), {args.prompts}x{args.group} rollouts, "
        f"{args.new_tokens} new tokens: slca {out['tokens_per_s']['slca']:.0f} tok/s, TRL "
        f"{out['tokens_per_s']['trl']:.0f} tok/s, ratio {out['speedup']:.2f} "
        f"(spread {out['speedup_spread'][0]:.2f}-{out['speedup_spread'][1]:.2f}); step "
        f"{out['step_seconds']['slca']:.1f} s vs {out['step_seconds']['trl']:.1f} s; tokens/step "
        f"{out['tokens_per_step']['slca']:.0f} vs {out['tokens_per_step']['trl']:.0f}"
    )
    return out


if __name__ == "__main__":
    main()
