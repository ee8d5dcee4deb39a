"""Time per phase of an ``slca fit`` step, from the module's own ``time/*`` metrics.

A real in-process fit: ``slca_lightning.cli.commands.main(args, run=False)`` then
``trainer.fit`` with the quickstart's model and data settings (``configs/quickstart.yaml``
without its loggers, checkpoints and evaluation callbacks), i.e. HFEngine sampling from the
policy, the agent loop running the synthetic suite's tools through the schema-guided
simulator, the default MaskRunSegmenter, HierarchicalReward and SLCARouter, the
reference model for the k3 term. A callback records the ``time/*`` values each step
logs; the first step (warm-up: lazy imports, first kernels) is dropped.

What each metric covers (``module.py`` / ``rollout/datamodule.py``):

- ``time/rollout``: wall time of the agent loop for the batch; it contains
  ``time/generate`` (engine calls) and ``time/tools`` (tool execution); the rest of it is
  chat rendering, parsing and episode bookkeeping;
- ``time/reward_and_advantage``: ``reward_head(episodes)`` + ``segmenter(batch)`` +
  ``router.route(...)`` + moving the token advantages to the device: the framework's
  method-specific work (segmenter + reward head + router);
- ``time/old_logprobs``: 0 with one PPO epoch and one mini-batch (ratio 1, nothing run);
- ``time/ref_logprobs``: the reference model's no-grad forward over the batch;
- ``time/update``: forward, loss, backward, clipping, optimiser step(s);
- ``time/diagnostics``: the advantage-contamination and summary-leakage figures (one
  extra router call), logged but not part of the method;
- ``time/step``: the sum of the six above (excludes Lightning's own loop, logging and
  the collation of episodes into tensors).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

import lightning as L

PHASES = (
    "time/rollout",
    "time/generate",
    "time/tools",
    "time/reward_and_advantage",
    "time/diagnostics",
    "time/old_logprobs",
    "time/ref_logprobs",
    "time/update",
)


@dataclass
class FitShape:
    """Settings of the benchmarked fit (defaults: the quickstart's)."""

    model: str = "tiny-sft"
    steps: int = 5
    prompts_per_step: int = 4
    group_size: int = 8
    temperature: float = 0.7
    max_turns: int = 3
    max_new_tokens: int = 64
    micro_batch_size: int = 16
    n_train: int = 256


class PhaseRecorder(L.Callback):
    """Keeps the ``time/*`` values every training step logged."""

    def __init__(self) -> None:
        self.steps: list[dict[str, float]] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        got = {k: float(v) for k, v in trainer.callback_metrics.items() if k.startswith("time/")}
        got["train/tokens"] = float(trainer.callback_metrics.get("train/tokens", 0.0))
        self.steps.append(got)


def fit_args(shape: FitShape, root: str) -> list[str]:
    """The CLI arguments: quickstart's model/data settings, no loggers or callbacks."""
    return [
        f"--model.model={shape.model}",
        "--model.learning_rate=1e-4",
        f"--model.temperature={shape.temperature}",
        "--model.kl_coef=0.001",
        f"--model.micro_batch_size={shape.micro_batch_size}",
        "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
        f"--data.tasks.init_args.n_train={shape.n_train}",
        "--data.tasks.init_args.n_heldout=4",
        f"--data.prompts_per_step={shape.prompts_per_step}",
        f"--data.group_size={shape.group_size}",
        f"--data.max_turns={shape.max_turns}",
        f"--data.max_new_tokens={shape.max_new_tokens}",
        "--data.max_response_tokens=384",
        "--data.max_tool_response_tokens=128",
        *bare_trainer_args(shape.steps + 1, root),
    ]


def bare_trainer_args(max_steps: int, root: str) -> list[str]:
    """Seed 0, one CPU device, ``max_steps``; no logger, checkpoints, bars or summary."""
    return [
        "--seed_everything=0",
        "--trainer.accelerator=cpu",
        "--trainer.devices=1",
        f"--trainer.max_steps={max_steps}",
        "--trainer.logger=false",
        "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={root}",
    ]


def run(shape: FitShape, root: str) -> dict:
    """Fit ``shape.steps + 1`` steps; return per-phase medians and fractions of the step."""
    from slca_lightning.cli.commands import main

    cli = main(fit_args(shape, root), run=False)
    recorder = PhaseRecorder()
    cli.trainer.callbacks.append(recorder)
    cli.trainer.fit(cli.model, cli.datamodule)
    steps = recorder.steps[1:]  # drop the warm-up step
    if not steps or any("time/step" not in s for s in steps):
        raise RuntimeError(f"the fit logged no time/step values: {recorder.steps}")
    fractions = {
        k: statistics.median(s.get(k, 0.0) / s["time/step"] for s in steps) for k in PHASES
    }
    return {
        "shape": shape,
        "steps": len(steps),
        "step_seconds": statistics.median(s["time/step"] for s in steps),
        "fractions": fractions,
        "framework_fraction": statistics.median(s["time/framework_fraction"] for s in steps),
        "framework_fraction_max": max(s["time/framework_fraction"] for s in steps),
        "reward_and_advantage_ms": 1000
        * statistics.median(
            s["time/reward_and_advantage"] + s.get("time/diagnostics", 0.0) for s in steps
        ),
        "train_tokens": statistics.median(s["train/tokens"] for s in steps),
    }
