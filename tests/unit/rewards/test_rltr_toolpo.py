"""ToolPO's action reward and RLTR's planner reward (METHOD §5) on literal episodes.

The LLM verifier's backend is a :class:`CallableBackend` over a Python function: it stands
in for an LLM server (real servers come in a later issue).
"""

from __future__ import annotations

import json

import pytest

from slca_lightning.chat_backends import CallableBackend, ChatBackend
from slca_lightning.rewards import (
    ActionReward,
    GoldCoverageVerifier,
    LLMCompletenessVerifier,
    RLTRReward,
    count_consecutive_repeats,
)
from slca_lightning.types import Episode, Task, ToolCall

WEATHER = ToolCall("get_weather", {"city": "Paris"})


def call(name: str, **args) -> str:
    return f"<tool_call>{json.dumps({'name': name, 'arguments': args})}</tool_call>"


def make_task(gold=None, task_id="t0") -> Task:
    return Task(
        task_id=task_id,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        allowed_tools=["get_weather", "search"],
        gold_calls=[[WEATHER]] if gold is None else gold,
        question="Weather in Paris?",
    )


def make_episode(assistant_texts: list[str], task: Task | None = None) -> Episode:
    """An Episode from assistant turn texts (RLTR and ToolPO read only the text)."""
    return Episode(
        task=task or make_task(),
        assistant_texts=list(assistant_texts),
        tool_results=[[] for _ in assistant_texts],
    )


def rltr_row(reward: RLTRReward, texts: list[str], task: Task | None = None) -> dict[str, float]:
    values, comps = reward([make_episode(texts, task)])
    return {"rltr": values.item(), **{k: v.item() for k, v in comps.items()}}


# ------------------------------------------------------------------------- ActionReward


def test_action_reward_literal_cases():
    two = make_task(gold=[[WEATHER, ToolCall("search", {"q": "umbrella"})]])
    eps = [
        make_episode([call("get_weather", city="paris "), "Sunny."]),  # loose match
        make_episode([call("get_weather", city="Rome")]),
        make_episode([call("get_weather", city="Paris")], two),
        make_episode(["<think>" + call("get_weather", city="Paris") + "</think>No call."]),
        make_episode(["No call needed."], make_task(gold=[])),
        make_episode([call("search", q="x")], make_task(gold=[])),
    ]
    values, comps = ActionReward()(eps)
    assert values.tolist() == [1.0, 0.0, 0.5, 0.0, 1.0, 0.0]
    assert comps == {}
    assert ActionReward().name == "action"


# ------------------------------------------------------------------------- RLTR


def test_rltr_clean_covering_sequence_scores_one():
    row = rltr_row(RLTRReward(), [call("get_weather", city="Paris"), "Sunny."])
    assert row == {
        "rltr": 1.0,
        "rltr_comp": 1.0,
        "rltr_repeat": 0.0,
        "rltr_error": 0.0,
        "rltr_malformed": 0.0,
    }


def test_rltr_counts_consecutive_repeats_with_canonical_arguments():
    same_a = '<tool_call>{"name": "search", "arguments": {"q": "x", "n": 1}}</tool_call>'
    same_b = '<tool_call>{"name": "search", "arguments": {"n": 1, "q": "x"}}</tool_call>'
    texts = [
        call("get_weather", city="Paris"),
        same_a,
        same_b,
        same_a,
        call("search", q="y"),
        same_a,
    ]
    row = rltr_row(RLTRReward(), texts)
    assert row["rltr_repeat"] == pytest.approx(-0.2)  # 2nd and 3rd copy follow an identical call
    assert row["rltr_comp"] == 1.0
    assert row["rltr"] == pytest.approx(0.8)


def test_parallel_duplicates_in_one_block_are_repeats():
    block = '<tool_call>[{"name": "get_weather", "arguments": {"city": "Paris"}}, {"name": "get_weather", "arguments": {"city": "Paris"}}]</tool_call>'
    assert rltr_row(RLTRReward(), [block])["rltr"] == pytest.approx(0.9)
    assert count_consecutive_repeats([WEATHER, ToolCall("x"), WEATHER]) == 0


def test_rltr_penalises_invalid_calls():
    texts = [
        call("get_weather", city="Paris"),
        call("not_a_tool", a=1),  # unknown name: invalid, still valid JSON
        '<tool_call>{"name": "search", "arguments": "q=x"}</tool_call>',  # arguments not a dict
    ]
    row = rltr_row(RLTRReward(), texts)
    assert row["rltr_error"] == pytest.approx(-0.4)
    assert row["rltr_malformed"] == 0.0
    assert row["rltr"] == pytest.approx(0.6)


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}',  # never closed
        '<tool_call>{"name": "get_weather", "arguments": {city: Paris}}</tool_call>',  # bad JSON
        call("get_weather", city="Paris") + "</tool_call>",  # stray close
    ],
)
def test_rltr_malformed_output_scores_minus_one(text):
    row = rltr_row(RLTRReward(), [text])
    assert row == {
        "rltr": -1.0,
        "rltr_comp": 0.0,
        "rltr_repeat": 0.0,
        "rltr_error": 0.0,
        "rltr_malformed": 1.0,
    }


def test_gold_coverage_is_a_name_multiset():
    task = make_task(gold=[[ToolCall("search", {"q": "a"})], [ToolCall("search", {"q": "b"})]])
    one = rltr_row(RLTRReward(), [call("search", q="a")], task)
    two = rltr_row(RLTRReward(), [call("search", q="zzz"), call("search", q="b")], task)
    assert one["rltr_comp"] == 0.0 and two["rltr_comp"] == 1.0
    # No gold call: any sequence covers it, an abstention included.
    assert rltr_row(RLTRReward(), ["No tool needed."], make_task(gold=[]))["rltr"] == 1.0
    assert rltr_row(RLTRReward(), ["I just guess: sunny."])["rltr"] == 0.0
    assert GoldCoverageVerifier().verdicts(task, [], 3) == [False, False, False]


class CountingBackend(ChatBackend):
    """Answers yes/no in a fixed cycle; counts chat_batch calls."""

    def __init__(self, answers):
        self.answers = answers
        self.batch_calls = 0
        self.prompts: list[str] = []

    def chat(self, messages, *, temperature=0.0, max_tokens=None, seed=None):
        raise AssertionError("the verifier must use chat_batch")

    def chat_batch(self, requests, **kw):
        self.batch_calls += 1
        self.prompts += [r[-1]["content"] for r in requests]
        return [self.answers[i % len(self.answers)] for i in range(len(requests))]


def test_llm_verifier_fraction_of_n_samples_in_one_batch():
    backend = CountingBackend(["<answer>yes</answer>", "Thinking… <answer>NO</answer>"])
    verifier = LLMCompletenessVerifier(backend, n=4)
    reward = RLTRReward(verifier=verifier)
    eps = [make_episode([call("get_weather", city="Paris")]), make_episode(["no call"])]
    values, comps = reward(eps)
    assert comps["rltr_comp"].tolist() == [0.5, 0.5]
    assert values.tolist() == [0.5, 0.5]
    assert backend.batch_calls == 1
    assert verifier.num_calls == 8 and verifier.num_failures == 0
    assert "Weather in Paris?" in backend.prompts[0]
    assert '"get_weather"' in backend.prompts[0]
    assert "(no tool calls)" in backend.prompts[-1]


def test_llm_verifier_failures_count_as_no():
    def flaky(messages, **kw):
        raise TimeoutError("slow server")

    verifier = LLMCompletenessVerifier(CallableBackend(flaky), n=3)
    _, comps = RLTRReward(verifier=verifier)([make_episode([call("get_weather", city="x")])])
    assert comps["rltr_comp"].tolist() == [0.0]
    assert verifier.num_failures == 3
    garbage = LLMCompletenessVerifier(CallableBackend(lambda m: "maybe?"), n=2)
    assert garbage.verdicts(make_task(), [WEATHER], 2) == [False, False]
    assert garbage.num_failures == 2


def test_rltr_n_overrides_the_verifier_default_and_malformed_rows_skip_the_verifier():
    backend = CountingBackend(["<answer>yes</answer>", "<answer>no</answer>"])
    verifier = LLMCompletenessVerifier(backend, n=4)
    eps = [make_episode([call("get_weather", city="Paris")]), make_episode(["<tool_call>{"])]
    values, _ = RLTRReward(verifier=verifier, n=2)(eps)
    assert values.tolist() == [0.5, -1.0]
    assert verifier.num_calls == 2  # only the well-formed row, n = 2 samples
