"""METHOD §4.1 process reward and ToolPO's action score on hand-computed literal examples."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slca_lightning.rewards.process import (
    DEFAULT_PROCESS_WEIGHTS,
    action_score,
    key_value_scores,
    loose_match,
    name_f1,
    process_reward,
)
from slca_lightning.types import ToolCall

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "toucan_rl_preview.jsonl"
KEYS = ["fmt", "name", "key", "value", "parallel", "process"]


def block(payload: object) -> str:
    return f"<tool_call>{json.dumps(payload)}</tool_call>"


def weighted(c: dict[str, float]) -> float:
    return sum(DEFAULT_PROCESS_WEIGHTS[k] * c[k] for k in DEFAULT_PROCESS_WEIGHTS)


def load_rows() -> list[dict]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


# --------------------------------------------------------------------------- whole reward


def test_correct_abstention_scores_point_nine():
    r = process_reward("This question needs no tool; here is the answer.", [], ["f"])
    assert list(r) == KEYS
    assert (r["fmt"], r["name"], r["key"], r["value"], r["parallel"]) == (0, 1, 1, 1, 1)
    assert r["process"] == pytest.approx(0.9)


def test_worked_example_every_component():
    gold = [
        [
            {"name": "search", "arguments": {"q": "Paris", "limit": 5}},
            {"name": "weather", "arguments": {"city": "Paris"}},
        ],
        [{"name": "book", "arguments": {}}],
    ]
    text = (
        "<think>plan "
        + block({"name": "book"})
        + "</think>"
        + block(
            [
                {"name": "search", "arguments": {"q": " paris ", "limit": "5"}},
                {"name": "weather", "arguments": {"city": "Lyon", "units": "c"}},
            ]
        )
        + block({"name": "nope"})  # not an allowed tool: invalid block
        + "<tool_call>{"  # unclosed
    )
    r = process_reward(text, gold, ["search", "weather", "book"])
    # 3 opens, 2 closes -> D = 3; 1 valid block.
    assert r["fmt"] == pytest.approx(1 / 3)
    # P = {search, weather}, G = {search, weather, book}: 2·2 / (2 + 3).
    assert r["name"] == pytest.approx(0.8)
    # search: Jaccard 1, both values loose-match -> (1, 1);
    # weather: Jaccard {city} / {city, units} = 1/2, Lyon != Paris -> (0.5, 0).
    assert r["key"] == pytest.approx(0.75)
    assert r["value"] == pytest.approx(0.5)
    # first valid block has 2 calls, first gold step has 2.
    assert r["parallel"] == 1.0
    expected = 0.1 / 3 + 0.25 * 0.8 + 0.15 * 0.75 + 0.20 * 0.5 + 0.30 * 1.0
    assert r["process"] == pytest.approx(expected)
    assert r["process"] == pytest.approx(0.7458333333333333)


def test_perfect_rollout_scores_one():
    gold = [[{"name": "f", "arguments": {"x": 1}}], [{"name": "g", "arguments": {"y": "a"}}]]
    text = (
        block({"name": "f", "arguments": {"x": 1}})
        + "\nok\n"
        + block({"name": "g", "parameters": {"y": "A"}})
    )
    r = process_reward(text, gold, ["f", "g"])
    assert r == pytest.approx(dict.fromkeys(KEYS, 1.0))


def test_calls_inside_think_are_not_scored():
    gold = [[{"name": "f", "arguments": {"x": 1}}]]
    text = "<think>" + block({"name": "f", "arguments": {"x": 1}}) + "</think>no call"
    r = process_reward(text, gold, ["f"])
    assert r == pytest.approx({k: 0.0 for k in KEYS})


def test_missing_call_with_argument_gold_scores_zero():
    r = process_reward("no call", [[{"name": "f", "arguments": {"x": 1}}]], ["f"])
    assert r == pytest.approx({k: 0.0 for k in KEYS})


def test_missing_call_with_flat_gold_keeps_key_and_value():
    # Flat gold has no arguments, so key = value = 1 by rule; omission is HierR's job.
    r = process_reward("no call", ["f"], ["f"])
    assert (r["fmt"], r["name"], r["key"], r["value"], r["parallel"]) == (0, 0, 1, 1, 0)
    assert r["process"] == pytest.approx(0.35)


def test_call_on_irrelevant_task_loses_name_and_parallel():
    r = process_reward(block({"name": "f"}), [], ["f"])
    assert (r["fmt"], r["name"], r["key"], r["value"], r["parallel"]) == (1, 0, 1, 1, 0)
    assert r["process"] == pytest.approx(0.1 + 0.15 + 0.2)


def test_invalid_blocks_contribute_no_calls():
    gold = [[{"name": "f", "arguments": {"x": 1}}]]
    text = block({"name": "f", "arguments": '{"x": 1}'})  # JSON-string arguments: invalid
    r = process_reward(text, gold, ["f"])
    assert (r["fmt"], r["name"], r["key"], r["value"], r["parallel"]) == (0, 0, 0, 0, 0)


def test_parallel_counts_only_the_first_valid_block():
    gold = [[{"name": "f"}, {"name": "f"}]]
    one_then_two = block({"name": "f"}) + block([{"name": "f"}, {"name": "f"}])
    assert process_reward(one_then_two, gold, ["f"])["parallel"] == 0.0
    bad_then_two = block({"name": "x"}) + block([{"name": "f"}, {"name": "f"}])
    assert process_reward(bad_then_two, gold, ["f"])["parallel"] == 1.0


def test_gold_may_be_normalised_toolcalls_or_a_json_string():
    steps = [[ToolCall("f", {"x": 1})]]
    text = block({"name": "f", "arguments": {"x": 1}})
    a = process_reward(text, steps, ["f"])
    b = process_reward(text, json.dumps([[{"name": "f", "arguments": {"x": 1}}]]), ["f"])
    assert a == b == pytest.approx(dict.fromkeys(KEYS, 1.0))


def test_allowed_tools_none_accepts_any_name():
    r = process_reward(block({"name": "anything"}), ["anything"], None)
    assert r["process"] == pytest.approx(1.0)


def test_real_flat_row_with_one_search_call():
    row = load_rows()[3]
    gt = row["reward_model"]["ground_truth"]
    search = "shadcn/ui-component-reference-server-search_components"
    assert gt["gold_tool_calls"][0] == search and len(gt["gold_tool_calls"]) == 5
    text = "<think>I should search first.</think>" + block(
        {"name": search, "arguments": {"query": "file upload drag and drop"}}
    )
    r = process_reward(text, gt["gold_tool_calls"], gt["allowed_tools"])
    # fmt 1; name 2·1/(1+5); flat gold has no arguments -> key = value = 1;
    # first block has 1 call, first flat step has 1.
    assert r["fmt"] == 1.0
    assert r["name"] == pytest.approx(1 / 3)
    assert (r["key"], r["value"], r["parallel"]) == (1.0, 1.0, 1.0)
    assert r["process"] == pytest.approx(0.1 + 0.25 / 3 + 0.15 + 0.2 + 0.3)


def test_real_flat_row_with_every_gold_call_in_order():
    row = load_rows()[3]
    gt = row["reward_model"]["ground_truth"]
    text = "\n".join(block({"name": n, "arguments": {}}) for n in gt["gold_tool_calls"])
    r = process_reward(text, gt["gold_tool_calls"], gt["allowed_tools"])
    assert r["process"] == pytest.approx(1.0)


def test_real_irrelevant_row_abstention_scores_point_nine():
    row = load_rows()[1]
    gt = row["reward_model"]["ground_truth"]
    assert gt["subset_name"] == "irrelevant"
    r = process_reward(
        "I can't do that with these tools.", gt["gold_tool_calls"], gt["allowed_tools"]
    )
    assert r["process"] == pytest.approx(0.9)


# --------------------------------------------------------------------------- weights


def test_custom_weights_change_the_total():
    weights = {"fmt": 1.0, "name": 0.0, "key": 0.0, "value": 0.0, "parallel": 0.0}
    r = process_reward("none", [], None, weights)
    assert r["process"] == 0.0  # all weight on fmt, and fmt = 0
    assert r["name"] == 1.0  # components do not depend on weights


def test_default_weights_sum_to_one():
    assert sum(DEFAULT_PROCESS_WEIGHTS.values()) == pytest.approx(1.0)
    assert list(DEFAULT_PROCESS_WEIGHTS) == ["fmt", "name", "key", "value", "parallel"]


def test_weights_within_tolerance_are_accepted():
    w = dict(DEFAULT_PROCESS_WEIGHTS, fmt=0.1 + 5e-7)
    assert process_reward("x", [], None, w)["process"] == pytest.approx(0.9)


@pytest.mark.parametrize(
    ("weights", "message"),
    [
        ({"fmt": 0.5, "name": 0.5}, "missing"),
        (dict(DEFAULT_PROCESS_WEIGHTS, extra=0.0), "unexpected"),
        (dict(DEFAULT_PROCESS_WEIGHTS, fmt=0.2), "sum to 1"),
        (dict(DEFAULT_PROCESS_WEIGHTS, fmt=-0.1, name=0.45), ">= 0"),
        (dict(DEFAULT_PROCESS_WEIGHTS, fmt=math.nan), "finite"),
        (dict(DEFAULT_PROCESS_WEIGHTS, fmt="0.1"), "finite"),
        ([0.1, 0.25, 0.15, 0.2, 0.3], "mapping"),
    ],
)
def test_bad_weights_raise_value_error(weights, message):
    with pytest.raises(ValueError, match=message):
        process_reward("x", [], None, weights)


# --------------------------------------------------------------------------- name F1


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ([], [], 1.0),
        (["a"], [], 0.0),
        ([], ["a"], 0.0),
        (["a"], ["a"], 1.0),
        (["a", "a"], ["a"], 2 * 1 / 3),
        (["a", "b"], ["b", "a"], 1.0),
        (["a", "a", "b"], ["a", "b", "b", "c"], 2 * 2 / 7),
        (["x"], ["y"], 0.0),
    ],
)
def test_name_f1_is_multiset_f1(pred, gold, expected):
    assert name_f1(pred, gold) == pytest.approx(expected)


# --------------------------------------------------------------------------- key / value


def test_key_value_one_when_no_gold_call_has_arguments():
    assert key_value_scores([], [[ToolCall("f", {})]]) == (1.0, 1.0)
    assert key_value_scores([], []) == (1.0, 1.0)


def test_key_value_zero_without_predicted_calls():
    assert key_value_scores([], [[ToolCall("f", {"x": 1})]]) == (0.0, 0.0)


def test_key_value_averages_only_gold_calls_with_arguments():
    gold = [[ToolCall("f", {"x": 1}), ToolCall("g", {})]]
    assert key_value_scores([ToolCall("f", {"x": 1})], gold) == (1.0, 1.0)


def test_key_value_picks_the_best_candidate_not_the_first():
    gold = [[ToolCall("f", {"a": 1, "b": 2})]]
    pred = [ToolCall("f", {"a": 1}), ToolCall("f", {"a": 1, "b": 2})]
    assert key_value_scores(pred, gold) == (1.0, 1.0)


def test_key_value_uses_each_prediction_once():
    gold = [[ToolCall("f", {"a": 1})], [ToolCall("f", {"a": 1})]]
    assert key_value_scores([ToolCall("f", {"a": 1})], gold) == (0.5, 0.5)


def test_key_value_needs_a_shared_key_to_match():
    gold = [[ToolCall("f", {"a": 1})]]
    assert key_value_scores([ToolCall("f", {"b": 1})], gold) == (0.0, 0.0)
    assert key_value_scores([ToolCall("g", {"a": 1})], gold) == (0.0, 0.0)


def test_key_is_jaccard_and_value_is_over_gold_keys():
    gold = [[ToolCall("f", {"a": 1, "b": 2, "c": 3})]]
    pred = [ToolCall("f", {"a": 1, "b": 9, "d": 4})]
    key, value = key_value_scores(pred, gold)
    assert key == pytest.approx(2 / 4)  # {a, b} / {a, b, c, d}
    assert value == pytest.approx(1 / 3)  # a matches, b does not, over 3 gold keys


def test_key_value_walks_gold_in_order():
    # The first gold call takes the only candidate even though the second would score more.
    gold = [[ToolCall("f", {"a": 1, "b": 0})], [ToolCall("f", {"a": 1})]]
    key, value = key_value_scores([ToolCall("f", {"a": 1})], gold)
    assert key == pytest.approx((0.5 + 0.0) / 2)
    assert value == pytest.approx((0.5 + 0.0) / 2)


# --------------------------------------------------------------------------- loose match


@pytest.mark.parametrize(
    ("pred", "gold", "expected"),
    [
        ("Paris", "paris", True),
        ("  Paris\n", "PARIS", True),
        ("Paris", "Lyon", False),
        ("", "", True),
        (1, 1.0, True),
        (0.1 + 0.2, 0.3, True),
        (1.0, 1.0 + 1e-8, False),
        (10**30, 10**30, True),
        (10**400, 1.5, False),
        (math.inf, math.inf, True),
        (math.nan, math.nan, False),
        ("5", 5, True),
        (" 2.50 ", 2.5, True),
        (5, "5.0", True),
        ("1e3", 1000, True),
        ("5 apples", 5, False),
        ("nan", math.nan, False),
        ("1_000", 1000, False),
        ("5", "5.0", False),  # two strings compare as strings
        (True, True, True),
        (True, False, False),
        ("true", True, True),
        (" FALSE ", False, True),
        ("1", True, True),
        ("0", False, True),
        (1, True, True),
        (0.0, False, True),
        (2, True, False),
        ("yes", True, False),
        (True, "true", True),
        ("true", "TRUE", True),
        ([1, 2], [1, 2], True),
        ([1, 2], [2, 1], False),
        ({"b": 1, "a": 2}, {"a": 2, "b": 1}, True),
        ({"a": [1, {"c": 2, "b": 3}]}, {"a": [1, {"b": 3, "c": 2}]}, True),
        ((1, 2), [1, 2], True),
        ({"a": "X"}, {"a": "x"}, False),  # exact inside containers
        ("[1, 2]", [1, 2], False),
        (None, None, True),
        (None, "None", False),
        (None, 0, False),
        ({1: "a", "b": 2}, {"b": 2}, False),  # unsortable keys: no match, no crash
    ],
)
def test_loose_match_table(pred, gold, expected):
    assert loose_match(pred, gold) is expected


# --------------------------------------------------------------------------- ToolPO action


def test_action_score_all_correct():
    gold = [[ToolCall("f", {"x": 1}), ToolCall("g", {})]]
    assert action_score([ToolCall("g", {"z": 0}), ToolCall("f", {"x": "1"})], gold) == 1.0


def test_action_score_allows_extra_keys_but_needs_every_gold_key():
    gold = [[ToolCall("f", {"x": 1, "y": 2})]]
    assert action_score([ToolCall("f", {"x": 1, "y": 2, "z": 3})], gold) == 1.0
    assert action_score([ToolCall("f", {"x": 1})], gold) == 0.0
    assert action_score([ToolCall("f", {"x": 1, "y": 3})], gold) == 0.0


def test_action_score_is_one_to_one():
    gold = [[ToolCall("f", {"x": 1})], [ToolCall("f", {"x": 1})]]
    assert action_score([ToolCall("f", {"x": 1})], gold) == 0.5
    assert action_score([ToolCall("f", {"x": 1})] * 2, gold) == 1.0


def test_action_score_ignores_extra_predicted_calls():
    gold = [[ToolCall("f", {"x": 1})]]
    pred = [ToolCall("g", {}), ToolCall("f", {"x": 1}), ToolCall("f", {"x": 1})]
    assert action_score(pred, gold) == 1.0


def test_action_score_is_greedy_in_gold_order():
    # f() takes the first f call; the f(a=1) gold then finds only f(b=1): 1 of 2.
    gold = [[ToolCall("f", {})], [ToolCall("f", {"a": 1})]]
    pred = [ToolCall("f", {"a": 1}), ToolCall("f", {"b": 1})]
    assert action_score(pred, gold) == 0.5


def test_action_score_with_empty_gold_rewards_only_abstention():
    assert action_score([], []) == 1.0
    assert action_score([ToolCall("f", {})], []) == 0.0


def test_action_score_on_flat_names():
    assert action_score([ToolCall("a", {"q": 1})], ["a", "b"]) == 0.5
    assert action_score([], ["a"]) == 0.0


# --------------------------------------------------------------------------- properties

json_values = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.integers(),
        st.floats(allow_nan=False),
        st.text(max_size=6),
    ),
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=3), children, max_size=3)
    ),
    max_leaves=8,
)


@given(json_values, json_values)
def test_loose_match_never_raises_and_is_reflexive(a, b):
    assert isinstance(loose_match(a, b), bool)
    assert loose_match(a, a)


text_fragments = st.lists(
    st.one_of(
        st.sampled_from(
            [
                "<tool_call>",
                "</tool_call>",
                "<think>",
                "</think>",
                '{"name": "f", "arguments": {"x": 1}}',
                '[{"name": "f"}, {"name": "g", "arguments": {"x": "1"}}]',
                '{"name": "h", "arguments": []}',
            ]
        ),
        st.text(max_size=5),
    ),
    max_size=20,
).map("".join)
gold_shapes = st.sampled_from(
    [
        [],
        ["f", "g"],
        [[{"name": "f", "arguments": {"x": 1}}, {"name": "g", "arguments": {"x": 1}}]],
        [{"name": "g", "arguments": {}}],
    ]
)


@given(text_fragments, gold_shapes)
def test_process_reward_components_stay_in_unit_interval(text, gold):
    r = process_reward(text, gold, ["f", "g"])
    assert list(r) == KEYS
    assert all(0.0 <= v <= 1.0 + 1e-12 for v in r.values())
    assert r["process"] == pytest.approx(weighted(r))
