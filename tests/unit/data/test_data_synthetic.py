"""Synthetic suite and generator: reproducible, disjoint splits, gold calls valid and runnable."""

import json
import re
from collections import Counter

import jsonschema
import pytest

from slca_lightning.data import (
    SyntheticTaskGenerator,
    builtin_suite,
    reference_answer,
    render_hermes_system_prompt,
)
from slca_lightning.types import ToolCall

try:
    from slca_lightning.calls.parsing import parse_tool_calls
except ImportError:  # pragma: no cover - the parser is written elsewhere
    parse_tool_calls = None

SUITE = builtin_suite()
TASKS = SyntheticTaskGenerator(seed=0).generate(400)


def by_kind(kind):
    return [t for t in TASKS if t.metadata["kind"] == kind]


def as_tuples(task):
    return json.dumps([[[c.name, c.arguments] for c in s] for s in task.gold_calls], sort_keys=True)


def test_suite_shape():
    assert 8 <= len(SUITE.schemas) <= 12
    assert set(SUITE.names) == set(SUITE.functions)
    assert sorted(n for names in SUITE.families.values() for n in names) == sorted(SUITE.names)
    for schema in SUITE.schemas:
        assert schema["type"] == "function"
        fn = schema["function"]
        assert fn["name"] and fn["description"]
        jsonschema.validators.validator_for(fn["parameters"]).check_schema(fn["parameters"])
        assert set(fn["parameters"]["required"]) <= set(fn["parameters"]["properties"])
    json.dumps(SUITE.schemas)


@pytest.mark.parametrize(
    ("name", "arguments", "words"),
    [
        ("weather", {"city": "Atlantis", "day": "today"}, "Atlantis"),
        ("add", {"a": 1}, "'b' is a required property"),
        ("add", {"a": "1", "b": 2}, "not of type 'integer'"),
        ("power", {"base": 2, "exponent": 11}, "exponent"),
        ("convert", {"value": 1, "from_unit": "km", "to_unit": "kg"}, "cannot convert km"),
        ("add_days", {"date": "2024-02-30", "days": 1}, "YYYY-MM-DD"),
        ("nope", {}, "unknown tool 'nope'"),
    ],
)
def test_bad_arguments_raise_value_error(name, arguments, words):
    with pytest.raises(ValueError, match=re.escape(words)):
        SUITE.call(name, arguments)


def test_functions_raise_value_error_when_called_directly():
    with pytest.raises(ValueError, match="city must be one of"):
        SUITE.functions["city_info"]("Atlantis")
    with pytest.raises(ValueError, match="between 0 and 10"):
        SUITE.functions["power"](2, 50)


def test_deterministic_for_a_seed_and_different_across_seeds():
    again = SyntheticTaskGenerator(seed=0).generate(400)
    assert again == TASKS
    assert SyntheticTaskGenerator(seed=0).generate(50) == TASKS[:50]
    other = SyntheticTaskGenerator(seed=1).generate(400)
    assert [t.question for t in other] != [t.question for t in TASKS]
    assert [t.task_id for t in TASKS[:3]] == ["syn-0-0", "syn-0-1", "syn-0-2"]
    assert other[0].task_id == "syn-1-0"


def test_train_and_heldout_are_disjoint():
    train, heldout = SyntheticTaskGenerator(seed=3).splits(300, 100)
    assert (len(train), len(heldout)) == (300, 100)
    assert not {t.task_id for t in train} & {t.task_id for t in heldout}
    assert not {t.question for t in train} & {t.question for t in heldout}
    tool_train = {as_tuples(t) for t in train if t.needs_tools}
    assert not tool_train & {as_tuples(t) for t in heldout if t.needs_tools}
    everything = [as_tuples(t) if t.needs_tools else t.question for t in train + heldout]
    assert len(set(everything)) == 400


VALIDATORS = {
    s["function"]["name"]: jsonschema.Draft202012Validator(s["function"]["parameters"])
    for s in SUITE.schemas
}


def test_every_gold_call_validates_and_runs():
    for task in TASKS:
        for step in task.gold_calls:
            for call in step:
                assert call.name in task.allowed_tools
                VALIDATORS[call.name].validate(call.arguments)
                result = SUITE.functions[call.name](**call.arguments)
                json.dumps(result)


def test_kinds_and_subsets():
    counts = Counter(t.metadata["kind"] for t in TASKS)
    assert set(counts) == {"single", "parallel", "multistep", "irrelevant"}
    assert 0.07 < counts["irrelevant"] / len(TASKS) < 0.25
    for task in by_kind("irrelevant"):
        assert task.gold_calls == [] and task.subset == "irrelevant" and not task.needs_tools
    for task in TASKS:
        if task.metadata["kind"] != "irrelevant":
            assert task.subset == "tool_call" and task.needs_tools
    assert all(len(t.gold_calls) == 1 and len(t.gold_calls[0]) == 2 for t in by_kind("parallel"))
    assert all(len(t.gold_calls) == 1 and len(t.gold_calls[0]) == 1 for t in by_kind("single"))
    assert all([len(s) for s in t.gold_calls] == [1, 1] for t in by_kind("multistep"))


def test_multistep_second_argument_comes_from_the_first_result():
    for task in by_kind("multistep"):
        (first,), (second,) = task.gold_calls
        result = SUITE.run(first)
        assert set(second.arguments.values()) & set(result.values()), task.question


def test_task_fields():
    for task in TASKS[:50]:
        assert task.gold_format == "nested"
        assert task.messages[0] == {
            "role": "system",
            "content": render_hermes_system_prompt(task.tools),
        }
        assert task.messages[1] == {"role": "user", "content": task.question}
        assert "<tools>\n" in task.messages[0]["content"]
        assert task.allowed_tools == [t["function"]["name"] for t in task.tools]
        assert {"family", "template", "kind"} <= set(task.metadata)
        json.dumps(task.metadata)


def test_family_selection_and_bad_arguments():
    tasks = SyntheticTaskGenerator(seed=0, families=["math"], distractor_families=0).generate(60)
    names = {c.name for t in tasks for s in t.gold_calls for c in s}
    assert names <= {"add", "multiply", "power"}
    assert all(t.allowed_tools == ["add", "multiply", "power"] for t in tasks)
    with pytest.raises(ValueError, match="unknown"):
        SyntheticTaskGenerator(families=["cooking"])
    with pytest.raises(ValueError, match="fractions"):
        SyntheticTaskGenerator(irrelevant_fraction=0.6, parallel_fraction=0.6)
    with pytest.raises(ValueError, match="distinct"):
        SyntheticTaskGenerator(families=["city"], irrelevant_fraction=0.0).generate(5000)


def _calls_in(text, allowed):
    if parse_tool_calls is not None:
        parsed = parse_tool_calls(text, allowed)
        assert parsed.fmt == 1.0
        return parsed.calls
    bodies = re.findall(r"<tool_call>\n(.*?)\n</tool_call>", text, re.DOTALL)
    return [ToolCall(**json.loads(b)) for b in bodies]


def test_reference_answer_parses_back_to_the_gold_calls():
    for task in TASKS:
        messages = reference_answer(task, SUITE)
        assert messages[-1]["role"] == "assistant" and "<tool_call>" not in messages[-1]["content"]
        assert len(messages[-1]["content"]) >= 10
        turns = [m for m in messages[:-1] if m["role"] == "assistant"]
        steps = [_calls_in(m["content"], task.allowed_tools) for m in turns]
        assert steps == task.gold_calls
        tools = [m for m in messages if m["role"] == "tool"]
        assert len(tools) == sum(len(s) for s in task.gold_calls)
        for msg in tools:
            json.loads(msg["content"])
        if not task.needs_tools:
            assert messages == [{"role": "assistant", "content": task.metadata["answer"]}]


def test_reference_summary_states_the_results():
    task = next(t for t in by_kind("single") if t.gold_calls[0][0].name == "add")
    call = task.gold_calls[0][0]
    final = reference_answer(task)[-1]["content"]
    assert str(call.arguments["a"] + call.arguments["b"]) in final
