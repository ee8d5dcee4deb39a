"""Environment errors per step (issue 17): the RolloutDataModule logs them by type and stops
the run when their rate passes ``data.max_env_error_rate``; a judge that raises gives
failed verdicts. Real DataModule, agent loop, simulator and tiny tokenizer; the dead
backend and the raising judge are the faults under test (a server that is down)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from slca_lightning.calls.env_errors import EnvironmentBrokenError
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.rewards.judges import JudgeVerdict, SummaryJudge
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.types import Episode, Task, ToolCall, ToolResult

# one valid call that reaches the (dead) backend and one unknown tool, then a reply
TURNS = [
    '<tool_call>\n[{"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "nope"}]\n</tool_call>',
    "The backend did not answer.",
]


class Down(ToolBackend):
    """A tool server that is down."""

    def execute(self, call, schema, task):
        raise ConnectionRefusedError("connection refused")


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def datamodule(tok, **kw) -> RolloutDataModule:
    def script(context, turn):
        return TURNS[min(turn, 1)] + tok.eos_token

    dm = RolloutDataModule(
        tasks=SyntheticTasks(n_train=4, n_heldout=1, families=["math"]),
        prompts_per_step=2,
        group_size=2,
        max_turns=2,
        max_new_tokens=200,
        simulator=SchemaGuidedSimulator(Down(), timeout_s=None, max_retries=0),
        engine=ScriptedEngine(tok, script),
        **kw,
    )
    dm.connect(None, tok)
    return dm


def test_env_errors_are_logged_by_type_per_step(tok):
    dm = datamodule(tok)  # default threshold 0.5: half the observations fail, not above
    batch = next(dm.train_dataloader())
    assert batch.stats["env/errors"] == 4.0  # one dead-backend call in each of 4 episodes
    assert batch.stats["env/error_rate"] == 0.5
    assert batch.stats["env/errors/ConnectionRefusedError"] == 4.0
    assert batch.stats["rollout/overflow_calls_per_episode"] == 0.0
    assert dm.batches_served == 1


def test_a_step_above_the_rate_stops_the_run_loudly(tok):
    dm = datamodule(tok, max_env_error_rate=0.4)
    with pytest.raises(EnvironmentBrokenError) as err:
        next(dm.train_dataloader())
    message = str(err.value)
    assert "4 environment errors" in message and "50%" in message
    assert "data.max_env_error_rate=0.4" in message and "ConnectionRefusedError=4" in message


def test_a_few_errors_never_stop_the_run_and_the_check_can_be_disabled(tok):
    next(datamodule(tok, max_env_error_rate=0.4, min_env_errors=5).train_dataloader())
    next(datamodule(tok, max_env_error_rate=None).train_dataloader())
    with pytest.raises(ValueError, match=r"data\.max_env_error_rate: must be a number in \[0, 1\]"):
        RolloutDataModule(max_env_error_rate=1.5)


class RaisingJudge(SummaryJudge):
    """A judge whose server fails on any batch holding a reply that mentions ``poison``
    (as the rule judge did on a huge number in a tool result)."""

    def score(self, requests):
        if any("poison" in r.reply for r in requests):
            raise OSError("judge server reset the connection")
        return [JudgeVerdict(0.75) for _ in requests]


def test_a_raising_judge_gives_failed_verdicts_not_a_crash():
    task = Task(
        task_id="t",
        messages=[],
        allowed_tools=["add"],
        gold_calls=[[ToolCall("add", {"a": 1, "b": 2})]],
        question="1+2?",
    )
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    ep = Episode(
        task=task,
        assistant_texts=[call, "The sum of 1 and 2 is 3."],
        tool_results=[[ToolResult(ToolCall("add", {"a": 1, "b": 2}), '{"result":3}')], []],
    )
    bad = replace(ep, assistant_texts=[call, "The sum is 3, poison."])
    head = HierarchicalReward(judge=RaisingJudge(), extra_channels=[])
    out = head([ep, bad, ep])
    assert out.flags["judge_failed"].tolist() == [False, True, False]
    assert out.channels["summary"].tolist() == [0.75, 0.0, 0.75]  # only its row fails
    assert out.channels["tool"][1] > 0.9  # the process reward is computed as usual
    assert head.last_stats["judge_errors/OSError"] == 2  # the batch, then the row
    assert head.last_stats["judge_failures"] == 1
