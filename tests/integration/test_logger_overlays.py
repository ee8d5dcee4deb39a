"""The W&B and MLflow overlays run a real fit with Lightning's own loggers, offline: W&B in its
offline mode (a local run folder, no account, no network), MLflow into a local SQLite store. Each
test is skipped where its package is not installed (the ``loggers`` extra installs both)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from slca_lightning.cli.commands import main

ROOT = Path(__file__).resolve().parents[2]
TINY = [
    "--config", str(ROOT / "configs" / "quickstart.yaml"),
    "--model.model=tiny", "--trainer.max_steps=2", "--trainer.callbacks=[]",
    "--data.prompts_per_step=2", "--data.group_size=2", "--data.max_turns=1",
    "--data.max_new_tokens=8", "--data.max_response_tokens=16", "--model.micro_batch_size=4",
    "--trainer.enable_checkpointing=false", "--threads=1",
]  # fmt: skip


def fit(overlay: str, tmp_path: Path, monkeypatch):
    """The overlay's relative paths (runs/...) land in ``tmp_path``."""
    monkeypatch.chdir(tmp_path)
    return main(["fit", *TINY, "--config", str(ROOT / "configs" / "overlays" / overlay)])


@pytest.mark.skipif(importlib.util.find_spec("wandb") is None, reason="wandb not installed")
def test_the_wandb_overlay_logs_a_run_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    cli = fit("wandb.yaml", tmp_path, monkeypatch)
    assert cli.trainer.global_step == 2
    import wandb

    wandb.finish()
    # What the process's exit does: stop W&B's service process and wait for it, which closes the
    # run's log. finish() alone returns before the service has flushed it (under load the file
    # can still hold only its header).
    wandb.teardown()
    (run,) = tmp_path.rglob("offline-run-*/run-*.wandb")  # the run's log, for `wandb sync`
    logged = run.read_bytes()  # protobuf records: the metric names are stored as text
    assert b"train/loss" in logged and b"reward/total" in logged
    assert list(tmp_path.rglob("metrics.csv"))  # the CSV files the reports read stay


@pytest.mark.skipif(importlib.util.find_spec("mlflow") is None, reason="mlflow not installed")
def test_the_mlflow_overlay_logs_a_run_to_a_sqlite_store(tmp_path, monkeypatch):
    cli = fit("mlflow.yaml", tmp_path, monkeypatch)
    assert cli.trainer.global_step == 2
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'runs' / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "slca_lightning"]
    (run,) = client.search_runs([experiment.experiment_id])
    assert {"train/loss", "reward/total"} <= set(run.data.metrics)
    assert len(client.get_metric_history(run.info.run_id, "train/loss")) == 2
