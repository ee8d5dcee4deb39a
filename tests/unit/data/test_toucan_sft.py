"""Toucan-1.5M SFT rows → warm-start chats and a replay table.

The fixture rows are hand-made in the released SFT format (config ``SFT`` of
Agent-Ark/Toucan-1.5M: string columns ``uuid``, ``subset_name``, ``question``,
``target_tools``, ``tools`` and ``messages``), built the way the release was: a
``tool_call`` content is ``str()`` of a Qwen-Agent ``function_call`` dict, so it is a
Python literal (single quotes, or double quotes around a string holding an apostrophe)
whose ``arguments`` is a JSON string. The tiny tokenizer is the project's real offline one.
"""

from __future__ import annotations

import json

import pytest

from slca_lightning.data.toucan_sft import (
    ToucanSFTFormatError,
    load_replay_table,
    load_toucan_sft,
    replay_records,
    sft_messages,
)
from slca_lightning.tools.replay import ReplayBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.types import Task, ToolCall


def _tool(name, *params):
    props = {p: {"type": "integer"} for p in params}
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": name,
            "parameters": {"type": "object", "properties": props, "required": list(params)},
        },
    }


def _call(name, args):
    return {"role": "tool_call", "content": str({"name": name, "arguments": json.dumps(args)})}


ROW_PARALLEL = {
    "uuid": "sft-1",
    "subset_name": "single-turn-original",
    "question": "2 plus 3, and 4 times 5?",
    "target_tools": "add, multiply",
    "tools": json.dumps([_tool("add", "a", "b"), _tool("multiply", "a", "b")]),
    "messages": json.dumps(
        [
            {"role": "user", "content": "2 plus 3, and 4 times 5?"},
            {"role": "assistant", "content": "Computing both."},
            _call("add", {"a": 2, "b": 3}),
            _call("multiply", {"a": 4, "b": 5}),
            {"role": "tool_response", "content": '{"sum": 5}'},
            {"role": "tool_response", "content": '{"product": 20}'},
            {"role": "assistant", "content": "5 and 20."},
        ]
    ),
}
ROW_QUOTE = {
    "uuid": "sft-2",
    "subset_name": "multi-turn",
    "question": "Note it",
    "target_tools": "note",
    "tools": json.dumps([_tool("note")]),
    "messages": json.dumps(
        [
            {"role": "user", "content": "Note it"},
            _call("note", {"text": "it's done"}),
            {"role": "tool_response", "content": "saved"},
            {"role": "assistant", "content": "Saved."},
        ]
    ),
}


def write(tmp_path, *rows, raw: str = ""):
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n" + raw)
    return path


def test_rows_parse_with_python_literal_calls(tmp_path):
    assert '"' in str({"text": "it's"}) and ROW_QUOTE["messages"].count("'name'") == 1
    a, b = load_toucan_sft(write(tmp_path, ROW_PARALLEL, ROW_QUOTE))
    assert a.uuid == "sft-1" and [t[0] for t in a.turns][:4] == [
        "user",
        "assistant",
        "tool_call",
        "tool_call",
    ]
    assert a.turns[2][1] == ToolCall("add", {"a": 2, "b": 3})
    assert b.turns[1][1] == ToolCall("note", {"text": "it's done"})


def test_sft_messages_group_parallel_calls_into_one_assistant_turn(tmp_path):
    (traj,) = load_toucan_sft(write(tmp_path, ROW_PARALLEL))
    msgs = sft_messages(traj)
    assert msgs[0]["role"] == "system" and '"name": "multiply"' in msgs[0]["content"]
    assert [m["role"] for m in msgs[1:]] == ["user", "assistant", "tool", "tool", "assistant"]
    turn = msgs[2]["content"]
    assert turn.startswith("Computing both.\n<tool_call>") and turn.count("<tool_call>") == 2


def test_sft_messages_build_training_examples_with_the_real_tokenizer(tmp_path):
    from slca_lightning.models.policy import load_policy
    from slca_lightning.models.sft import build_sft_example

    _, tok = load_policy("tiny")
    for traj in load_toucan_sft(write(tmp_path, ROW_PARALLEL, ROW_QUOTE)):
        ids, mask = build_sft_example(tok, sft_messages(traj))
        trained = tok.decode([i for i, m in zip(ids, mask) if m])
        assert any(mask) and not all(mask)
        assert "tool_call" in trained and "saved" not in trained and '{"sum": 5}' not in trained


def test_replay_table_answers_recorded_calls(tmp_path):
    path = write(tmp_path, ROW_PARALLEL, ROW_QUOTE)
    table = load_replay_table(path)
    assert table[("add", '{"a":2,"b":3}')] == '{"sum": 5}'
    assert table[("multiply", '{"a":4,"b":5}')] == '{"product": 20}'
    assert len(replay_records(load_toucan_sft(path)[1])) == 1
    sim = SchemaGuidedSimulator(ReplayBackend(path=str(path)), use_schema=False, max_retries=0)
    task = Task(task_id="t", messages=[], tools=[])
    assert sim(ToolCall("multiply", {"b": 5, "a": 4}), task).content == '{"product": 20}'
    assert sim(ToolCall("multiply", {"a": 1, "b": 1}), task).error_kind == "backend_error"


@pytest.mark.parametrize(
    "content,field",
    [
        ("{'name': 'add', 'arguments': '{\"a\": 2'}", "messages[1].content.arguments"),
        ("{'name': 'add', 'arguments': ", "messages[1].content"),
        ("__import__('os').system('echo hacked')", "messages[1].content"),
        ("{'arguments': '{}'}", "messages[1].content"),
    ],
)
def test_malformed_call_names_line_and_field_and_never_evaluates(tmp_path, content, field):
    row = dict(
        ROW_QUOTE,
        messages=json.dumps(
            [{"role": "user", "content": "x"}, {"role": "tool_call", "content": content}]
        ),
    )
    path = write(tmp_path, ROW_PARALLEL, row)
    with pytest.raises(ToucanSFTFormatError, match=rf"line 2, field {field.replace('[', '.')}"):
        load_toucan_sft(path)


def test_other_malformed_rows(tmp_path):
    with pytest.raises(ToucanSFTFormatError, match="line 2, field row: not valid JSON"):
        load_toucan_sft(write(tmp_path, ROW_PARALLEL, raw="{oops\n"))
    bad_role = dict(ROW_QUOTE, messages=json.dumps([{"role": "robot", "content": "x"}]))
    with pytest.raises(ToucanSFTFormatError, match=r"line 1, field messages\[0\]\.role"):
        load_toucan_sft(write(tmp_path, bad_role))
    no_tools = {k: v for k, v in ROW_QUOTE.items() if k != "tools"}
    with pytest.raises(ToucanSFTFormatError, match="line 1, field tools: missing"):
        load_toucan_sft(write(tmp_path, no_tools))
