"""Distributed training on CPU (gloo), through Lightning's own launcher, strategies and checkpoints.

1. A sharded (DCP) checkpoint written by 2 FSDP2 processes (``ModelParallelStrategy``,
   configs/overlays/fsdp2.yaml) resumes on 1 process, i.e. a different number of devices:
   the weights, the optimiser state and the data module's position come back, and training
   continues to the next step.
2. DDP on 2 CPU processes: each rank samples its own whole groups, gradients are averaged,
   so the replicas stay identical after every optimiser step.

Real parts: LightningCLI in a fresh interpreter (Lightning re-launches it once per rank),
ModelParallelStrategy / DDPStrategy with gloo, ``fully_shard``, torch.distributed.checkpoint,
HFEngine rollouts. Boundary: the reward head is TokenParityReward (a random tiny model earns no
HierR variance). Each process writes what it saw to a JSON file that the test reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

WORKER = textwrap.dedent(
    """
    import hashlib, json, os, sys
    import lightning as L
    import torch
    from slca_lightning.cli.commands import main

    mode, out = sys.argv[1], sys.argv[2]
    ckpt = os.path.join(os.path.dirname(out), "sharded.ckpt")
    devices, steps = {"fsdp2": (2, 2), "resume": (1, 3), "ddp": (2, 2)}[mode]
    if mode == "ddp":
        strategy = ["--trainer.strategy=ddp"]
    else:
        strategy = ["--config", "configs/overlays/fsdp2.yaml",
                    f"--trainer.strategy.init_args.data_parallel_size={devices}",
                    "--trainer.strategy.init_args.tensor_parallel_size=1",
                    "--model.fsdp_param_dtype=null"]

    def full(module):
        return {n: (p.full_tensor() if hasattr(p, "full_tensor") else p).detach().clone()
                for n, p in module.named_parameters() if n.startswith("policy.")}

    def digest(params):
        h = hashlib.sha256()
        for n in sorted(params):
            h.update(params[n].float().numpy().tobytes())
        return h.hexdigest()

    class Record(L.Callback):
        def __init__(self):
            self.steps, self.start = [], {}

        def on_train_start(self, trainer, pl_module):
            opt = trainer.optimizers[0]
            self.start = {
                "global_step": trainer.global_step,
                "batches_served": trainer.datamodule.batches_served,
                "adam_steps": sorted({float(s["step"]) for s in opt.state.values()}),
                "digest": digest(full(pl_module)),
            }

        def on_train_batch_end(self, trainer, pl_module, *args):
            batch = pl_module.last_rollout.batch
            self.steps.append({"groups": sorted({int(g) for g in batch.group_ids.tolist()}),
                               "rows": int(batch.batch_size)})

    rec = Record()
    cli = main([
        *strategy,
        "--trainer.accelerator=cpu", f"--trainer.devices={devices}",
        f"--trainer.max_steps={steps}",
        "--trainer.logger=false", "--trainer.enable_checkpointing=false",
        "--trainer.enable_progress_bar=false", "--trainer.enable_model_summary=false",
        f"--trainer.default_root_dir={os.path.dirname(out)}",
        "--model.model=tiny", "--model.learning_rate=1e-2", "--model.micro_batch_size=4",
        "--model.kl_coef=0.01",
        "--model.reward_head=slca_lightning.testing.rewards.TokenParityReward",
        "--data.prompts_per_step=4", "--data.group_size=2", "--data.max_turns=1",
        "--data.max_new_tokens=8", "--data.max_response_tokens=32",
        "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
        "--data.tasks.init_args.n_train=16", "--data.tasks.init_args.n_heldout=4",
        "--data.tasks.init_args.families=[math]",
    ], run=False)
    cli.trainer.callbacks.append(rec)
    cli.trainer.fit(cli.model, cli.datamodule, ckpt_path=ckpt if mode == "resume" else None)
    from torch.distributed.fsdp import FSDPModule

    for m in cli.model.modules():  # FSDP2 leaves the roots unsharded after forward
        if isinstance(m, FSDPModule):
            m.reshard()
    if mode == "fsdp2":
        cli.trainer.save_checkpoint(ckpt)
    report = {
        "rank": cli.trainer.global_rank, "world": cli.trainer.world_size,
        "global_step": cli.trainer.global_step, "steps": rec.steps, "start": rec.start,
        "batches_served": cli.datamodule.batches_served, "digest": digest(full(cli.model)),
        "checkpoint_is_dir": os.path.isdir(ckpt),
    }
    with open(f"{out}.{cli.trainer.global_rank}.json", "w") as f:
        json.dump(report, f)
    """
)


def run_worker(tmp_path: Path, mode: str, ranks: int) -> list[dict]:
    script = tmp_path / "worker.py"
    script.write_text(WORKER)
    root = Path(__file__).resolve().parents[2]
    # In-process fits of earlier tests may leave Lightning's launcher variables behind.
    leaked = ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK")
    env = {k: v for k, v in os.environ.items() if k not in leaked and not k.startswith("PL_")}
    env.update(PYTHONPATH=str(root), OMP_NUM_THREADS="1")
    out = tmp_path / mode
    proc = subprocess.run(
        [sys.executable, str(script), mode, str(out)],
        cwd=root, env=env, capture_output=True, text=True, timeout=170,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(Path(f"{out}.{r}.json").read_text()) for r in range(ranks)]


@pytest.mark.timeout(360)
def test_sharded_checkpoint_of_two_processes_resumes_on_one_and_continues(tmp_path: Path):
    two = run_worker(tmp_path, "fsdp2", ranks=2)
    assert all(r["world"] == 2 and r["global_step"] == 2 for r in two)
    assert two[0]["checkpoint_is_dir"]  # a DCP directory of shards, not one file
    assert two[0]["digest"] == two[1]["digest"]  # gathered full weights agree across ranks
    (one,) = run_worker(tmp_path, "resume", ranks=1)
    assert one["world"] == 1
    start = one["start"]
    assert start["global_step"] == 2 and start["batches_served"] == 2
    assert start["digest"] == two[0]["digest"]  # the resharded weights are exactly the saved ones
    assert start["adam_steps"] == [2.0]  # the optimiser state came back too
    assert one["global_step"] == 3 and one["batches_served"] == 3  # and it trained on
    assert [s["rows"] for s in one["steps"]] == [8]  # all 4 prompts × 2 on the single rank
    assert one["steps"][0]["groups"] == [8, 9, 10, 11]  # batch index 2, as the run would go on
    assert one["digest"] != start["digest"]


@pytest.mark.timeout(200)
def test_ddp_two_cpu_processes_keep_replicas_identical(tmp_path: Path):
    reports = run_worker(tmp_path, "ddp", ranks=2)
    for rep in reports:
        assert rep["world"] == 2 and rep["global_step"] == 2
        assert [s["rows"] for s in rep["steps"]] == [4, 4]  # 2 of the 4 prompts × group 2
    assert reports[0]["digest"] == reports[1]["digest"]  # gradients were averaged
    assert reports[0]["digest"] != reports[0]["start"]["digest"]  # and the weights moved
    for step in range(2):
        a, b = (rep["steps"][step] for rep in reports)
        assert a["groups"] and not set(a["groups"]) & set(b["groups"])  # each rank its groups
