"""The evaluator registry and ``slca eval``'s plumbing: a registered evaluator is found by
name, gets its ``--arg`` options and the configured module and data module, and its table
and scalars are written. Real parts: the tiny offline model, a real YAML config parsed by
jsonargparse into the real data module. The evaluator is a small real function.
"""

from __future__ import annotations

import json
import math

import pytest

from slca_lightning.cli import evaluate as standalone
from slca_lightning.eval.registry import (
    EvalResult,
    available_evaluators,
    get_evaluator,
    register_evaluator,
)

seen = {}


def heldout_count(ctx):
    seen["ctx"] = ctx
    n = len(ctx.datamodule.source.heldout())
    metrics = {"heldout": float(n), "scale": float(ctx.options.get("scale", 1))}
    return EvalResult(metrics, "| x |", bars={"heldout / 10": n / 10, "unknown": math.nan})


register_evaluator("heldout_count_test", heldout_count, overwrite=True)


def test_builtins_and_unknown_names():
    assert {"in_domain", "bfcl", "heldout_count_test"} <= set(available_evaluators())
    with pytest.raises(KeyError, match=r"unknown evaluator 'nope'.*in_domain"):
        get_evaluator("nope")
    with pytest.raises(ValueError, match="already registered"):
        register_evaluator("in_domain", heldout_count)
    with pytest.raises(ValueError, match="letters"):
        register_evaluator("a-b", heldout_count)


def test_eval_command_runs_a_registered_evaluator(tmp_path):
    cfg = tmp_path / "run.yaml"
    cfg.write_text(
        "model:\n  kl_coef: 0.0\n"
        "data:\n  max_turns: 2\n  tasks:\n    class_path: slca_lightning.data.task_sources.SyntheticTasks\n"
        "    init_args: {n_train: 4, n_heldout: 5}\n"
    )
    out = tmp_path / "out"
    summary = standalone.main(
        [
            "--model=tiny",
            f"--config={cfg}",
            "--evaluators=heldout_count_test",
            "--arg=heldout_count_test.scale=2.5",
            f"--out={out}",
        ]
    )
    assert summary["metrics"]["heldout_count_test"] == {"heldout": 5.0, "scale": 2.5}
    assert json.loads((out / "summary.json").read_text())["metrics"] == summary["metrics"]
    assert "| x |" in (out / "heldout_count_test.md").read_text()
    png = out / "heldout_count_test.png"
    assert summary["plots"] == {"heldout_count_test": str(png)}
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    ctx = seen["ctx"]
    assert ctx.module.hparams.model == "tiny" and ctx.module.hparams.kl_coef == 0.0
    assert ctx.datamodule.loop.max_turns == 2  # connected, with the config's caps


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model=tiny", "--arg=bfcl.limit=1"], "not among --evaluators"),
        (["--model=tiny", "--arg=in_domain_limit"], "expected <evaluator>.<option>=<value>"),
    ],
)
def test_bad_arguments_name_what_is_wrong(argv, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        standalone.main([*argv, f"--out={tmp_path}"])


def test_bad_config_section_names_the_file(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("data:\n  group_size: many\n")
    with pytest.raises(ValueError, match=r"bad\.yaml: bad data section"):
        standalone.main(["--model=tiny", f"--config={cfg}", f"--out={tmp_path}"])
