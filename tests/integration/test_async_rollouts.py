"""Asynchronous rollouts (``data.max_staleness``): batches generated ahead of training by a
worker thread with its own copy of the policy, their staleness bounded and logged, the lag
corrected by the truncated importance weight; ``max_staleness: 0`` is the synchronous
stream. The kill-and-resume check with SIGKILL is in ``test_resume_sigkill.py``."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch

from slca_lightning.cli.commands import main
from slca_lightning.rollout.async_stream import AsyncRolloutStream
from slca_lightning.rollout.datamodule import RolloutStream

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config", str(ROOT / "configs" / "quickstart.yaml"),
    "--model.model=tiny", "--trainer.callbacks=[]", "--trainer.logger=false",
    "--data.prompts_per_step=2", "--data.group_size=3", "--data.max_turns=1",
    "--data.max_new_tokens=12", "--data.max_response_tokens=24", "--model.micro_batch_size=6",
    "--trainer.enable_checkpointing=false", "--threads=1", "--model.learning_rate=1e-2",
]  # fmt: skip


def fit(tmp_path: Path, *extra: str, steps: int = 4):
    logger = [
        "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
        f"--trainer.logger.init_args.save_dir={tmp_path}",
    ]
    return main(
        ["fit", *TINY, f"--trainer.max_steps={steps}", f"--trainer.default_root_dir={tmp_path}",
         *logger, *extra]
    )  # fmt: skip


def logged(tmp_path: Path) -> dict[int, dict[str, float]]:
    rows: dict[int, dict[str, float]] = {}
    for path in tmp_path.rglob("metrics.csv"):
        with open(path) as fh:
            for row in csv.DictReader(fh):
                step = rows.setdefault(int(row["step"]), {})
                step.update({k: float(v) for k, v in row.items() if v not in ("", None)})
    return rows


def test_one_step_ahead_trains_every_batch_once_with_staleness_at_most_one(tmp_path):
    cli = fit(tmp_path, "--data.max_staleness=1", "--model.tis_cap=2.0")
    stream = cli.datamodule.stream
    assert isinstance(stream, AsyncRolloutStream) and stream.thread is None  # closed at end
    assert cli.trainer.global_step == 4 and cli.datamodule.batches_served == 4
    # the worker samples with its own copy of the weights, never the trainer's tensors
    assert stream.model is not cli.model.policy
    assert all(
        a.data_ptr() != b.data_ptr()
        for a, b in zip(stream.model.parameters(), cli.model.policy.parameters())
    )
    rows = [r for _, r in sorted(logged(tmp_path).items()) if "rollout/staleness" in r]
    assert [r["rollout/batch_index"] for r in rows] == [0, 1, 2, 3]
    # batch 0 by the start weights; batch i ≥ 1 sampled while step i − 1 trained
    assert [r["rollout/staleness"] for r in rows] == [0, 1, 1, 1]
    assert [r["rollout/policy_version"] for r in rows] == [0, 0, 1, 2]
    # the lag is measured and corrected: behaviour vs trainer log-probs, capped IS weights
    assert all(r["rollout/logprob_mismatch"] > 0 for r in rows[1:])
    assert all(0 < r["rollout/tis_weight_mean"] <= 2.0 for r in rows)
    assert all("time/rollout_wait" in r for r in rows)


def test_without_staleness_the_stream_is_the_synchronous_one_and_the_run_unchanged(tmp_path):
    a = fit(tmp_path / "a", "--data.max_staleness=0", steps=2)
    b = fit(tmp_path / "b", steps=2)
    assert type(a.datamodule.stream) is RolloutStream
    for p, q in zip(a.model.policy.parameters(), b.model.policy.parameters()):
        assert torch.equal(p, q)
    assert not any("rollout/staleness" in r for r in logged(tmp_path / "a").values())


def test_staleness_without_an_importance_cap_is_refused_before_any_rollout(tmp_path):
    with pytest.raises(ValueError, match=r"data.max_staleness=1 .* set model.tis_cap"):
        fit(tmp_path, "--data.max_staleness=1", steps=1)
