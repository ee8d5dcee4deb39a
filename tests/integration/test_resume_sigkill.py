"""SIGKILL in the middle of a step, resume from the last checkpoint: every later metric equals
the uninterrupted run's (issue 17).

Three real ``python -m slca_lightning.cli.commands fit`` processes on one short config (the tiny
model, a checkpoint every step, CSV logs, the schema-guided simulator over the built-in
tools with its SQLite cache on disk): the uninterrupted run; a run that is SIGKILLed during
the rollout of step ``KILL_AT``, after that step's first tool calls were answered and
written to the cache; and the resume of that run from its last checkpoint, on the same
cache file. Every metric the resumed run logs (wall-clock ``time/*`` aside) must equal the
uninterrupted run's at the same step.

The policy samples for real (HFEngine); :class:`CallingEngine` only rewrites each first
turn into a call of ``add`` whose arguments are drawn from the sampled ids, so the
simulator and its cache serve real calls that depend on the sampler's random stream. The
kill comes from inside the process (``SLCA_KILL_AT_STEP``) so that it lands at the same
point of the step on every machine; it is a real SIGKILL: no handler, no cleanup.
"""

from __future__ import annotations

import csv
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from slca_lightning.calls.result_cache import SimulatorCache
from slca_lightning.rollout.engine import Generation
from slca_lightning.rollout.hf_engine import HFEngine

STEPS = 4
KILL_AT = 2  # optimiser steps done when the kill comes (the third step is running)
HERE = Path(__file__).resolve().parent

CONFIG = """\
seed_everything: 0
trainer:
  accelerator: cpu
  devices: 1
  max_steps: {steps}
  log_every_n_steps: 1
  enable_progress_bar: false
  enable_model_summary: false
  default_root_dir: {root}
  logger:
    class_path: lightning.pytorch.loggers.CSVLogger
    init_args: {{save_dir: {root}, name: logs}}
  callbacks:
    - class_path: lightning.pytorch.callbacks.ModelCheckpoint
      init_args: {{dirpath: {root}/ckpt, every_n_train_steps: 1, save_top_k: -1}}
model:
  model: tiny
  learning_rate: 1.0e-2
  micro_batch_size: 3
  kl_coef: 0.01
  reward_head:
    class_path: slca_lightning.testing.rewards.TokenParityReward
data:
  engine:
    class_path: test_resume_sigkill.CallingEngine
  tasks:
    class_path: slca_lightning.data.task_sources.SyntheticTasks
    init_args: {{n_train: 16, n_heldout: 4, families: [math], irrelevant_fraction: 0.0}}
  simulator:
    class_path: slca_lightning.tools.simulator.SchemaGuidedSimulator
    init_args:
      backend:
        class_path: slca_lightning.tools.tool_backends.PythonBackend
      cache: true
      cache_path: {cache}
  prompts_per_step: 2
  group_size: 3
  max_turns: 2
  max_new_tokens: 80
  max_response_tokens: 320
"""


class CallingEngine(HFEngine):
    """HFEngine whose first turns become a call of ``add`` with arguments drawn from the
    sampled ids (log-probs are recomputed by the module: ``logprobs_trusted = False``).
    With ``SLCA_KILL_AT_STEP=k`` in the environment the process SIGKILLs itself when the
    rollout of the step after ``k`` optimiser steps asks for its second turn."""

    logprobs_trusted = False

    def generate(self, prompts, sampling):
        gens = super().generate(prompts, sampling)
        kill = os.environ.get("SLCA_KILL_AT_STEP")
        out = []
        for ids, gen in zip(prompts, gens):
            context = self.tokenizer.decode(ids, skip_special_tokens=False)
            if context.count("<|im_start|>assistant") > 1:  # a later turn: as sampled
                if kill is not None and self.policy_version == int(kill):
                    os.kill(os.getpid(), signal.SIGKILL)
                out.append(gen)
                continue
            a, b = sum(gen.token_ids) % 5, len(gen.token_ids) % 3
            text = (
                f'<tool_call>\n{{"name": "add", "arguments": {{"a": {a}, "b": {b}}}}}\n</tool_call>'
            )
            token_ids = self.tokenizer.encode(text, add_special_tokens=False)
            token_ids.append(self.tokenizer.eos_token_id)
            out.append(Generation(token_ids, [0.0] * len(token_ids), "stop", "eos"))
        return out


def fit(root: Path, cache: Path, *extra: str, kill_at: int | None = None):
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yaml"
    config.write_text(CONFIG.format(steps=STEPS, root=root, cache=cache))
    env = dict(
        os.environ,
        OMP_NUM_THREADS="1",
        PYTHONPATH=f"{HERE}{os.pathsep}" + os.environ.get("PYTHONPATH", ""),
    )
    env.pop("SLCA_KILL_AT_STEP", None)
    if kill_at is not None:
        env["SLCA_KILL_AT_STEP"] = str(kill_at)
    cmd = [sys.executable, "-m", "slca_lightning.cli.commands", "fit", f"--config={config}", *extra]
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def finish(proc: subprocess.Popen, timeout: float = 240) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(errors="replace")


def metrics(root: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    for path in sorted(root.rglob("metrics.csv")):
        with open(path) as f:
            for row in csv.DictReader(f):
                step = rows.setdefault(int(row["step"]), {})
                step.update({k: float(v) for k, v in row.items() if v != "" and k != "step"})
    return rows


@pytest.mark.slow
def test_sigkill_mid_step_then_resume_logs_the_same_metrics(tmp_path):
    full = fit(tmp_path / "full", tmp_path / "full.sqlite")
    killed = fit(tmp_path / "killed", tmp_path / "shared.sqlite", kill_at=KILL_AT)
    code, log = finish(killed)
    assert code == -signal.SIGKILL, log[-3000:]
    ckpts = sorted((tmp_path / "killed" / "ckpt").glob("*.ckpt"))
    assert [p.name for p in ckpts] == [f"epoch=0-step={k}.ckpt" for k in range(1, KILL_AT + 1)]
    resumed = fit(tmp_path / "resumed", tmp_path / "shared.sqlite", f"--ckpt_path={ckpts[-1]}")
    code, log = finish(resumed)
    assert code == 0, log[-3000:]
    code, log = finish(full)
    assert code == 0, log[-3000:]

    a, b = metrics(tmp_path / "full"), metrics(tmp_path / "resumed")
    later = sorted(s for s in a if s >= KILL_AT)
    assert later and sorted(b) == later, (sorted(a), sorted(b))
    compared = 0
    for step in later:
        keys = {k for k in a[step] if not k.startswith("time/")}
        assert keys == {k for k in b[step] if not k.startswith("time/")}, step
        for key in sorted(keys):
            assert b[step][key] == a[step][key], (step, key, a[step][key], b[step][key])
            compared += 1
    assert compared >= 40 * len(later), compared
    # the first turns' calls were real calls the simulator answered and cached on disk
    assert all(a[step]["rollout/tool_calls_per_episode"] == 1.0 for step in later)
    assert len(SimulatorCache(str(tmp_path / "shared.sqlite"))) > 0


@pytest.mark.slow
def test_sigkill_with_asynchronous_rollouts_resumes_every_batch_exactly_once(tmp_path):
    """``data.max_staleness: 1``: the worker thread generating batch 3 (with the weights of 2
    updates) SIGKILLs the process mid-rollout. The resumed run starts at the checkpoint's
    first untrained batch: over the kept checkpoint and the resumed run each batch index
    0…STEPS−1 is trained exactly once (batches generated ahead are dropped, not trained)."""
    import torch

    stale = ("--data.max_staleness=1", "--model.tis_cap=2.0")
    killed = fit(tmp_path / "killed", tmp_path / "shared.sqlite", *stale, kill_at=KILL_AT)
    code, log = finish(killed)
    assert code == -signal.SIGKILL, log[-3000:]
    ckpts = sorted((tmp_path / "killed" / "ckpt").glob("*.ckpt"), key=lambda p: p.stat().st_mtime)
    assert ckpts, log[-3000:]
    state = torch.load(ckpts[-1], map_location="cpu", weights_only=False)
    served = state["datamodule_hyper_parameters"] if False else None
    served = next(v["batches_served"] for k, v in state.items() if "RolloutDataModule" in k)
    assert 1 <= served < STEPS
    before = metrics(tmp_path / "killed")
    kept = sorted(int(r["rollout/batch_index"]) for s, r in before.items() if s < served)
    assert kept == list(range(served))
    resumed = fit(
        tmp_path / "resumed", tmp_path / "shared.sqlite", *stale, f"--ckpt_path={ckpts[-1]}"
    )
    code, log = finish(resumed)
    assert code == 0, log[-3000:]
    after = metrics(tmp_path / "resumed")
    indices = sorted(
        int(r["rollout/batch_index"]) for r in after.values() if "rollout/batch_index" in r
    )
    assert kept + indices == list(range(STEPS))
    assert all(r["rollout/staleness"] <= 1 for r in after.values() if "rollout/staleness" in r)
