"""Toucan RL loader: the shared preview rows load; malformed rows name file, line and field."""

import copy
import json
import logging
from pathlib import Path

import pytest

from slca_lightning.data import (
    DataFormatError,
    ToucanFormatError,
    load_toucan_rl,
    render_hermes_system_prompt,
)

PREVIEW = Path(__file__).resolve().parents[2] / "fixtures" / "toucan_rl_preview.jsonl"


def preview_rows():
    return [json.loads(line) for line in PREVIEW.read_text(encoding="utf-8").splitlines()]


def write_rows(tmp_path, rows, name="rows.jsonl"):
    path = tmp_path / name
    lines = [r if isinstance(r, str) else json.dumps(r, ensure_ascii=False) for r in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_preview_loads_into_five_tasks():
    tasks = load_toucan_rl(PREVIEW)
    rows = preview_rows()
    assert len(tasks) == 5
    assert [t.subset for t in tasks] == [
        r["reward_model"]["ground_truth"]["subset_name"] for r in rows
    ]
    assert [t.subset for t in tasks] == [
        "tool_call",
        "irrelevant",
        "irrelevant",
        "tool_call",
        "irrelevant",
    ]
    assert [t.task_id for t in tasks] == [f"toucan-{i}" for i in range(1, 6)]
    for task, row in zip(tasks, rows, strict=True):
        gt = row["reward_model"]["ground_truth"]
        assert task.allowed_tools == gt["allowed_tools"]
        assert task.tools == json.loads(gt["tool_schemas"])
        assert task.question == gt["question_content"]
        assert task.messages == row["prompt"]
        assert task.gold_format == "flat"
        assert [[c.name for c in step] for step in task.gold_calls] == [
            [n] for n in gt["gold_tool_calls"]
        ]
        assert all(c.arguments == {} for step in task.gold_calls for c in step)
        assert task.needs_tools == (task.subset == "tool_call")
        assert task.metadata["line"] == int(task.task_id.split("-")[1])
    assert tasks[3].metadata["gold_shape"] == "flat" and tasks[1].metadata["gold_shape"] == "empty"


def test_preview_limit_and_one_info_log(caplog):
    with caplog.at_level(logging.INFO, logger="slca_lightning.data.toucan"):
        tasks = load_toucan_rl(PREVIEW, limit=2)
    assert len(tasks) == 2
    infos = [r for r in caplog.records if r.levelno == logging.INFO]
    assert len(infos) == 1 and "flat list of names" in infos[0].getMessage()


def test_hermes_prompt_matches_the_released_rows_exactly():
    for row in preview_rows():
        tools = json.loads(row["reward_model"]["ground_truth"]["tool_schemas"])
        assert render_hermes_system_prompt(tools) == row["prompt"][0]["content"]


def test_nested_gold_and_id_field(tmp_path, caplog):
    row = preview_rows()[0]
    name = row["reward_model"]["ground_truth"]["allowed_tools"][0]
    row["reward_model"]["ground_truth"]["gold_tool_calls"] = [
        [
            {"name": name, "arguments": {"thought": "a"}},
            {"name": name, "arguments": {"thought": "b"}},
        ],
        [{"name": name, "arguments": '{"thought": "c"}'}],
    ]
    row["extra_info"]["id"] = "abc"
    with caplog.at_level(logging.INFO, logger="slca_lightning.data.toucan"):
        (task,) = load_toucan_rl(write_rows(tmp_path, [row]))
    assert task.task_id == "abc" and task.gold_format == "nested"
    assert [len(s) for s in task.gold_calls] == [2, 1]
    assert task.gold_calls[1][0].arguments == {"thought": "c"}
    assert "nested steps" in caplog.text


def test_blank_lines_are_skipped_but_counted(tmp_path):
    rows = preview_rows()
    path = tmp_path / "gaps.jsonl"
    path.write_text(json.dumps(rows[0]) + "\n\n" + json.dumps(rows[1]) + "\n", encoding="utf-8")
    assert [t.task_id for t in load_toucan_rl(path)] == ["toucan-1", "toucan-3"]


def _mutate(fn):
    row = copy.deepcopy(preview_rows()[0])
    fn(row)
    return row


def _lazy(fn):
    return lambda: _mutate(fn)


GT = "reward_model.ground_truth"


@pytest.mark.parametrize(
    ("make_row", "field", "words"),
    [
        (_lazy(lambda r: r.pop("reward_model")), "reward_model", "missing"),
        (
            _lazy(
                lambda r: r["reward_model"]["ground_truth"].__setitem__("tool_schemas", "[{oops")
            ),
            f"{GT}.tool_schemas",
            "does not decode",
        ),
        (
            _lazy(
                lambda r: r["reward_model"]["ground_truth"].__setitem__("subset_name", "chitchat")
            ),
            f"{GT}.subset_name",
            "unknown subset 'chitchat'",
        ),
        (
            _lazy(lambda r: r["reward_model"]["ground_truth"].pop("gold_tool_calls")),
            f"{GT}.gold_tool_calls",
            "missing",
        ),
        (
            _lazy(
                lambda r: r["reward_model"]["ground_truth"].__setitem__("gold_tool_calls", [1, 2])
            ),
            f"{GT}.gold_tool_calls",
            "gold calls",
        ),
        (
            _lazy(lambda r: r["reward_model"]["ground_truth"].__setitem__("allowed_tools", 7)),
            f"{GT}.allowed_tools",
            "expected a list",
        ),
        (_lazy(lambda r: r.__setitem__("prompt", "hi")), "prompt", "expected a list"),
        (_lazy(lambda r: r["prompt"][1].pop("content")), "prompt[1].content", "missing"),
        (
            _lazy(lambda r: r["reward_model"].__setitem__("ground_truth", "{nope")),
            GT,
            "does not decode",
        ),
        (
            _lazy(
                lambda r: r["reward_model"]["ground_truth"].__setitem__("tool_schemas", '{"a": 1}')
            ),
            f"{GT}.tool_schemas",
            "expected a list",
        ),
    ],
    ids=[
        "missing-reward_model",
        "undecodable-tool_schemas",
        "wrong-subset",
        "missing-gold",
        "bad-gold-shape",
        "allowed-not-list",
        "prompt-not-list",
        "message-without-content",
        "ground_truth-bad-json-string",
        "tool_schemas-not-list",
    ],
)
def test_malformed_row_on_line_3_names_file_line_field(tmp_path, make_row, field, words):
    rows = [*preview_rows()[:2], make_row()]
    path = write_rows(tmp_path, rows)
    with pytest.raises(ToucanFormatError) as info:
        load_toucan_rl(path)
    err = info.value
    msg = str(err)
    assert str(path) in msg and "line 3" in msg and f"field {field}:" in msg and words in msg
    assert (err.line, err.field) == (3, field)
    assert isinstance(err, DataFormatError) and isinstance(err, ValueError)


def test_bad_json_on_line_3(tmp_path):
    rows = preview_rows()
    path = write_rows(tmp_path, [rows[0], rows[1], '{"prompt": [', rows[3]])
    with pytest.raises(ToucanFormatError, match=r"line 3: invalid JSON") as info:
        load_toucan_rl(path)
    assert str(path) in str(info.value) and info.value.field is None


def test_missing_tool_schemas_falls_back_to_top_level_tools(tmp_path):
    row = _mutate(lambda r: r["reward_model"]["ground_truth"].pop("tool_schemas"))
    (task,) = load_toucan_rl(write_rows(tmp_path, [row]))
    assert task.tools == json.loads(row["tools"])
    row.pop("tools")
    with pytest.raises(
        ToucanFormatError, match=r"line 1, field reward_model\.ground_truth\.tool_schemas: missing"
    ):
        load_toucan_rl(write_rows(tmp_path, [row], "b.jsonl"))
