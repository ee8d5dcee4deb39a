"""Parse errors that say what to do (:mod:`slca_lightning.cli.parse_errors`), through the real
``slca`` entry point: a wrong class path names the classes of its slot, a YAML syntax error
names the file and line, a logger without its package names the ``pip install``."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slca_lightning.cli import commands as cli
from slca_lightning.cli.parse_errors import class_choices, explain

ROOT = Path(__file__).resolve().parents[3]
BASE = ("fit", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--trainer.max_steps=0")


def last_error(monkeypatch, capsys, *argv: str) -> str:
    monkeypatch.setattr(sys, "argv", ["slca", *argv])
    monkeypatch.delenv("SLCA_DEBUG", raising=False)
    with pytest.raises(SystemExit) as done:
        cli.script()
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and "usage:" not in err
    return err.strip().splitlines()[-1]


def test_a_wrong_class_path_names_the_closest_class_and_every_class_of_the_slot(
    monkeypatch, capsys
):
    line = last_error(
        monkeypatch, capsys, *BASE, "--model.router", "slca_lightning.advantages.GRPORoutr"
    )
    assert line.startswith(
        "slca: error: model.router: no class slca_lightning.advantages.GRPORoutr. "
        "did you mean slca_lightning.GRPORouter?"
    )
    for router in ("SLCARouter", "ToolPORouter", "RLTRRouter", "MTGRPORouter"):
        assert f"slca_lightning.{router}" in line


def test_a_yaml_syntax_error_names_the_file_line_and_column(monkeypatch, capsys, tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("model:\n  model: [tiny\ndata:\n  group_size: 2\n")
    line = last_error(monkeypatch, capsys, *BASE, "--config", str(bad))
    assert line.startswith(f"slca: error: config file {bad}, line 3, column 5: YAML syntax error")
    assert "<unicode string>" not in line


@pytest.mark.skipif(importlib.util.find_spec("wandb") is not None, reason="wandb is installed")
def test_a_logger_whose_package_is_missing_names_the_package():
    # a subprocess: Lightning's loggers keep handlers on streams earlier in-process tests closed
    done = subprocess.run(
        [sys.executable, "-m", "slca_lightning.cli.commands", *BASE,
         "--trainer.logger+=lightning.pytorch.loggers.WandbLogger"],
        capture_output=True, text=True, timeout=300, cwd=ROOT,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )  # fmt: skip
    assert done.returncode == 2 and "Traceback" not in done.stderr
    line = done.stderr.strip().splitlines()[-1]
    assert line == (
        "slca: error: trainer.logger: lightning.pytorch.loggers.WandbLogger needs the wandb "
        "package: pip install wandb"
    )


def test_the_classes_of_a_slot_are_its_concrete_subclasses():
    routers = class_choices("slca_lightning.advantages.base.AdvantageRouter")
    assert "slca_lightning.SLCARouter" in routers and "slca_lightning.GRPORouter" in routers
    assert not any(r.endswith(".AdvantageRouter") for r in routers)  # the abstract base
    assert explain("something else went wrong") == "something else went wrong"
