"""Two optimiser steps of `slca fit` with rollouts from the real vLLM engine (CPU build).

Real parts: LightningCLI in-process, ``data.engine`` chosen by class_path, vLLM sampling,
the weight sync after each optimiser step, the trainer's recomputation of ``old_logprobs``
and the truncated importance weight. Boundary: the reward head is TokenParityReward (as in
tests/integration/test_fit.py) because a random tiny model earns identical HierR rewards.
"""

from __future__ import annotations

import csv

import pytest
import torch

from slca_lightning.cli.commands import main
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.hf_engine import HFEngine
from slca_lightning.testing.rewards import TokenParityReward

pytestmark = pytest.mark.vllm

ARGS = [
    "--model.model=tiny",
    "--model.learning_rate=1e-2",
    "--model.micro_batch_size=4",
    "--model.tis_cap=2.0",
    "--data.prompts_per_step=2",
    "--data.group_size=3",
    "--data.max_turns=2",
    "--data.max_new_tokens=12",
    "--data.max_response_tokens=64",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=16",
    "--data.tasks.init_args.n_heldout=4",
    "--data.tasks.init_args.families=[math]",
    "--data.engine.class_path=slca_lightning.rollout.vllm_engine.VLLMEngine",
    "--data.engine.init_args.dtype=float32",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.log_every_n_steps=1",
    "--trainer.max_steps=2",
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
]


def test_two_step_fit_with_vllm_rollouts_syncs_weights_every_step(tmp_path, vllm_module):
    log_dir = f"--trainer.logger.init_args.save_dir={tmp_path}"
    cli = main([*ARGS, log_dir, f"--trainer.default_root_dir={tmp_path}"], run=False)
    cli.model.reward_head = TokenParityReward()
    engine = cli.datamodule.engine
    assert type(engine).__name__ == "VLLMEngine"
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2
    assert engine.synced_version == 1  # synced before the rollout of step 2
    with open(next(tmp_path.rglob("metrics.csv"))) as fh:
        rows = list(csv.DictReader(fh))
    mismatch = [
        float(r["rollout/logprob_mismatch"]) for r in rows if r.get("rollout/logprob_mismatch")
    ]
    syncs = [float(r["time/weight_sync"]) for r in rows if r.get("time/weight_sync")]
    tis = [float(r["rollout/tis_weight_mean"]) for r in rows if r.get("rollout/tis_weight_mean")]
    assert len(mismatch) == 2 and max(mismatch) < 1e-4  # fp32 on CPU: engine ≈ trainer
    assert len(syncs) == 2 and syncs[0] == 0.0 and min(syncs[1:]) > 0.0
    assert len(tis) == 2 and all(abs(w - 1.0) < 1e-3 for w in tis)
    # the engine now serves the latest weights: greedy agrees with the policy itself
    engine.policy_version = cli.trainer.global_step
    engine.before_rollout()
    tok, policy = cli.model.tokenizer, cli.model.policy
    prompts = [tok.encode("hello world", add_special_tokens=False)]
    greedy = SamplingConfig(max_new_tokens=8, temperature=0.0, stop_strings=[])
    with torch.no_grad():
        v, h = (
            engine.generate(prompts, greedy)[0],
            HFEngine(policy, tok).generate(prompts, greedy)[0],
        )
    assert v.token_ids == h.token_ids
    assert max(abs(a - b) for a, b in zip(v.logprobs, h.logprobs)) < 1e-4
    engine.close()
