"""Bad input through a real fit: failures become observations and counts, and malformed
configuration or data stops the run before training with a message naming the field."""

from __future__ import annotations

import json

import lightning as L
import pytest
import torch

from slca_lightning.cli.commands import main
from slca_lightning.rollout.engine import RolloutEngine
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator

ARGS = [
    "--model.model=tiny",
    "--model.micro_batch_size=4",
    "--data.prompts_per_step=2",
    "--data.group_size=2",
    "--data.max_turns=3",
    "--data.max_new_tokens=48",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
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


# One turn per kind of bad input; every episode of every batch goes through all of them.
BAD_CALLS = (  # one list block: the backend raises on add, 'nope' is unknown, add lacks b
    '<tool_call>\n[{"name": "add", "arguments": {"a": 1, "b": 2}}, '
    '{"name": "nope", "arguments": {}}, {"name": "add", "arguments": {"a": 1}}]\n</tool_call>'
)
BAD_JSON = "<tool_call>\n{not json}\n</tool_call>"
CUT_CALL = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": ' + "2" * 200  # > the cap


class Witness(L.Callback):
    """Keeps the logged rollout counts and the rewarded rollout of every step."""

    def __init__(self):
        self.metrics, self.records = [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.metrics.append({k: float(v) for k, v in trainer.callback_metrics.items()})
        self.records.append(module.last_rollout)


def test_bad_calls_empty_and_cut_generations_and_a_dead_backend_never_stop_the_run(tmp_path):
    cli = main(
        [
            *ARGS,
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=2",
            "--data.max_new_tokens=80",
            "--data.max_response_tokens=1024",
            "--model.kl_coef=0",
            "--data.tasks.init_args.families=[math]",
        ],
        run=False,
    )
    cli.model.configure_model()
    tok = cli.model.tokenizer
    last_turns = iter(range(10_000))

    def script(context, turn):
        if turn < 2:
            return [BAD_CALLS, BAD_JSON][turn] + tok.eos_token  # each turn ends, as a model's
        # the last turn alternates over the rows: an immediate end of turn, or a call cut by
        # the token cap
        return tok.eos_token if next(last_turns) % 2 == 0 else CUT_CALL

    engine: RolloutEngine = ScriptedEngine(tok, script)
    sim = SchemaGuidedSimulator(
        ExplodingBackend(), timeout_s=1.0, max_retries=1, retry_backoff_s=0.0
    )
    cli.datamodule.engine, cli.datamodule.simulator = engine, sim
    witness = Witness()
    cli.trainer.callbacks.append(witness)
    cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 2 and len(witness.metrics) == 2
    assert sim.stats["backend_errors"] == 8 and sim.stats["unknown_tool"] == 8  # 2 steps × 4 rows
    assert sim.stats["missing_arguments"] == 8
    for logged in witness.metrics:  # per episode, every step
        assert logged["rollout/tool_calls_per_episode"] == 3.0  # add, nope, add(a) executed
        assert logged["rollout/invalid_calls_per_episode"] == 1.0  # the bad JSON block
        assert logged["rollout/tool_errors_per_episode"] == 4.0  # every observation an error
        assert logged["rollout/empty_generations_per_episode"] == 0.5
        assert logged["rollout/cut_tool_calls_per_episode"] == 0.5
        assert logged["rollout/turns_per_episode"] == 3.0
        assert logged["rollout/truncated_fraction"] == 0.5
    for record in witness.records:
        rewards = record.rewards.channels
        for row, ep in enumerate(record.batch.episodes):
            assert [len(results) for results in ep.tool_results] == [3, 1, 0]
            assert all(r.is_error for results in ep.tool_results for r in results)
            assert all(torch.isfinite(v[row]) for v in rewards.values())
            if ep.assistant_texts[-1] == "":  # empty turn: the episode ends, empty reply
                assert ep.finish_reason == "stop" and ep.final_reply == ""
                assert float(rewards["summary"][row]) == 0.0  # too short to judge
                assert not bool(record.rewards.flags["judge_called"][row])
            else:  # cut inside a call: not executed, the episode ends truncated
                assert ep.finish_reason == "length" and ep.assistant_texts[-1].startswith(
                    CUT_CALL[:40]
                )
                assert float(rewards["rltr"][row]) == -1.0  # RLTR: malformed output
        assert bool(record.batch.truncated.any()) and not bool(record.batch.truncated.all())


def test_invalid_setting_names_the_field(tmp_path):
    with pytest.raises(ValueError, match=r"^model\.ppo_epochs: must be an integer >= 1, got 0$"):
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
            "--data.tasks.class_path=slca_lightning.data.task_sources.JsonlTasks",
            f"--data.tasks.init_args.path={path}",
        ],
        run=False,
    )
    with pytest.raises(ValueError, match=r"line 2.*gold_calls\[0\]\[0\]\.name"):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 0
