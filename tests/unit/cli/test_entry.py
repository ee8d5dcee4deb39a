"""The ``slca`` console script exits with status 0 (a returned CLI object would exit 1)."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import entry_points

import pytest


def test_console_script_points_at_script() -> None:
    (ep,) = [e for e in entry_points(group="console_scripts") if e.name == "slca"]
    assert ep.value == "slca_lightning.cli.commands:script"


def test_script_returns_none_so_exit_status_is_zero(monkeypatch) -> None:
    from slca_lightning.cli import commands as cli

    calls = []
    monkeypatch.setattr(cli, "main", lambda *a, **k: calls.append(1) or object())
    assert cli.script() is None
    assert calls == [1]


@pytest.mark.parametrize("argv", [["--help"], ["fit", "--help"]])
def test_module_entry_exits_zero(argv) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "slca_lightning.cli.commands", *argv],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "fit" in out.stdout
