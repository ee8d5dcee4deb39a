"""The project JSONL task format: exact round trips and errors naming file, line and field."""

import json
from pathlib import Path

import pytest

from slca_lightning.data import (
    JsonlTaskFormatError,
    SyntheticTaskGenerator,
    load_jsonl_tasks,
    load_toucan_rl,
    render_hermes_system_prompt,
    save_jsonl_tasks,
)
from slca_lightning.types import ToolCall

PREVIEW = Path(__file__).resolve().parents[2] / "fixtures" / "toucan_rl_preview.jsonl"
WEATHER = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "Weather of a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
CLOCK = {"name": "clock", "parameters": {"type": "object", "properties": {}}}


def row(**over):
    base = {
        "id": "t1",
        "question": "Weather in Paris and Rome?",
        "tools": [WEATHER],
        "gold_calls": [
            [
                {"name": "weather", "arguments": {"city": "Paris"}},
                {"name": "weather", "arguments": {"city": "Rome"}},
            ]
        ],
    }
    base.update(over)
    return {k: v for k, v in base.items() if v is not None}


def write(tmp_path, rows):
    path = tmp_path / "tasks.jsonl"
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_load_defaults(tmp_path):
    (task,) = load_jsonl_tasks(write(tmp_path, [row(metadata={"k": 1})]))
    assert task.task_id == "t1" and task.subset == "tool_call" and task.gold_format == "nested"
    assert task.allowed_tools == ["weather"]
    assert task.gold_calls == [
        [ToolCall("weather", {"city": "Paris"}), ToolCall("weather", {"city": "Rome"})]
    ]
    assert task.messages == [
        {"role": "system", "content": render_hermes_system_prompt([WEATHER])},
        {"role": "user", "content": "Weather in Paris and Rome?"},
    ]
    assert task.metadata == {"k": 1}


def test_flat_forms_empty_gold_system_and_bare_tools(tmp_path):
    rows = [
        row(id="a", gold_calls=["weather", "clock"], tools=[WEATHER, CLOCK]),
        row(id="b", gold_calls=[{"name": "weather", "arguments": {"city": "Oslo"}}]),
        row(id="c", gold_calls=[], system="Be brief."),
    ]
    a, b, c = load_jsonl_tasks(write(tmp_path, rows))
    assert a.gold_format == "flat" and [[x.name for x in s] for s in a.gold_calls] == [
        ["weather"],
        ["clock"],
    ]
    assert a.tools[1] == {"type": "function", "function": CLOCK}
    assert b.gold_format == "nested" and b.gold_calls == [[ToolCall("weather", {"city": "Oslo"})]]
    assert c.subset == "irrelevant" and c.gold_calls == []
    assert c.messages[0]["content"].startswith(
        "Be brief.\n\nYou have access to the following tools:"
    )


def test_round_trip_is_exact(tmp_path):
    tasks = SyntheticTaskGenerator(seed=5).generate(60)
    tasks[0].allowed_tools = tasks[0].allowed_tools[::-1]
    tasks[1].messages = [*tasks[1].messages, {"role": "assistant", "content": "hm"}]
    tasks[2].gold_format = "flat"  # a format the record's gold would not imply
    if PREVIEW.exists():
        tasks += load_toucan_rl(PREVIEW)
    path = tmp_path / "sub" / "out.jsonl"
    save_jsonl_tasks(tasks, path)
    assert load_jsonl_tasks(path) == tasks
    flat = [
        t
        for t in tasks
        if t.gold_format == "flat"
        and t.gold_calls
        and not any(c.arguments for s in t.gold_calls for c in s)
    ]
    again = tmp_path / "again.jsonl"
    save_jsonl_tasks(load_jsonl_tasks(path), again)
    assert again.read_text(encoding="utf-8") == path.read_text(encoding="utf-8")
    if flat:
        line = next(
            json.loads(x)
            for x in path.read_text().splitlines()
            if json.loads(x)["id"] == flat[0].task_id
        )
        assert all(isinstance(n, str) for n in line["gold_calls"])


@pytest.mark.parametrize(
    ("bad", "field", "words"),
    [
        (
            row(gold_calls=[[{"name": "weather"}, {"name": "search", "arguments": {}}]]),
            "gold_calls[0][1].name",
            "'search' is not among",
        ),
        (row(gold_calls=["weather", "search"]), "gold_calls[1]", "not among"),
        (row(gold_calls=[{"name": "search"}]), "gold_calls[0].name", "not among"),
        (row(id=None), "id", "missing"),
        (row(question=3), "question", "expected a string"),
        (row(tools={"a": 1}), "tools", "expected a list"),
        (row(tools=[{"type": "function"}]), "tools[0].function", "missing"),
        (
            row(tools=[{"name": "x", "parameters": {"type": 5}}]),
            "tools[0].function.parameters",
            "not a JSON schema",
        ),
        (row(subset="chat"), "subset", "unknown subset 'chat'"),
        (row(subset="irrelevant"), "subset", "disagrees"),
        (row(gold_calls=[], subset="tool_call"), "subset", "disagrees"),
        (row(gold_calls=[[1]]), "gold_calls", "gold calls"),
        (row(gold_format="weird"), "gold_format", "expected 'nested' or 'flat'"),
        (row(metadata=[1]), "metadata", "expected an object"),
        (row(gold_call=[]), "gold_call", "unknown field"),
        (
            row(system="s", messages=[{"role": "user", "content": "x"}]),
            "system",
            "either system or messages",
        ),
        (row(id="t0"), "id", "duplicate id 't0'"),
    ],
)
def test_errors_name_file_line_and_field(tmp_path, bad, field, words):
    path = write(tmp_path, [row(id="t0"), "", bad])
    with pytest.raises(JsonlTaskFormatError) as info:
        load_jsonl_tasks(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}, line 3, field {field}: "), msg
    assert words in msg
    assert isinstance(info.value, ValueError)


def test_bad_json_line(tmp_path):
    path = write(tmp_path, [row(id="a"), row(id="b"), "{not json"])
    with pytest.raises(JsonlTaskFormatError, match=r"line 3: invalid JSON"):
        load_jsonl_tasks(path)
