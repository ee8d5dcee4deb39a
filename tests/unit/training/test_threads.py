"""The thread-count setting: the load-aware default, OMP_NUM_THREADS, ``--threads`` in
``slca fit`` (logged; the caller's own count is back once ``main`` returns)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import torch

from slca_lightning.config.checks import ConfigError
from slca_lightning.training import threads

ROOT = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize(
    ("cores", "load", "want"),
    [(2, 0.0, 2), (2, 0.4, 2), (2, 0.6, 1), (2, 1.4, 1), (2, 7.0, 1), (16, 3.6, 12), (1, 0, 1)],
)
def test_default_leaves_the_busy_cores(cores, load, want):
    assert threads.threads_for_load(cores, load) == want


def test_setting_beats_environment_beats_rule(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert threads.choose_threads(2) == (2, "the threads setting")
    assert threads.choose_threads(None) == (3, "OMP_NUM_THREADS")
    monkeypatch.delenv("OMP_NUM_THREADS")
    monkeypatch.setattr(threads.os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    monkeypatch.setattr(threads, "_cores", lambda: 2)
    n, why = threads.choose_threads(None)
    assert n == 1 and "2 cores - load 1.20" in why


@pytest.mark.parametrize("bad", ["0", "two", "-1"])
def test_bad_environment_is_named(monkeypatch, bad):
    monkeypatch.setenv("OMP_NUM_THREADS", bad)
    with pytest.raises(ValueError, match="OMP_NUM_THREADS"):
        threads.choose_threads(None)
    with pytest.raises(ValueError, match="threads must be"):
        threads.choose_threads(0)


def test_fit_applies_and_logs_threads_then_restores(tmp_path, caplog, monkeypatch):
    from slca_lightning.cli.commands import main

    seen = []
    real = torch.set_num_threads
    monkeypatch.setattr(torch, "set_num_threads", lambda n: (seen.append(n), real(n)))
    before = torch.get_num_threads()
    config = ["--config", str(ROOT / "configs/quickstart.yaml")]
    with caplog.at_level(logging.INFO, "slca_lightning.training.threads"):
        main([*config, "--threads", "1", f"--trainer.default_root_dir={tmp_path}"], run=False)
    assert seen[0] == 1 and "1 torch thread (the threads setting)" in caplog.text
    assert torch.get_num_threads() == before
    with pytest.raises((ConfigError, SystemExit)):
        main([*config, "--threads", "0", f"--trainer.default_root_dir={tmp_path}"], run=False)
