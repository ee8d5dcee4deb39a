"""Gold-call normalisation: every accepted shape, and a clear error for everything else."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from slca_lightning.calls.gold import normalize_gold_calls
from slca_lightning.types import ToolCall

DATA = Path(__file__).resolve().parents[2] / "fixtures" / "toucan_rl_preview.jsonl"


def test_nested_steps_keep_their_grouping():
    gold = [
        [{"name": "a", "arguments": {"x": 1}}, {"name": "b", "arguments": {}}],
        [{"name": "c", "arguments": {"y": "z"}}],
    ]
    steps, shape = normalize_gold_calls(gold)
    assert shape == "nested"
    assert steps == [[ToolCall("a", {"x": 1}), ToolCall("b", {})], [ToolCall("c", {"y": "z"})]]


def test_flat_names_become_one_step_each_without_arguments():
    steps, shape = normalize_gold_calls(["a", "b", "a"])
    assert shape == "flat"
    assert steps == [[ToolCall("a", {})], [ToolCall("b", {})], [ToolCall("a", {})]]


def test_flat_call_dicts_become_one_step_each():
    steps, shape = normalize_gold_calls([{"name": "a", "arguments": {"x": 1}}, {"name": "b"}])
    assert shape == "flat_calls"
    assert steps == [[ToolCall("a", {"x": 1})], [ToolCall("b", {})]]


def test_empty_list_is_empty():
    assert normalize_gold_calls([]) == ([], "empty")
    assert normalize_gold_calls("[]") == ([], "empty")


def test_nested_with_an_empty_step_is_nested():
    assert normalize_gold_calls([[]]) == ([[]], "nested")


def test_toolcall_objects_are_accepted_anywhere():
    a, b = ToolCall("a", {"x": 1}), ToolCall("b", json.dumps({"y": 2}))  # type: ignore[arg-type]
    assert normalize_gold_calls([[a, {"name": "c"}]]) == (
        [[ToolCall("a", {"x": 1}), ToolCall("c", {})]],
        "nested",
    )
    assert normalize_gold_calls([a, b]) == ([[a], [ToolCall("b", {"y": 2})]], "flat_calls")


def test_string_arguments_and_parameters_are_decoded():
    gold = [
        [
            {"name": "a", "arguments": '{"x": 1}'},
            {"name": "b", "parameters": {"y": 2}},
            {"name": "c", "parameters": '{"z": [3]}'},
            {"name": "d", "arguments": ""},
            {"name": "e", "arguments": None},
        ]
    ]
    steps, _ = normalize_gold_calls(gold)
    assert [c.arguments for c in steps[0]] == [{"x": 1}, {"y": 2}, {"z": [3]}, {}, {}]


def test_whole_value_as_json_string_is_decoded_once():
    gold = [[{"name": "a", "arguments": {"x": 1}}]]
    assert normalize_gold_calls(json.dumps(gold)) == ([[ToolCall("a", {"x": 1})]], "nested")
    with pytest.raises(ValueError, match="expected a list"):
        normalize_gold_calls(json.dumps(json.dumps(gold)))


def test_openai_function_wrapper_is_unwrapped():
    gold = [{"type": "function", "function": {"name": "a", "arguments": '{"x": 1}'}}]
    assert normalize_gold_calls(gold) == ([[ToolCall("a", {"x": 1})]], "flat_calls")


def test_result_is_a_copy_of_the_input():
    gold = [[{"name": "a", "arguments": {"x": 1}}]]
    steps, _ = normalize_gold_calls(gold)
    steps[0][0].arguments["x"] = 99
    assert gold[0][0]["arguments"] == {"x": 1}


@pytest.mark.parametrize(
    ("gold", "message"),
    [
        (None, "NoneType"),
        (5, "int 5"),
        ({"name": "a"}, "dict"),
        ("not json", "not JSON"),
        (["a", {"name": "b"}], "mixing dict, str"),
        ([["a"]], "call object, got str 'a'"),
        ([[1]], "step 0 call 0"),
        ([{"arguments": {}}], "no non-empty string name"),
        ([{"name": ""}], "no non-empty string name"),
        (["a", ""], "empty name"),
        ([{"name": "a", "arguments": [1]}], "arguments should be an object, got list"),
        ([{"name": "a", "arguments": "{bad"}], "string but not JSON"),
        ([{"name": "a", "arguments": "[1]"}], "arguments should be an object"),
    ],
)
def test_unsupported_shapes_raise_value_error_saying_what_was_seen(gold, message):
    with pytest.raises(ValueError, match="gold calls") as info:
        normalize_gold_calls(gold)
    assert message in str(info.value)


def test_released_rows_are_flat_or_empty():
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    shapes = []
    for row in rows:
        gt = row["reward_model"]["ground_truth"]
        steps, shape = normalize_gold_calls(gt["gold_tool_calls"])
        shapes.append(shape)
        assert (shape == "empty") == (gt["subset_name"] == "irrelevant")
        assert all(c.name in gt["allowed_tools"] for step in steps for c in step)
    assert shapes == ["flat", "empty", "empty", "flat", "empty"]
