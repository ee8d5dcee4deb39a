"""Sanitising model-chosen strings (slca_lightning.calls.sanitize) and environment-error
reporting (slca_lightning.calls.env_errors)."""

from __future__ import annotations

import json
import logging
from collections import Counter

import pytest

from slca_lightning.calls.env_errors import env_error_json, report_env_error
from slca_lightning.calls.sanitize import (
    MAX_DEPTH,
    MAX_NAME_CHARS,
    clean_call,
    clean_text,
    clean_value,
    is_clean,
    preview,
    safe_str,
)
from slca_lightning.types import ToolCall


def encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


@pytest.mark.parametrize(
    ("raw", "clean"),
    [
        ("tool\udc00", "tool\ufffd"),
        ("\ud800\udfff", "\ufffd\ufffd"),  # two lone surrogates, not a pair
        ("a\x00b\x1bc\x7f\x85", "a\\x00b\\x1bc\\x7f\\x85"),
        ("keep\ttabs\nnewlines\r", "keep\ttabs\nnewlines\r"),
        ("plain ascii and é 漢字 😀", "plain ascii and é 漢字 😀"),
    ],
)
def test_clean_text_replaces_surrogates_and_escapes_controls(raw, clean):
    out = clean_text(raw)
    assert out == clean and encodes(out) and is_clean(out)
    assert clean_text(out) == out  # idempotent


def test_clean_text_caps_length_with_a_marker_and_is_idempotent():
    out = clean_text("x" * 10_000, 100)
    assert len(out) == 100 and out.startswith("xxx") and "10000 chars, cut" in out
    assert clean_text(out, 100) == out
    assert clean_text("short", 100) == "short"
    # escaping happens before the cap: the result never exceeds it
    assert len(clean_text("\x00" * 1000, 50)) == 50


def test_clean_value_cleans_keys_and_values_and_caps_depth():
    deep: list = []
    node = deep
    for _ in range(MAX_DEPTH + 10):
        node.append([])
        node = node[0]
    value = {"k\udc00": ["v\x00", {"n": 1.5, "t": True, "z": None}], "deep": deep, "t": (1, 2)}
    out = clean_value(value)
    assert out["k\ufffd"] == ["v\\x00", {"n": 1.5, "t": True, "z": None}]
    assert out["t"] == [1, 2]
    json.dumps(out).encode("utf-8")  # encodable everywhere now
    depth, node = 0, out["deep"]
    while isinstance(node, list):
        node, depth = node[0], depth + 1
    assert node == f"[nested deeper than {MAX_DEPTH} levels]" and depth == MAX_DEPTH - 1
    assert clean_value(out) == out


def test_clean_value_keeps_numbers_and_rejects_circular_structures():
    big = 10**4000
    nan = float("nan")
    out = clean_value({"a": big, "b": float("inf"), "c": nan})
    assert out["a"] == big and out["b"] == float("inf") and out["c"] is nan
    loop: dict = {}
    loop["self"] = loop
    with pytest.raises(ValueError, match="circular"):
        clean_value(loop)
    shared = [1]
    assert clean_value({"a": shared, "b": shared}) == {"a": [1], "b": [1]}  # not circular


def test_clean_call_copies_and_caps_the_name():
    raw = ToolCall("n\udc00" * 1000, {"a": "\udc00"})
    call = clean_call(raw)
    assert len(call.name) == MAX_NAME_CHARS and call.name.startswith("n\ufffdn")
    assert call.arguments == {"a": "\ufffd"} and raw.arguments == {"a": "\udc00"}  # a copy


def test_safe_str_and_preview_never_raise():
    class Unprintable:
        def __str__(self):
            raise ValueError("no")

    assert safe_str(Unprintable()) == "<unprintable Unprintable>"
    assert safe_str(KeyError(10**5000)) == "<unprintable KeyError>"  # str(int) fails
    assert preview({"x\udc00": "y" * 10_000}).startswith("{'x\\udc00': 'yyy")
    assert len(preview(list(range(10**5)))) <= 200


def test_first_traceback_of_each_type_is_logged_once_and_all_are_counted(caplog):
    counts: Counter = Counter()
    caplog.set_level(logging.ERROR, logger="slca_lightning.env_errors")
    for _ in range(3):
        try:
            "x".encode("ascii") + "\udc00".encode()
        except UnicodeEncodeError as exc:
            report_env_error(exc, "test place A", counts)
    try:
        raise TypeError("bad \udc00 input")
    except TypeError as exc:
        name = report_env_error(exc, "test place A", counts)
    assert name == "TypeError"
    assert counts == {"UnicodeEncodeError": 3, "TypeError": 1}
    records = [r for r in caplog.records if "test place A" in r.getMessage()]
    assert len(records) == 2  # one per type
    assert all("Traceback" in r.getMessage() and encodes(r.getMessage()) for r in records)
    text = env_error_json(TypeError("bad \udc00"), "somewhere")
    assert json.loads(text) == {"error": "environment error in somewhere: TypeError: bad \ufffd"}
