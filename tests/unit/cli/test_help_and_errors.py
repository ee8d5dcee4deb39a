"""The ``slca`` help cache (served without importing Lightning), ``slca eval --help`` in plain
text, one-line eval and task-file errors, the quickstart logging simulator counters."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from slca_lightning.cli import commands as cli
from slca_lightning.cli import evaluate as standalone
from slca_lightning.cli.help_cache import help_cache_path

ROOT = Path(__file__).resolve().parents[3]


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
