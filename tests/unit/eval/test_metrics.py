"""Episode metrics on hand-made episodes, with literal expected values.

Real parts: the hermes parser, the METHOD §4.1 process reward, jsonschema validation of
the arguments, torchmetrics state merging. Nothing is mocked.
"""

from __future__ import annotations

import math

import pytest
import torch
from torchmetrics.utilities.data import dim_zero_sum

from slca_lightning.eval.metrics import (
    EpisodeMetrics,
    Redundancy,
    TokensPerEpisode,
    episode_stats,
)
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.types import Episode, Task, ToolCall, ToolResult

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        },
    },
}


def task(gold, subset="tool_call") -> Task:
    return Task(
        task_id=f"t-{subset}",
        messages=[{"role": "user", "content": "weather in Paris?"}],
        tools=[WEATHER, ADD],
        allowed_tools=["get_weather", "add"],
        gold_calls=gold,
        question="weather in Paris?",
        subset=subset,
    )


def call_text(name: str, args) -> str:
    import json

    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def result(name: str, args, error: bool = False) -> ToolResult:
    return ToolResult(ToolCall(name, args), "{}", is_error=error)


def invalid(kind: str) -> ToolResult:  # what the agent loop appends for a non-call
    return ToolResult(ToolCall("", {}), f"Error: invalid tool call ({kind}).", True, kind)


GOLD = [[ToolCall("get_weather", {"city": "Paris"})]]

# A: a call, then the same call again plus a schema-invalid one, then the reply.
EP_A = Episode(
    task=task(GOLD),
    assistant_texts=[
        call_text("get_weather", {"city": "Paris"}),
        call_text("get_weather", {"city": "Paris"}) + call_text("get_weather", {"city": 5}),
        "It is sunny in Paris today.",
    ],
    tool_results=[
        [result("get_weather", {"city": "Paris"})],
        [result("get_weather", {"city": "Paris"}), result("get_weather", {"city": 5}, True)],
        [],
    ],
    assistant_mask=[True] * 10 + [False] * 5 + [True] * 7 + [False] * 3 + [True] * 4,
)
# B: a block of bad JSON and an unmatched open tag, then a reply.
EP_B = Episode(
    task=task(GOLD),
    assistant_texts=['<tool_call>{"name": oops}</tool_call> <tool_call>', "I could not."],
    tool_results=[[invalid("invalid_json"), invalid("unbalanced_tags")], []],
    assistant_mask=[True] * 6 + [False] * 2 + [True] * 5,
)
# C: a correct abstention on an irrelevant task.
EP_C = Episode(
    task=task([], "irrelevant"),
    assistant_texts=["No tool can answer that."],
    tool_results=[[]],
    assistant_mask=[True] * 4,
)
TOTALS = torch.tensor([1.9, -0.5, 1.6])  # scores 0.95, -0.25, 0.8 over λ_p + λ_r = 2


def test_episode_stats_literal_values():
    a = episode_stats(EP_A, 1.9)
    assert (a.call_attempts, a.valid_calls, a.calls, a.repeats) == (3, 2, 3, 1)
    assert (a.turns, a.tokens) == (3, 21)
    assert a.name_f1 == pytest.approx(0.5)  # 3 predicted get_weather vs 1 gold
    assert (a.key, a.value) == (1.0, 1.0)
    assert a.process == pytest.approx(0.1 + 0.25 * 0.5 + 0.15 + 0.2 + 0.3)
    assert a.score == pytest.approx(0.95)
    b = episode_stats(EP_B)
    assert (b.call_attempts, b.valid_calls, b.calls, b.repeats) == (2, 0, 0, 0)
    assert (b.turns, b.tokens, b.process, b.score) == (2, 11, 0.0, None)
    c = episode_stats(EP_C)
    assert (c.call_attempts, c.calls, c.name_f1, c.process) == (0, 0, 1.0, pytest.approx(0.9))


def test_collection_literal_values():
    m = EpisodeMetrics()
    m.update([EP_A, EP_B, EP_C], TOTALS)
    got = m.compute()
    want = {
        "tool_accuracy": 2 / 3,  # A (gold call made; extras not penalised) and C (abstained)
        "name_f1": 0.5,
        "arg_match": 2 / 3,
        "process": (0.875 + 0.0 + 0.9) / 3,
        "success@0.7": 2 / 3,
        "success@0.8": 2 / 3,
        "success@0.9": 1 / 3,
        "success@1": 0.0,
        "tool_call_validity": 2 / 5,
        "tool_calls_per_episode": 1.0,
        "abstention_accuracy": 1.0,  # C, the one task that needs no call, made none
        "assistant_turns_per_episode": 2.0,
        "redundancy": 1 / 3,
        "tokens_per_episode": 12.0,
    }
    assert set(got) == set(want)
    for k, v in want.items():
        assert got[k] == pytest.approx(v), k


def test_process_metric_equals_the_hierr_tool_channel():
    episodes = [EP_A, EP_B, EP_C]
    tool = HierarchicalReward()(episodes).channels["tool"]
    assert [episode_stats(e).process for e in episodes] == pytest.approx(tool.tolist())


def test_states_merge_by_sum_like_two_devices():
    whole, left, right = EpisodeMetrics(), EpisodeMetrics(), EpisodeMetrics()
    whole.update([EP_A, EP_B, EP_C], TOTALS)
    left.update([EP_A], TOTALS[:1])
    right.update([EP_B, EP_C], TOTALS[1:])
    assert left.compute()["redundancy"] == pytest.approx(1 / 3)
    left.merge(right)
    merged, expected = left.compute(), whole.compute()
    assert merged == pytest.approx(expected)
    assert merged["tokens_per_episode"] == 12.0
    for metric in whole.metrics.values():  # every state reduces by sum across processes
        assert all(f is dim_zero_sum for f in metric._reductions.values()), metric


def test_redundancy_ignores_argument_order_and_counts_each_repeat():
    calls = [
        ("add", {"a": 1, "b": 2}),
        ("add", {"b": 2, "a": 1}),  # same call, keys reordered
        ("add", {"a": 1, "b": 3}),
        ("add", {"a": 1, "b": 2}),
    ]
    ep = Episode(
        task=task([[ToolCall("add", {"a": 1, "b": 2})]]),
        assistant_texts=["".join(call_text(n, a) for n, a in calls), "3"],
        tool_results=[[result(n, a) for n, a in calls], []],
        assistant_mask=[True] * 7,
    )
    other = Episode(  # the same call in another episode is not a repeat
        task=ep.task,
        assistant_texts=[call_text("add", {"a": 1, "b": 2}), "3"],
        tool_results=[[result("add", {"a": 1, "b": 2})], []],
        assistant_mask=[True] * 3,
    )
    red, cost = Redundancy(), TokensPerEpisode()
    red.update([ep])
    assert float(red.compute()) == 0.5  # 2 repeats of 4 calls
    red.update([other])
    assert float(red.compute()) == pytest.approx(2 / 5)
    cost.update([ep, other])
    assert float(cost.compute()) == 5.0  # (7 + 3) sampled tokens / 2 episodes


def test_unknown_tool_and_wrong_types_are_invalid_not_errors():
    ep = Episode(
        task=task(GOLD),
        assistant_texts=[call_text("nope", {}) + call_text("add", {"a": "x"}), "done"],
        tool_results=[[result("nope", {}, True), result("add", {"a": "x"}, True)], []],
        assistant_mask=[True] * 5,
    )
    s = episode_stats(ep)
    assert (s.call_attempts, s.valid_calls, s.calls) == (2, 0, 2)


def test_nothing_to_measure_is_nan_and_bad_totals_fail():
    m = EpisodeMetrics()
    m.update([EP_C])  # no totals, no calls
    got = m.compute()
    assert math.isnan(got["success@0.9"]) and math.isnan(got["tool_call_validity"])
    assert got["assistant_turns_per_episode"] == 1.0
    with pytest.raises(ValueError, match="2 reward totals for 1 episodes"):
        m.update([EP_A], torch.tensor([1.0, 2.0]))
    with pytest.raises(ValueError, match="scale"):
        EpisodeMetrics(scale=0.0)


def test_tool_accuracy_counts_only_exactly_right_episodes():
    """A: the gold call plus repeats (exact: extras are not penalised, redundancy measures
    them); B: no valid call; C: a correct abstention (exact); D: the gold call. 3 of 4."""
    from slca_lightning.eval.metrics import ToolAccuracy

    ep_d = Episode(
        task=task(GOLD),
        assistant_texts=[call_text("get_weather", {"city": "Paris"}), "Sunny."],
        tool_results=[[result("get_weather", {"city": "Paris"})], []],
        assistant_mask=[True] * 6,
    )
    assert [episode_stats(e).exact for e in (EP_A, EP_B, EP_C, ep_d)] == [1.0, 0.0, 1.0, 1.0]
    metric = ToolAccuracy()
    metric.update([EP_A, EP_B])
    metric.update([EP_C, ep_d])
    assert float(metric.compute()) == pytest.approx(0.75)


def test_abstention_accuracy_counts_only_tasks_that_need_no_call():
    from slca_lightning.eval.metrics import AbstentionAccuracy

    wrong = Episode(
        task=task([], "irrelevant"),
        assistant_texts=[call_text("get_weather", {"city": "Paris"}), "Sunny."],
        tool_results=[[result("get_weather", {"city": "Paris"})], []],
        assistant_mask=[True] * 6,
    )
    metric = AbstentionAccuracy()
    metric.update([EP_A, EP_B])  # tasks with a gold call: not counted
    assert math.isnan(float(metric.compute()))
    metric.update([EP_C, wrong])
    assert float(metric.compute()) == pytest.approx(0.5)
