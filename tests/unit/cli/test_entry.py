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
    monkeypatch.setattr(sys, "argv", ["slca", "fit", "--trainer.max_steps=1"])
    assert cli.script() is None
    assert calls == [1]


@pytest.mark.parametrize("argv", [[], ["--help"], ["-h"]])
def test_slca_alone_and_help_list_every_command_with_one_line(monkeypatch, capsys, argv) -> None:
    from slca_lightning.cli import commands as cli

    monkeypatch.setattr(sys, "argv", ["slca", *argv])
    assert cli.script() is None
    out = capsys.readouterr().out
    for name in ("fit", "sft", "eval", "export", "warm-start"):
        (line,) = [x for x in out.splitlines() if x.startswith(f"  {name} ")]
        assert len(line.split(None, 1)[1]) > 20  # says what it does
    assert "validate" not in out and "predict" not in out


@pytest.mark.parametrize(
    ("command", "said"),
    [
        ("validate", "there is no `slca validate`: the held-out evaluation runs inside fit"),
        ("fitt", "unknown command 'fitt'; did you mean `slca fit`?"),
        ("--config", "put a command first, e.g. `slca fit --config ...`"),
    ],
)
def test_an_unknown_or_removed_command_is_one_line_with_the_way_forward(
    monkeypatch, capsys, command, said
) -> None:
    from slca_lightning.cli import commands as cli

    monkeypatch.setattr(sys, "argv", ["slca", command, "x"])
    with pytest.raises(SystemExit) as done:
        cli.script()
    assert done.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"slca: error: {said}") and "commands: fit, sft, eval" in line


@pytest.mark.parametrize("command", ["fit", "sft"])
def test_each_subcommands_usage_names_itself(command) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "slca_lightning.cli.commands", command, "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith(f"usage: slca {command} [-c CONFIG]")


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
