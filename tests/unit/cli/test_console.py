"""What ``slca`` prints (issue 17, part 7): one step-counting bar per fit, noise filtered,
repeated Lightning info lines once, ``slca fit --help`` served from its cache without
importing Lightning, ``slca eval --help`` in plain text, the quickstart logging simulator
counters."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import lightning as L
import pytest
import torch
import yaml
from lightning.pytorch.demos.boring_classes import BoringModel
from torch.utils.data import DataLoader

from slca_lightning.cli import commands as cli
from slca_lightning.cli import evaluate as standalone
from slca_lightning.cli.console import OnceFilter, StepProgressBar, quiet_console
from slca_lightning.cli.help_cache import help_cache_path

ROOT = Path(__file__).resolve().parents[3]


def test_one_bar_counts_optimiser_steps_across_epochs(tmp_path, capsys):
    bar = StepProgressBar("RL")
    trainer = L.Trainer(
        max_steps=7,  # 3 batches per epoch: 3 epochs, one bar
        callbacks=[bar],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,  # RL has no validation loop
        default_root_dir=tmp_path,
        accelerator="cpu",
    )
    data = DataLoader(torch.randn(3, 32), batch_size=1)
    trainer.fit(BoringModel(), train_dataloaders=data)
    assert trainer.current_epoch >= 2 and trainer.global_step == 7
    assert bar.train_progress_bar.total == 7 and bar.train_progress_bar.n == 7
    out = capsys.readouterr().out.replace("\r", "\n")
    assert "RL: 100%" in out and "7/7" in out
    assert "Epoch" not in out and "Training" not in out and "/-" not in out
    assert all(line.startswith("RL:") for line in out.splitlines() if "%|" in line)


def test_noise_warnings_are_dropped_and_others_kept():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_console()
        warnings.warn(
            "You are using the `dataloader_iter` step flavor. Here be dragons.",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning, stacklevel=1)
        warnings.warn("something a user should see", UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something a user should see"]


def test_lightning_info_lines_once_tips_never_other_loggers_untouched():
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    handler = Keep()
    handler.addFilter(OnceFilter())
    rank_zero = logging.getLogger("lightning.pytorch.utilities.rank_zero.test")
    mine = logging.getLogger("slca_lightning.test_console")
    for logger in (rank_zero, mine):
        logger.addHandler(handler)
        logger.setLevel(logging.INFO)
        logger.propagate = False
    try:
        for _ in range(2):
            rank_zero.info("GPU available: False, used: False")
            rank_zero.info("💡 Tip: For seamless cloud logging, try installing litlogger")
            rank_zero.info("`Trainer.fit` stopped: `max_steps=300` reached.")
            rank_zero.warning("a warning")
            mine.info("same line")
    finally:
        for logger in (rank_zero, mine):
            logger.removeHandler(handler)
    assert records == [
        "GPU available: False, used: False",
        "a warning",
        "same line",
        "a warning",
        "same line",
    ]


def run_help(cache: Path, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SLCA_CACHE": str(cache), "COLUMNS": "100", "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, *flags, "-m", "slca_lightning.cli.commands", "fit", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
    )


def test_fit_help_is_cached_and_the_cached_run_imports_no_lightning(tmp_path):
    first = run_help(tmp_path)
    assert first.returncode == 0, first.stderr[-2000:]
    assert first.stdout.startswith("usage:") and "--data.max_turns" in first.stdout
    assert len(list((tmp_path / "help").glob("*.txt"))) == 1
    second = run_help(tmp_path, "-X", "importtime")
    assert second.returncode == 0, second.stderr[-2000:]
    assert second.stdout == first.stdout
    imported = {line.rsplit("|", 1)[-1].strip() for line in second.stderr.splitlines()}
    assert "lightning.pytorch" not in imported and "jsonargparse" not in imported
    assert "slca_lightning.training.checkpoints" in imported  # the command did run


def test_only_plain_help_is_cached(monkeypatch):
    assert help_cache_path(["fit", "--config", "x.yaml", "--help"]) is None
    assert help_cache_path(["fit", "--trainer.max_steps=3"]) is None
    assert help_cache_path(["--help"]) is None  # the command list prints without Lightning
    a = help_cache_path(["fit", "--help"])
    assert a is not None and a == help_cache_path(["fit", "--help"])
    assert help_cache_path(["sft", "--help"]) not in (None, a)
    monkeypatch.setenv("COLUMNS", "57")
    assert help_cache_path(["fit", "--help"]) != a  # help is laid out for the width


def test_eval_help_is_plain_text(capsys):
    try:
        standalone.main(["--help"])
    except SystemExit as done:
        assert done.code == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: slca eval")
    assert "--trust_class_prefix" in out and "slca_lightning.eval.registry" in out
    for markup in ("``", ":mod:", ":func:", ":class:", "::\n"):
        assert markup not in out, markup


def test_plain_text_of_rest_roles():
    text = standalone.plain_text(
        "Run ``slca eval``; see :mod:`a.b` and :func:`~x.y.z` and :meth:`T.m <a.T.m>`::\n\n  code\n"
    )
    assert text == "Run slca eval; see a.b and z and T.m:\n\n  code\n"


def test_quickstart_logs_simulator_stats():
    config = yaml.safe_load((ROOT / "configs" / "quickstart.yaml").read_text())
    paths = [c["class_path"] for c in config["trainer"]["callbacks"]]
    assert "callbacks.SimulatorStats" in paths


def test_eval_errors_are_one_line_with_exit_2(monkeypatch, capsys, tmp_path):
    monkeypatch.delenv("SLCA_DEBUG", raising=False)
    argv = ["slca", "eval", "--model=tiny", "--arg=in_domain_limit", f"--out={tmp_path}"]
    monkeypatch.setattr(sys, "argv", argv)
    with pytest.raises(SystemExit) as done:
        cli.script()
    assert done.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1] == (
        "slca: error: --arg 'in_domain_limit': expected <evaluator>.<option>=<value>"
    )


def test_a_malformed_task_file_is_one_line_with_exit_2(monkeypatch, capsys, tmp_path):
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text('{"id": "a", "question": "q", "tools": [], "gold_calls": [], "x": NaN}\n')
    monkeypatch.delenv("SLCA_DEBUG", raising=False)
    monkeypatch.setattr(
        sys,
        "argv",
        [
            "slca",
            "fit",
            "--model.model=tiny",
            "--data.tasks.class_path=slca_lightning.data.task_sources.JsonlTasks",
            f"--data.tasks.init_args.path={tasks}",
            "--trainer.max_steps=1",
            "--trainer.logger=false",
            "--trainer.enable_checkpointing=false",
            f"--trainer.default_root_dir={tmp_path}",
        ],
    )
    with pytest.raises(SystemExit) as done:
        cli.script()
    assert done.value.code == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert last == (
        f"slca: error: {tasks}, line 1, field x: NaN is not a finite number "
        "(JSON has no NaN or Infinity)"
    )
