"""A correct abstention outranks every call on a task that needs none (issue: RL pushed the
model to call tools it should not), for every judge output, in the configs that say so.

The judge is the one free continuous input of HierR: it is replaced by a stub returning a
fixed score (a boundary the test owns, not a mock of anything that runs here), swept over
[0, 1] on both sides. The rollouts cover every structural way to call on a no-call task
(valid wrong call, two calls, a block that does not parse, a disallowed name, an unbalanced
tag, a call followed by a long reply) and abstentions with long and short replies.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from jsonargparse import ArgumentParser

from slca_lightning.rewards import HierarchicalReward, RewardHead
from slca_lightning.rewards.judges import JudgeVerdict, SummaryJudge
from slca_lightning.types import Episode, Task, ToolCall, ToolResult

ROOT = Path(__file__).resolve().parents[3]
GRID = [i / 20 for i in range(21)]


class FixedJudge(SummaryJudge):
    """Returns ``score`` for every request."""

    def __init__(self, score: float):
        self.value = score

    def score(self, requests):
        return [JudgeVerdict(self.value, False, None) for _ in requests]


def _task() -> Task:
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    return Task(
        task_id="irr",
        messages=[{"role": "user", "content": "Send an email to Ana."}],
        tools=tools,
        allowed_tools=["add"],
        gold_calls=[],
        question="Send an email to Ana.",
        subset="irrelevant",
        gold_format="nested",
    )


def _episode(turns: list[str], observed: bool) -> Episode:
    ep = Episode(task=_task(), group_id=0, prompt_ids=[])
    ep.assistant_texts = list(turns)
    results = [ToolResult(ToolCall("add", {"a": 1, "b": 2}), '{"sum": 3}')] if observed else []
    ep.tool_results = [results] + [[] for _ in turns[1:]]
    return ep


LONG = "I cannot send emails with these tools, but you could write to Ana directly today."
CALLS = [
    (['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>', LONG], True),
    (
        [
            '<tool_call>\n[{"name": "add", "arguments": {"a": 1}}, {"name": "add", "arguments": {}}]\n</tool_call>',
            LONG,
        ],
        True,
    ),
    (["<tool_call>\nnot json at all\n</tool_call>", LONG], True),
    (['<tool_call>\n{"name": "send_email", "arguments": {"to": "Ana"}}\n</tool_call>', LONG], True),
    (['<tool_call>\n{"name": "add"', LONG], False),
    (['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'], True),
]
ABSTAINS = [[LONG], ["No."], [""]]


def _head(config: Path) -> HierarchicalReward:
    spec = yaml.safe_load(config.read_text())["model"]["reward_head"]
    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--head", type=RewardHead)
    return parser.instantiate_classes(parser.parse_object({"head": spec})).head


def _totals(head: HierarchicalReward, episodes: list[Episode], score: float) -> list[float]:
    head.judge = FixedJudge(score)
    return [float(x) for x in head(episodes).channels["total"]]


SHIPPED = [ROOT / "configs/quickstart.yaml", ROOT / "experiments/credit_assignment/base.yaml"]


@pytest.mark.parametrize("config", SHIPPED, ids=lambda p: str(p.relative_to(ROOT)))
def test_correct_abstention_outranks_every_call_for_every_judge_output(config):
    head = _head(config)
    assert head.credit_abstention
    calls = [_episode(t, o) for t, o in CALLS]
    abstains = [_episode(t, False) for t in ABSTAINS]
    worst_abstention = min(min(_totals(head, abstains, s)) for s in GRID)
    best_call = max(max(_totals(head, calls, s)) for s in GRID)
    assert worst_abstention > best_call, (worst_abstention, best_call)
    # the bound of the module docstring: abstention >= λ_p > λ_p·(1 − w_fmt) >= any call
    assert worst_abstention >= head.lambda_process - 1e-6
    assert best_call <= head.lambda_process * (1 - head.process_weights["fmt"]) + 1e-6


def test_the_papers_rule_lets_a_wrong_call_outscore_an_abstention():
    """What the credited configs fix; the paper-reproduction configs keep it on purpose."""
    head = _head(ROOT / "configs/slca_grpo.yaml")
    assert not head.credit_abstention
    head.judge = FixedJudge(1.0)
    abstain = float(head([_episode([LONG], False)]).channels["total"][0])
    wrong = float(head([_episode(*CALLS[0])]).channels["total"][0])
    assert abstain == pytest.approx(0.9)
    assert wrong == pytest.approx(1.45)
    assert wrong > abstain
