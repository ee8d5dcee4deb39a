"""Task files (issue 17): a UTF-8 byte-order mark is skipped; NaN / Infinity / overflowing
numbers are refused with file, line and field; saving refuses them too."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from slca_lightning.data import JsonlTaskFormatError, load_jsonl_tasks, load_toucan_rl
from slca_lightning.data.tasks import save_jsonl_tasks

ROW = {
    "id": "t1",
    "question": "What is 2 + 3?",
    "tools": [
        {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
            },
        }
    ],
    "gold_calls": [[{"name": "add", "arguments": {"a": 2, "b": 3}}]],
}


def write(tmp_path: Path, text: str, bom: bool = False) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + text.encode("utf-8"))
    return path


def test_a_bom_prefixed_file_loads_like_the_plain_one(tmp_path):
    text = json.dumps(ROW) + "\n" + json.dumps({**ROW, "id": "t2"}) + "\n"
    plain = load_jsonl_tasks(write(tmp_path, text))
    with_bom = load_jsonl_tasks(write(tmp_path, text, bom=True))
    assert [t.task_id for t in with_bom] == ["t1", "t2"]
    assert with_bom == plain


def test_a_bom_in_a_later_line_is_still_an_error(tmp_path):
    text = json.dumps(ROW) + "\n\ufeff" + json.dumps({**ROW, "id": "t2"}) + "\n"
    with pytest.raises(JsonlTaskFormatError, match=r"line 2: invalid JSON"):
        load_jsonl_tasks(write(tmp_path, text))


@pytest.mark.parametrize(
    ("literal", "token"),
    [("NaN", "NaN"), ("Infinity", "Infinity"), ("-Infinity", "-Infinity"), ("1e999", "1e999")],
)
def test_non_finite_numbers_are_refused_with_file_line_and_field(tmp_path, literal, token):
    good = json.dumps(ROW)
    bad = good.replace('"b": 3', f'"b": {literal}')
    assert bad != good
    path = write(tmp_path, good + "\n\n" + bad + "\n")
    with pytest.raises(JsonlTaskFormatError) as err:
        load_jsonl_tasks(path)
    e = err.value
    assert (e.path, e.line, e.field) == (str(path), 3, "gold_calls[0][0].arguments.b")
    assert str(e) == (
        f"{path}, line 3, field gold_calls[0][0].arguments.b: {token} is not a finite "
        "number (JSON has no NaN or Infinity)"
    )


def test_nan_in_metadata_and_at_top_level(tmp_path):
    path = write(tmp_path, json.dumps(ROW)[:-1] + ', "metadata": {"w": [1, NaN]}}\n')
    with pytest.raises(JsonlTaskFormatError, match=r"line 1, field metadata\.w\[1\]: NaN"):
        load_jsonl_tasks(path)
    path = write(tmp_path, "NaN\n")
    with pytest.raises(JsonlTaskFormatError, match=r"line 1: NaN is not a finite number"):
        load_jsonl_tasks(path)


def test_toucan_files_get_the_same_checks(tmp_path):
    path = write(tmp_path, '{"x": NaN}\n')
    with pytest.raises(ValueError, match=r"line 1, field x: NaN is not a finite number"):
        load_toucan_rl(path)


def test_saving_refuses_non_finite_values(tmp_path):
    (task,) = load_jsonl_tasks(write(tmp_path, json.dumps(ROW) + "\n"))
    task.metadata["w"] = math.inf
    with pytest.raises(ValueError, match=r"task 't1': cannot be saved as JSON"):
        save_jsonl_tasks([task], tmp_path / "out.jsonl")
