"""HierR (METHOD §4) on hand-built episodes with literal expected values.

The judges here are stubs (a fixed score, counting its calls) so that every summary value
is known exactly; the LLM judge itself is tested in ``test_judges.py``.
"""

from __future__ import annotations

import math

import pytest
import torch

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.rewards import (
    ActionReward,
    ChannelReward,
    GoldCoverageVerifier,
    HierarchicalReward,
    JudgeRequest,
    JudgeVerdict,
    RewardHead,
    RLTRReward,
    RuleJudge,
    SummaryJudge,
    check_channels,
    check_finite,
    validate_reward_output,
)
from slca_lightning.testing.rewards import TokenParityReward
from slca_lightning.types import Episode, RewardOutput, Task, ToolCall, ToolResult

WEATHER = ToolCall("get_weather", {"city": "Paris"})
CALL = '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>'
RESULT = '{"city": "Paris", "temperature_c": 18, "sky": "sunny"}'
REPLY = "It is 18 °C and sunny in Paris right now."


def make_task(gold=None, *, task_id="t0", subset="tool_call", question="Weather in Paris?"):
    return Task(
        task_id=task_id,
        messages=[{"role": "user", "content": question}],
        allowed_tools=["get_weather", "search"],
        gold_calls=[[WEATHER]] if gold is None else gold,
        question=question,
        subset=subset,
    )


def make_episode(
    assistant_texts: list[str],
    tool_results: list[list[str]] | None = None,
    task: Task | None = None,
) -> Episode:
    """An Episode from assistant turn texts and, per turn, the tool observations' contents.

    Each observation's ``call`` is the matching parsed call of its turn (a placeholder when
    the turn has fewer valid calls than observations).
    """
    task = task or make_task()
    tool_results = tool_results or [[] for _ in assistant_texts]
    assert len(tool_results) == len(assistant_texts)
    turns = []
    for text, contents in zip(assistant_texts, tool_results, strict=True):
        calls = parse_tool_calls(text, task.allowed_tools).calls
        turns.append(
            [
                ToolResult(call=calls[j] if j < len(calls) else ToolCall("unknown"), content=c)
                for j, c in enumerate(contents)
            ]
        )
    return Episode(task=task, assistant_texts=list(assistant_texts), tool_results=turns)


class StubJudge(SummaryJudge):
    """A fixed score for every request; records every batch it is given."""

    def __init__(self, score: float = 0.75, failed: bool = False):
        self.value = score
        self.failed = failed
        self.batches: list[list[JudgeRequest]] = []
        self.num_calls = 0
        self.num_failures = 0

    def score(self, requests):
        self.batches.append(list(requests))
        self.num_calls += len(requests)
        return [
            JudgeVerdict(0.0 if self.failed else self.value, self.failed, "stub") for _ in requests
        ]


def perfect_episode(**kw) -> Episode:
    return make_episode([CALL, REPLY], [[RESULT], []], **kw)


def values(out: RewardOutput, group: str, name: str) -> list:
    return getattr(out, group)[name].tolist()


def test_perfect_episode_has_process_one_and_the_judges_summary():
    judge = StubJudge(0.75)
    out = HierarchicalReward(judge=judge)([perfect_episode()])
    assert values(out, "channels", "tool") == [1.0]
    assert values(out, "channels", "summary") == [0.75]
    assert values(out, "channels", "total") == [1.75]
    assert values(out, "channels", "action") == [1.0]
    for k in ("fmt", "name", "key", "value", "parallel"):
        assert values(out, "components", k) == [1.0]
    assert values(out, "flags", "omitted") == [False]
    assert values(out, "flags", "judge_called") == [True]
    assert values(out, "flags", "judge_failed") == [False]
    # The judge sees the question, the tool results (not the calls) and the final reply.
    (request,) = judge.batches[0]
    assert request == JudgeRequest("Weather in Paris?", [RESULT], REPLY)
    assert out.channels["total"].dtype == torch.float32
    assert out.flags["omitted"].dtype == torch.bool


def test_omission_guard_puts_the_penalty_on_summary_and_total():
    judge = StubJudge()
    ep = make_episode(["I believe it is sunny in Paris today, around 18 degrees."])
    out = HierarchicalReward(judge=judge)([ep])
    assert values(out, "channels", "tool") == [0.0]
    assert values(out, "channels", "summary") == [-0.5]
    assert values(out, "channels", "total") == [-0.5]
    assert values(out, "flags", "omitted") == [True]
    assert values(out, "flags", "judge_called") == [False]
    assert judge.batches == []
    # Components stay the process parts as computed: no tag, gold with arguments.
    assert [
        values(out, "components", k)[0] for k in ("fmt", "name", "key", "value", "parallel")
    ] == [
        0.0,
        0.0,
        0.0,
        0.0,
        0.0,
    ]
    assert values(out, "channels", "action") == [0.0]


def test_omission_penalty_ignores_lambdas_and_is_configurable():
    ep = make_episode(["No tools needed, it is sunny."])
    out = HierarchicalReward(judge=StubJudge(), lambda_summary=3.0, omission_penalty=-1.0)([ep])
    assert values(out, "channels", "summary") == [-1.0]
    assert values(out, "channels", "total") == [-1.0]


def test_a_malformed_tag_is_not_an_omission():
    ep = make_episode(['<tool_call>{"name": "get_weather", "arguments": {"city": '])
    out = HierarchicalReward(judge=StubJudge())([ep])
    assert values(out, "flags", "omitted") == [False]
    # fmt 0 (1 unmatched open), name 0, key/value 0, parallel 0; no tool response → 0.
    assert values(out, "channels", "tool") == [0.0]
    assert values(out, "channels", "summary") == [0.0]


def test_irrelevant_task_abstention_scores_process_09_and_summary_0():
    task = make_task(gold=[], subset="irrelevant", question="Write me a haiku about rain.")
    ep = make_episode(
        ["Soft rain on the roof, / puddles gather quiet light, / the street hums."], task=task
    )
    judge = StubJudge(0.5)
    out = HierarchicalReward(judge=judge)([ep])
    assert out.channels["tool"].item() == pytest.approx(0.9)
    assert values(out, "channels", "summary") == [0.0]
    assert out.channels["total"].item() == pytest.approx(0.9)
    assert values(out, "components", "fmt") == [0.0]
    assert values(out, "flags", "omitted") == [False]
    assert values(out, "flags", "judge_called") == [False]
    assert values(out, "flags", "abstention_credited") == [False]
    assert judge.batches == []


def test_credit_abstention_judges_the_reply_of_a_correct_abstention():
    task = make_task(gold=[], subset="irrelevant", question="Write me a haiku about rain.")
    text = "<think>no tool fits</think>Soft rain on the roof, puddles gather quiet light."
    ep = make_episode([text], task=task)
    judge = StubJudge(0.5)
    out = HierarchicalReward(judge=judge, credit_abstention=True)([ep])
    assert out.channels["tool"].item() == pytest.approx(1.0)  # fmt credited: nothing malformed
    assert values(out, "channels", "summary") == [0.5]
    assert out.channels["total"].item() == pytest.approx(1.5)
    assert values(out, "flags", "judge_called") == [True]
    assert values(out, "flags", "abstention_credited") == [True]
    (request,) = judge.batches[0]
    assert request.tool_results == []
    assert request.reply == "Soft rain on the roof, puddles gather quiet light."


def test_credit_abstention_does_not_touch_tool_tasks_or_callers_on_irrelevant_tasks():
    judge = StubJudge(0.5)
    irrelevant = make_task(gold=[], subset="irrelevant", task_id="irr")
    called = make_episode([CALL + " let me check that for you"], task=irrelevant)  # no response
    omitted = make_episode(["It is sunny in Paris, trust me on that."])
    out = HierarchicalReward(judge=judge, credit_abstention=True)([called, omitted])
    assert values(out, "channels", "summary") == [0.0, -0.5]
    assert values(out, "flags", "abstention_credited") == [False, False]
    assert judge.batches == []


def test_credit_abstention_gives_no_summary_credit_after_an_unwanted_call():
    judge = StubJudge(1.0)
    irrelevant = make_task(gold=[], subset="irrelevant", task_id="irr")
    called = make_episode(
        [CALL, "The weather in Paris is sunny and warm today."], [[RESULT], []], task=irrelevant
    )
    paper = HierarchicalReward(judge=StubJudge(1.0))([called])
    out = HierarchicalReward(judge=judge, credit_abstention=True)([called])
    assert values(paper, "channels", "summary") == [1.0]  # the paper judges it
    assert values(out, "channels", "summary") == [0.0]
    assert judge.batches == []


def test_short_final_reply_scores_zero_without_calling_the_judge():
    judge = StubJudge()
    eps = [
        make_episode([CALL, "OK."], [[RESULT], []]),
        make_episode([CALL, "<think>the user wants the weather</think> Sunny."], [[RESULT], []]),
    ]
    out = HierarchicalReward(judge=judge)(eps)
    assert values(out, "channels", "summary") == [0.0, 0.0]
    assert values(out, "channels", "total") == [1.0, 1.0]
    assert values(out, "flags", "judge_called") == [False, False]
    assert judge.num_calls == 0 and judge.batches == []


def test_no_tool_response_scores_zero_without_calling_the_judge():
    judge = StubJudge()
    ep = make_episode([CALL + "\nAnd the answer is: sunny, 18 degrees."])  # call, no observation
    out = HierarchicalReward(judge=judge)([ep])
    assert values(out, "channels", "tool") == [1.0]
    assert values(out, "channels", "summary") == [0.0]
    assert judge.batches == []


def test_judge_is_called_once_for_the_batch_with_only_the_rows_that_need_it():
    judge = StubJudge(0.25)
    eps = [
        perfect_episode(),
        make_episode(["It is sunny, no need to check anything."]),  # omitted
        make_episode([CALL, "ok"], [[RESULT], []]),  # short
        make_episode([CALL, "Paris: 18 degrees, sunny skies."], [[RESULT], []]),
    ]
    head = HierarchicalReward(judge=judge)
    out = head(eps)
    assert len(judge.batches) == 1
    assert [r.reply for r in judge.batches[0]] == [REPLY, "Paris: 18 degrees, sunny skies."]
    assert values(out, "channels", "summary") == [0.25, -0.5, 0.0, 0.25]
    assert values(out, "channels", "total") == [1.25, -0.5, 1.0, 1.25]
    assert values(out, "flags", "judge_called") == [True, False, False, True]
    assert head.last_stats == {
        "judge_calls": 2,
        "judge_failures": 0,
        "judge_batches": 1,
        "omitted": 1,
        "abstention_credited": 0,
    }


def test_failed_verdict_scores_zero_and_is_flagged_and_counted():
    head = HierarchicalReward(judge=StubJudge(failed=True))
    out = head([perfect_episode(), perfect_episode()])
    assert values(out, "channels", "summary") == [0.0, 0.0]
    assert values(out, "flags", "judge_failed") == [True, True]
    assert head.last_stats["judge_failures"] == 2
    head([perfect_episode()])
    assert head.num_judge_calls == 3 and head.num_judge_failures == 3


def test_final_reply_is_the_text_after_the_last_tool_response():
    judge = StubJudge()
    ep = make_episode(
        [CALL, CALL, "<think>both agree</think>Paris is at 18 °C with sun.", "Anything else?"],
        [[RESULT], [RESULT], [], []],
    )
    HierarchicalReward(judge=judge)([ep])
    (request,) = judge.batches[0]
    assert request.reply == "Paris is at 18 °C with sun.\nAnything else?"
    assert request.tool_results == [RESULT, RESULT]


def test_lambdas_weight_the_total():
    out = HierarchicalReward(judge=StubJudge(0.5), lambda_process=2.0, lambda_summary=0.5)(
        [perfect_episode()]
    )
    assert values(out, "channels", "total") == [2.25]


def test_process_weights_are_used_and_checked_at_construction():
    weights = {"fmt": 0.0, "name": 0.0, "key": 0.0, "value": 0.0, "parallel": 1.0}
    text = '<tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}</tool_call>'
    out = HierarchicalReward(judge=StubJudge(), process_weights=weights)([make_episode([text])])
    assert values(out, "channels", "tool") == [1.0]
    assert values(out, "components", "value") == [0.0]
    with pytest.raises(ValueError):
        HierarchicalReward(process_weights={"fmt": 1.0})


def test_extra_channels_default_to_action_and_rltr_and_can_be_replaced():
    eps = [perfect_episode()]
    head = HierarchicalReward(judge=StubJudge())
    out = head(eps)
    assert set(out.channels) == {"tool", "summary", "total", "action", "rltr"}
    assert head.channel_names == set(out.channels)  # known without running the head
    assert values(out, "channels", "action") == [1.0]
    assert values(out, "channels", "rltr") == [1.0]
    assert {"rltr_comp", "rltr_repeat", "rltr_error"} <= set(out.components)
    # the default RLTR verifier is the offline gold-coverage rule, not a model call
    (rltr,) = [c for c in head.extra_channels if c.name == "rltr"]
    assert isinstance(rltr.verifier, GoldCoverageVerifier)
    head = HierarchicalReward(judge=StubJudge(), extra_channels=[RLTRReward()])
    out = head(eps)
    assert set(out.channels) == head.channel_names == {"tool", "summary", "total", "rltr"}
    head = HierarchicalReward(judge=StubJudge(), extra_channels=[])
    assert set(head(eps).channels) == head.channel_names == {"tool", "summary", "total"}
    with pytest.raises(ValueError, match="clashes"):
        HierarchicalReward(extra_channels=[ActionReward(name="total")])


def test_default_judge_is_the_rule_judge():
    head = HierarchicalReward()
    assert isinstance(head.judge, RuleJudge)
    out = head([perfect_episode()])
    assert 0.0 < out.channels["summary"].item() <= 1.0


class NaNChannel(ChannelReward):
    name = "broken"

    def __call__(self, episodes):
        vals = torch.zeros(len(episodes))
        vals[1] = math.nan
        return vals, {}


def test_nan_reward_raises_naming_the_row_and_task():
    eps = [perfect_episode(), perfect_episode(task=make_task(task_id="task-17"))]
    with pytest.raises(ValueError, match=r"'broken'.*row 1.*task-17"):
        HierarchicalReward(judge=StubJudge(), extra_channels=[NaNChannel()])(eps)
    with pytest.raises(ValueError, match=r"row 0 \(task_id='t0'\)"):
        check_finite("x", torch.tensor([math.inf, 0.0]), eps)
    check_finite("x", [0.0, -0.5], eps)


def test_out_of_range_judge_score_raises_naming_the_row():
    head = HierarchicalReward(judge=StubJudge(1.5))
    with pytest.raises(ValueError, match=r"row 0 \(task_id='t0'\)"):
        head([perfect_episode()])


def test_validate_reward_output_checks_shapes_and_required_channels():
    eps = [perfect_episode()]
    ok = RewardOutput(channels={k: torch.zeros(1) for k in ("tool", "summary", "total")})
    validate_reward_output(ok, eps)
    with pytest.raises(ValueError, match="missing"):
        validate_reward_output(RewardOutput(channels={"tool": torch.zeros(1)}), eps)
    bad = RewardOutput(channels={k: torch.zeros(2) for k in ("tool", "summary", "total")})
    with pytest.raises(ValueError, match="shape"):
        validate_reward_output(bad, eps)


def test_empty_batch_gives_empty_tensors():
    out = HierarchicalReward(judge=StubJudge())([])
    assert out.channels["total"].shape == (0,)
    assert out.flags["omitted"].shape == (0,)


def test_check_channels_names_the_router_the_missing_channels_and_the_config():
    from slca_lightning.advantages import ChannelRouter, RLTRRouter, SLCARouter, Term

    check_channels(HierarchicalReward(), RLTRRouter())  # the default head serves every preset
    check_channels(TokenParityReward(), SLCARouter())
    with pytest.raises(ValueError) as err:
        check_channels(HierarchicalReward(extra_channels=[ActionReward()]), RLTRRouter())
    msg = str(err.value)
    assert "RLTRRouter reads reward channel(s) ['rltr']" in msg
    assert "it produces ['action', 'summary', 'tool', 'total']" in msg
    assert msg.endswith(
        "extra_channels:\n"
        "        - class_path: slca_lightning.rewards.ActionReward\n"
        "        - class_path: slca_lightning.rewards.RLTRReward"
    )
    mystery = ChannelRouter({"tool": [Term("mystery")], "summary": []})
    with pytest.raises(ValueError, match=r"ChannelRouter reads reward channel\(s\) \['mystery'\]"):
        check_channels(HierarchicalReward(), mystery)
    with pytest.raises(ValueError, match=r"TokenParityReward does not produce"):
        check_channels(TokenParityReward(), RLTRRouter())

    class Opaque(RewardHead):  # channel_names unknown: not checked
        def __call__(self, episodes):
            raise AssertionError("never run by the check")

    check_channels(Opaque(), mystery)
