"""Bad input through a real fit: failures become observations and counts, and malformed
configuration or data stops the run before training with a message naming the field."""

from __future__ import annotations

import json

import pytest

from slca_lightning.cli import main
from slca_lightning.rollout.engine import RolloutEngine
from slca_lightning.testing.scripted import ScriptedEngine
from slca_lightning.tools.sgls import SchemaGuidedSimulator, ToolBackend

ARGS = [
    "--model.model=tiny",
    "--model.micro_batch_size=4",
    "--data.prompts_per_step=2",
    "--data.group_size=2",
    "--data.max_turns=3",
    "--data.max_new_tokens=48",
    "--data.tasks.class_path=slca_lightning.data.sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=8",
    "--data.tasks.init_args.n_heldout=2",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.logger=false",
]


class ExplodingBackend(ToolBackend):
    """A backend that always raises (stands in for a dead simulator server)."""

    def execute(self, call, schema, task):
        raise ConnectionError("simulator down")


def test_bad_calls_and_a_dead_backend_never_stop_the_run(tmp_path):
    cli = main(
        [*ARGS, f"--trainer.default_root_dir={tmp_path}", "--trainer.max_steps=2"], run=False
    )
    cli.model.configure_model()
    tok = cli.model.tokenizer
    turns = [
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>',  # backend raises
        '<tool_call>\n{"name": "nope", "arguments": {}}\n</tool_call>',  # unknown tool
        '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',  # missing argument
        "<tool_call>\n{not json}\n</tool_call>",
        "",  # empty generation
        '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2222222222222222222222222222222',  # cap
    ]
    counter = iter(range(10_000))

    def script(context, turn):
        return turns[next(counter) % len(turns)]

    engine: RolloutEngine = ScriptedEngine(tok, script)
    sim = SchemaGuidedSimulator(
        ExplodingBackend(), timeout_s=1.0, max_retries=1, retry_backoff_s=0.0
    )
    cli.datamodule.engine, cli.datamodule.simulator = engine, sim
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2
    assert sim.stats["backend_errors"] >= 1 and sim.stats["unknown_tool"] >= 1
    assert sim.stats["missing_arguments"] >= 1
    logged = cli.trainer.callback_metrics
    assert float(logged["rollout/invalid_calls_per_episode"]) >= 0
    assert float(logged["rollout/tool_errors_per_episode"]) > 0


def test_invalid_setting_names_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"model\.ppo_epochs must be ≥ 1"):
        main([*ARGS, f"--trainer.default_root_dir={tmp_path}", "--model.ppo_epochs=0"], run=False)


def test_unknown_config_key_names_the_key(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main([*ARGS, f"--trainer.default_root_dir={tmp_path}", "--model.routr=x"], run=False)
    assert "routr" in capsys.readouterr().err


def test_too_many_mini_batches_fail_before_training(tmp_path):
    cli = main(
        [
            *ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            "--model.mini_batches=5",
            "--trainer.max_steps=1",
        ],
        run=False,
    )
    with pytest.raises(
        ValueError, match=r"mini_batches=5 exceeds .*prompts_per_step=2 × data.group_size=2"
    ):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 0


def test_malformed_task_file_fails_before_training_naming_line_and_field(tmp_path):
    good = {
        "id": "a",
        "question": "add 1 and 2",
        "tools": [
            {
                "type": "function",
                "function": {"name": "add", "parameters": {"type": "object", "properties": {}}},
            }
        ],
        "gold_calls": [[{"name": "add", "arguments": {}}]],
    }
    bad = dict(good, id="b", gold_calls=[[{"name": "mul", "arguments": {}}]])
    path = tmp_path / "tasks.jsonl"
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    args = [a for a in ARGS if not a.startswith("--data.tasks")]
    cli = main(
        [
            *args,
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=1",
            "--data.tasks.class_path=slca_lightning.data.sources.JsonlTasks",
            f"--data.tasks.init_args.path={path}",
        ],
        run=False,
    )
    with pytest.raises(ValueError, match=r"line 2.*gold_calls\[0\]\[0\]\.name"):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 0
