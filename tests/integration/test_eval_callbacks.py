"""InDomainEval, BFCLEval, GradientDiagnostics and RewardCurves inside a 2-step CPU fit of
the tiny model, then ``slca eval`` standalone on the checkpoint it saved.

Real parts: LightningCLI, Trainer with CSVLogger and ModelCheckpoint, HFEngine greedy
episodes of the policy in every evaluation, the agent loop, the schema-guided simulator over
the synthetic suite's Python tools, HierR (in the standalone run), BFCL's own data and
checker, matplotlib. Boundaries: the training reward head is TokenParityReward (see
tests/integration/test_fit.py: the random tiny model earns identical HierR rewards within a
group, which would zero every gradient), and the training rollouts' assistant turns come from
a ScriptedEngine (:func:`script`: an ``add`` call, then a summary), because the random tiny
model never emits a tool call, which would leave the tool segment and its gradient empty.
"""

from __future__ import annotations

import csv
import itertools
import json
import math
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from matplotlib.image import imread

from callbacks import BFCLEval, GradientDiagnostics, InDomainEval, RewardCurves
from slca_lightning.cli import evaluate as standalone
from slca_lightning.cli.commands import main
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.testing.rewards import TokenParityReward

ARGS = [
    "--model.model=tiny",
    "--model.learning_rate=1e-2",
    "--model.micro_batch_size=4",
    "--data.prompts_per_step=2",
    "--data.group_size=3",
    "--data.max_turns=2",
    "--data.max_new_tokens=40",
    "--data.max_response_tokens=96",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=16",
    "--data.tasks.init_args.n_heldout=3",
    "--data.tasks.init_args.families=[math]",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
    "--trainer.max_steps=2",
    "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
    "--trainer.callbacks+=lightning.pytorch.callbacks.ModelCheckpoint",
    "--trainer.callbacks.every_n_train_steps=2",
]


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def scripted_turns():
    """Turn 0: an ``add`` call whose first number counts the calls (so the rows of a group,
    and their TokenParityReward scores, differ); turn 1: a summary naming that number."""
    counter = itertools.count(1)

    def script(context: str, turn: int) -> str:
        if turn == 0:
            call = {"name": "add", "arguments": {"a": next(counter), "b": 2}}
            return "<tool_call>\n" + json.dumps(call) + "\n</tool_call><|im_end|>"  # turn ends
        k = int(re.findall(r'"a": (\d+)', context)[-1])
        return f"The sum is {k + 2}{'!' * (k % 3)}.<|im_end|>"

    return script


def metrics_rows(folder: Path) -> list[dict[str, str]]:
    (path,) = folder.rglob("metrics.csv")
    with open(path) as f:
        return list(csv.DictReader(f))


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    root = tmp_path_factory.mktemp("fit")
    cli = main(
        [
            *ARGS,
            f"--trainer.default_root_dir={root}",
            f"--trainer.logger.init_args.save_dir={root}",
        ],
        run=False,
    )
    cli.model.reward_head = TokenParityReward()
    cli.model.configure_model()
    cli.datamodule.engine = ScriptedEngine(cli.model.tokenizer, scripted_turns())
    # RewardCurves first: it must still see InDomainEval's end-of-fit evaluation
    curves = RewardCurves()
    evaluator = InDomainEval(every_n_steps=2, num_tasks=2, verbose=False)
    grads = GradientDiagnostics(every_n_steps=1, micro_batch_size=2)
    bfcl = BFCLEval("simple_python,irrelevance", 2, max_new_tokens=8, every_n_steps=2)
    cli.trainer.callbacks += [curves, evaluator, grads, bfcl]
    cli.trainer.fit(cli.model, cli.datamodule)
    return SimpleNamespace(
        root=root, cli=cli, evaluator=evaluator, grads=grads, curves=curves, bfcl=bfcl
    )


def test_in_domain_eval_logs_tables_and_plots(fitted):
    root, cli, evaluator = fitted.root, fitted.cli, fitted.evaluator
    # every 2 steps, at the start, and not again at the end of fit (step 2 was just done)
    assert [(label, step) for label, step, _ in evaluator.rows] == [
        ("step 0 (start)", 0),
        ("step 2", 2),
    ]
    table = Path(evaluator.table_path).read_text()
    assert Path(evaluator.table_path).parent == Path(cli.trainer.log_dir)
    assert table.count("| step ") == 2 and "success@0.9" in table and "redundancy" in table
    png = Path(evaluator.plot_path).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert [s for s, _ in evaluator.curves()["rollout/tool_calls_per_episode"]] == [1, 2]
    rows = metrics_rows(root)
    logged = [r for r in rows if r.get("eval/in_domain/tokens_per_episode")]
    assert sorted(int(r["step"]) for r in logged) == [0, 2]
    for r in logged:
        assert float(r["eval/in_domain/tokens_per_episode"]) > 0
        assert 0.0 <= float(r["eval/in_domain/success@0.9"]) <= 1.0


def test_reward_curves_show_the_in_domain_success(fitted):
    curves, evaluator = fitted.curves, fitted.evaluator
    key = "eval/in_domain/success@0.9"
    series = curves.history[key]
    assert series and series == [(step, m["success@0.9"]) for _, step, m in evaluator.rows]
    assert [s for s, _ in series] == [0, 2]
    assert [key] in curves.drawn  # the Success@0.9 panel is drawn, not dropped as empty
    assert Path(curves.png_path).read_bytes()[:8] == PNG_MAGIC
    with open(curves.csv_path, newline="") as f:
        column = {int(r["step"]): r[key] for r in csv.DictReader(f)}
    assert column[0] != "" and column[2] != ""


def test_gradient_diagnostics_logged_during_fit(fitted):
    root, grads = fitted.root, fitted.grads
    assert [step for step, _ in grads.history] == [1, 2]
    for _, values in grads.history:
        assert values["grad/summary_norm"] > 0  # TokenParityReward varies in every group
        assert values["grad/tool_norm"] > 0
        cos = values["grad/cos_tool_summary"]
        assert math.isfinite(cos) and -1.0 <= cos <= 1.0
    rows = metrics_rows(root)
    assert [int(r["step"]) for r in rows if r.get("grad/summary_norm")] == [1, 2]
    (spread,) = [r for r in rows if r.get("grad/tool_norm_std")]  # from the 2nd measurement
    tool = [v["grad/tool_norm"] for _, v in grads.history]
    assert int(spread["step"]) == 2
    assert float(spread["grad/tool_norm_std"]) == pytest.approx(abs(tool[0] - tool[1]) / 2**0.5)
    assert float(spread["grad/summary_norm_cv"]) >= 0
    table = Path(grads.table_path).read_text()
    assert Path(grads.table_path).parent == Path(fitted.cli.trainer.log_dir)
    assert "| tool | 2 |" in table and "| summary | 2 |" in table


def test_bfcl_eval_inside_the_fit(fitted):
    bfcl = fitted.bfcl
    assert bfcl._done_at == 2  # at step 2, not again at the end of fit
    assert set(bfcl.last) >= {"simple_python", "irrelevance", "overall"}
    assert all(0.0 <= bfcl.last[k] <= 1.0 for k in ("simple_python", "irrelevance"))
    rows = [r for r in metrics_rows(fitted.root) if r.get("bfcl/simple_python")]
    assert [int(r["step"]) for r in rows] == [2]
    for key in ("simple_python", "irrelevance", "overall"):
        assert float(rows[0][f"bfcl/{key}"]) == pytest.approx(bfcl.last[key])
    table = (Path(fitted.cli.trainer.log_dir) / "eval" / "bfcl.md").read_text()
    assert table.startswith("# BFCL (step 2)")
    for line in ("| simple_python | 2 |", "| irrelevance | 2 |"):
        assert line in table


def test_slca_eval_on_the_saved_checkpoint(fitted, tmp_path):
    root, evaluator = fitted.root, fitted.evaluator
    (ckpt,) = root.rglob("*.ckpt")
    out = tmp_path / "eval"
    summary = standalone.main(
        [
            "--checkpoint",
            str(ckpt),
            "--evaluators",
            "in_domain,bfcl",
            "--num-tasks",
            "2",
            "--arg",
            "bfcl.categories=simple_python",
            "--arg",
            "bfcl.limit=2",
            "--arg",
            "bfcl.max_new_tokens=8",
            "--out",
            str(out),
        ]
    )
    assert summary["config"] and Path(summary["config"]).name == "config.yaml"
    saved = json.loads((out / "summary.json").read_text())
    assert saved["metrics"]["in_domain"] == summary["metrics"]["in_domain"]
    assert "| evaluation |" in (out / "in_domain.md").read_text()
    assert "simple_python" in (out / "bfcl.md").read_text()
    for name in ("in_domain", "bfcl"):
        png = out / f"{name}.png"
        assert saved["plots"][name] == str(png)
        assert png.read_bytes()[:8] == PNG_MAGIC and imread(png).shape[0] > 100
    assert 0.0 <= saved["metrics"]["bfcl"]["simple_python"] <= 1.0
    # Same weights, same greedy episodes as the end-of-fit evaluation: every metric that
    # does not depend on the reward head matches (the checkpoint's head is HierR, the fit's
    # was TokenParityReward).
    at_end = evaluator.rows[-1][2]
    for key in ("tokens_per_episode", "assistant_turns_per_episode", "process", "name_f1"):
        assert saved["metrics"]["in_domain"][key] == pytest.approx(at_end[key]), key


def test_slca_eval_help_exits_zero(capsys):
    out = subprocess.run(
        [sys.executable, "-m", "slca_lightning.cli.commands", "eval", "--help"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert "--checkpoint" in out.stdout and "--evaluators" in out.stdout
    with pytest.raises(SystemExit) as exit_info:  # python -m slca_lightning.eval: same parser
        standalone.main(["--help"])
    assert exit_info.value.code == 0 and "slca eval" in capsys.readouterr().out
