"""Hermes ``<tool_call>`` parser: literal cases per error kind, tag counting, robustness."""

from __future__ import annotations

import json
import time

from hypothesis import given, settings
from hypothesis import strategies as st

from slca_lightning.calls.parsing import THINK_RE, ParseResult, parse_tool_calls, strip_think
from slca_lightning.types import ToolCall


def block(payload: object) -> str:
    body = payload if isinstance(payload, str) else json.dumps(payload)
    return f"<tool_call>{body}</tool_call>"


# --------------------------------------------------------------------------- valid blocks


def test_single_object_block_gives_one_call():
    r = parse_tool_calls('Sure.\n<tool_call>\n{"name": "f", "arguments": {"x": 1}}\n</tool_call>')
    assert r.calls == [ToolCall("f", {"x": 1})]
    assert (r.n_open, r.n_close, r.denominator, r.n_valid_blocks) == (1, 1, 1, 1)
    assert r.fmt == 1.0
    assert not r.malformed
    assert r.n_invalid_calls == 0


def test_list_block_gives_parallel_calls_in_order():
    r = parse_tool_calls(block([{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]))
    assert [c.name for c in r.calls] == ["a", "b"]
    assert len(r.first_valid_block.entries) == 2
    assert r.fmt == 1.0


def test_parameters_key_is_accepted_as_arguments():
    r = parse_tool_calls(block({"name": "f", "parameters": {"q": "x"}}))
    assert r.calls == [ToolCall("f", {"q": "x"})]


def test_arguments_wins_over_parameters():
    r = parse_tool_calls(block({"name": "f", "arguments": {"a": 1}, "parameters": {"b": 2}}))
    assert r.calls == [ToolCall("f", {"a": 1})]


def test_missing_arguments_count_as_empty_dict():
    r = parse_tool_calls(block({"name": "f"}))
    assert r.calls == [ToolCall("f", {})]
    assert r.blocks[0].valid


def test_block_offsets_cover_the_tags():
    text = "ab" + block({"name": "f"}) + "cd"
    r = parse_tool_calls(text)
    b = r.blocks[0]
    assert text[b.start : b.end] == block({"name": "f"})
    assert b.text == json.dumps({"name": "f"})


def test_several_blocks_flatten_valid_calls_only():
    text = block({"name": "a"}) + block("{bad") + block([{"name": "b"}, {"name": "c"}])
    r = parse_tool_calls(text)
    assert [c.name for c in r.calls] == ["a", "b", "c"]
    assert r.n_valid_blocks == 2
    assert r.fmt == 2 / 3
    assert r.malformed  # one block is not JSON


# --------------------------------------------------------------------------- error kinds


def test_invalid_json_block():
    r = parse_tool_calls('<tool_call>{"name": "f", </tool_call>')
    b = r.blocks[0]
    assert (b.valid, b.error, b.entries) == (False, "invalid_json", [])
    assert r.fmt == 0.0
    assert r.malformed
    assert r.n_invalid_calls == 1


def test_empty_list_block():
    b = parse_tool_calls(block([])).blocks[0]
    assert (b.valid, b.error) == (False, "empty_list")


def test_json_scalar_block_is_not_object_or_list():
    for payload in ('"f"', "3", "null", "true"):
        r = parse_tool_calls(block(payload))
        assert r.blocks[0].error == "not_object_or_list"
        assert r.n_invalid_calls == 1
        assert not r.malformed  # it is valid JSON


def test_non_object_inside_list_is_not_object():
    b = parse_tool_calls(block([{"name": "a"}, 5])).blocks[0]
    assert (b.valid, b.error) == (False, "invalid_entry")
    assert b.entries[0].error is None and b.entries[0].call == ToolCall("a", {})
    assert (b.entries[1].call, b.entries[1].error, b.entries[1].raw) == (None, "not_object", 5)


def test_missing_empty_or_non_string_name_is_missing_name():
    for obj in ({"arguments": {}}, {"name": ""}, {"name": "   "}, {"name": 3}, {"name": None}):
        r = parse_tool_calls(block(obj))
        assert r.blocks[0].entries[0].error == "missing_name", obj
        assert r.blocks[0].entries[0].raw == obj
        assert r.calls == []


def test_unknown_tool_against_allowed_tools():
    r = parse_tool_calls(block({"name": "g"}), allowed_tools=["f"])
    assert r.blocks[0].entries[0].error == "unknown_tool"
    assert r.fmt == 0.0
    assert parse_tool_calls(block({"name": "g"}), allowed_tools=None).fmt == 1.0
    assert parse_tool_calls(block({"name": "f"}), allowed_tools=iter(["f"])).fmt == 1.0


def test_one_bad_entry_invalidates_the_whole_block():
    r = parse_tool_calls(block([{"name": "f"}, {"name": "g"}]), allowed_tools={"f"})
    assert r.n_valid_blocks == 0
    assert r.calls == []
    assert r.n_invalid_calls == 1  # the one bad entry


def test_non_dict_arguments_are_arguments_not_dict():
    for args in ([1], 3, None, "x", True):
        r = parse_tool_calls(block({"name": "f", "arguments": args}))
        assert r.blocks[0].entries[0].error == "arguments_not_dict", args


def test_json_string_arguments_rejected_by_default_and_decoded_on_request():
    text = block({"name": "f", "arguments": json.dumps({"x": 1})})
    assert parse_tool_calls(text).blocks[0].entries[0].error == "arguments_not_dict"
    lenient = parse_tool_calls(text, accept_string_arguments=True)
    assert lenient.calls == [ToolCall("f", {"x": 1})]
    bad = block({"name": "f", "arguments": "[1, 2]"})
    assert parse_tool_calls(bad, accept_string_arguments=True).calls == []


def test_nan_literal_is_accepted_as_json():
    r = parse_tool_calls('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>')
    assert r.fmt == 1.0


def test_raw_control_character_in_string_is_invalid_json():
    r = parse_tool_calls('<tool_call>{"name": "f\x01"}</tool_call>')
    assert r.blocks[0].error == "invalid_json"


# --------------------------------------------------------------------------- tag counting


def test_no_tags_scores_zero_format():
    r = parse_tool_calls("Just an answer.")
    assert (r.n_open, r.n_close, r.denominator, r.fmt) == (0, 0, 0, 0.0)
    assert r.first_valid_block is None
    assert not r.malformed


def test_unclosed_open_counts_in_denominator():
    r = parse_tool_calls(block({"name": "f"}) + "<tool_call>{")
    assert (r.n_open, r.n_close, r.denominator, len(r.blocks)) == (2, 1, 2, 1)
    assert r.fmt == 0.5
    assert r.n_invalid_calls == 1
    assert r.malformed


def test_stray_close_counts_in_denominator():
    r = parse_tool_calls("</tool_call>" + block({"name": "f"}) + "</tool_call>")
    assert (r.n_open, r.n_close, r.denominator, len(r.blocks)) == (1, 3, 3, 1)
    assert r.fmt == 1 / 3
    assert r.n_invalid_calls == 2


def test_close_before_open_pairs_nothing():
    r = parse_tool_calls("</tool_call> x <tool_call>")
    assert (r.n_open, r.n_close, r.denominator, len(r.blocks)) == (1, 1, 1, 0)
    assert r.fmt == 0.0
    assert r.malformed
    assert r.n_invalid_calls == 1


def test_nested_open_pairs_outer_open_with_first_close():
    text = '<tool_call><tool_call>{"name": "f"}</tool_call></tool_call>'
    r = parse_tool_calls(text)
    assert (r.n_open, r.n_close, r.denominator, len(r.blocks)) == (2, 2, 2, 1)
    assert r.blocks[0].text == '<tool_call>{"name": "f"}'
    assert r.blocks[0].error == "invalid_json"
    assert r.fmt == 0.0
    assert r.n_invalid_calls == 2


def test_open_inside_block_swallows_the_next_call():
    text = '<tool_call>{"name": "a"} <tool_call>{"name": "b"}</tool_call>'
    r = parse_tool_calls(text)
    assert (r.n_open, r.n_close, len(r.blocks), r.fmt) == (2, 1, 1, 0.0)


# --------------------------------------------------------------------------- think stripping


def test_think_blocks_are_stripped_before_parsing():
    text = (
        "<think>maybe " + block({"name": "x"}) + "</think>"
        "<thinking>\n" + block({"name": "y"}) + "\n</thinking>" + block({"name": "f"})
    )
    r = parse_tool_calls(text)
    assert [c.name for c in r.calls] == ["f"]
    assert (r.n_open, r.n_close) == (1, 1)


def test_unbalanced_tags_inside_think_do_not_count():
    r = parse_tool_calls("<think><tool_call><tool_call></think>" + block({"name": "f"}))
    assert (r.n_open, r.n_close, r.fmt) == (1, 1, 1.0)


def test_strip_thinking_off_keeps_reasoning_calls():
    text = "<think>" + block({"name": "x"}) + "</think>"
    assert parse_tool_calls(text, strip_thinking=False).calls == [ToolCall("x", {})]


def test_strip_think_is_non_greedy_and_multiline():
    assert strip_think("a<think>1\n2</think>b<think>3</think>c") == "abc"
    assert strip_think("a<thinking>x</thinking>b") == "ab"


def test_unclosed_think_is_kept():
    assert strip_think("a<think>never closed " + block({"name": "f"})) == (
        "a<think>never closed " + block({"name": "f"})
    )
    assert parse_tool_calls("<think>oops " + block({"name": "f"})).calls == [ToolCall("f", {})]


def test_stray_close_think_is_kept():
    assert strip_think("reasoning</think>answer") == "reasoning</think>answer"


def test_mismatched_think_kinds_do_not_close_each_other():
    assert strip_think("a<think>b</thinking>c") == "a<think>b</thinking>c"
    assert strip_think("a<think>b<thinking>c</thinking>d") == "a<think>bd"


def test_nested_think_leaves_outer_tail_like_the_regex():
    text = "<think>a<think>b</think>c</think>d"
    assert strip_think(text) == THINK_RE.sub("", text) == "c</think>d"


# --------------------------------------------------------------------------- size and depth


def test_megabyte_of_text_parses_fast():
    text = ("lorem ipsum " * 90_000) + block({"name": "f", "arguments": {"x": "y" * 10_000}})
    assert len(text) > 1_000_000
    t0 = time.perf_counter()
    r = parse_tool_calls(text)
    assert time.perf_counter() - t0 < 1.0
    assert r.fmt == 1.0


def test_hundred_thousand_unmatched_opens_parse_fast():
    text = "<tool_call>" * 100_000
    t0 = time.perf_counter()
    r = parse_tool_calls(text)
    assert time.perf_counter() - t0 < 1.0
    assert (r.n_open, r.n_close, r.fmt, len(r.blocks)) == (100_000, 0, 0.0, 0)
    assert r.n_invalid_calls == 100_000


def test_hundred_thousand_opens_with_one_final_close_parse_fast():
    text = "<tool_call>" * 100_000 + "</tool_call>"
    t0 = time.perf_counter()
    r = parse_tool_calls(text)
    assert time.perf_counter() - t0 < 1.0
    assert (len(r.blocks), r.blocks[0].error, r.denominator) == (1, "invalid_json", 100_000)


def test_hundred_thousand_unclosed_thinks_strip_fast():
    text = "<think><thinking>" * 100_000 + block({"name": "f"})
    t0 = time.perf_counter()
    r = parse_tool_calls(text)
    assert time.perf_counter() - t0 < 1.0
    assert r.calls == [ToolCall("f", {})]


def test_deep_nesting_is_invalid_json_not_a_crash():
    for payload in ("[" * 100_000, "[" * 100_000 + "]" * 100_000, '{"a":' * 100_000):
        r = parse_tool_calls(block(payload))
        assert r.blocks[0].valid is False
        assert r.fmt == 0.0


def test_non_string_input_does_not_raise():
    assert parse_tool_calls(None).fmt == 0.0  # type: ignore[arg-type]
    assert parse_tool_calls(b"<tool_call>\xff").denominator == 1  # type: ignore[arg-type]


# --------------------------------------------------------------------------- properties

FRAGMENTS = [
    "<tool_call>",
    "</tool_call>",
    "<think>",
    "</think>",
    "<thinking>",
    "</thinking>",
    '{"name": "f", "arguments": {"x": 1}}',
    '[{"name": "f"}, {"name": "g", "parameters": {}}]',
    '{"name": 3}',
    '{"name": "f", "arguments": "{}"}',
    "[]",
    "NaN",
    "{",
    "]",
    '"',
    "\n",
    "\x00",
]

fragment_text = st.lists(
    st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=40
).map("".join)


def check_invariants(r: ParseResult) -> None:
    assert 0.0 <= r.fmt <= 1.0
    assert len(r.blocks) <= min(r.n_open, r.n_close)
    assert r.n_valid_blocks <= len(r.blocks)
    assert r.n_invalid_calls >= r.denominator - r.n_valid_blocks
    for b in r.blocks:
        assert b.valid == (b.error is None)
        assert b.start < b.end
    assert all(isinstance(c, ToolCall) and isinstance(c.arguments, dict) for c in r.calls)


@given(st.text())
def test_arbitrary_text_never_raises(text):
    check_invariants(parse_tool_calls(text))
    check_invariants(parse_tool_calls(text, allowed_tools=["f"], strip_thinking=False))


@given(fragment_text, st.booleans(), st.booleans())
def test_interleaved_fragments_never_raise(text, strip, lenient):
    allowed = ["f", "g"] if lenient else None
    r = parse_tool_calls(text, allowed, strip_thinking=strip, accept_string_arguments=lenient)
    check_invariants(r)


@given(fragment_text)
def test_strip_think_equals_the_regex(text):
    assert strip_think(text) == THINK_RE.sub("", text)


json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),
)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(), children, max_size=3)
    ),
    max_leaves=10,
)
tool_calls = st.builds(
    ToolCall,
    name=st.text(min_size=1).filter(lambda s: s.strip() != ""),
    arguments=st.dictionaries(st.text(), json_values, max_size=4),
)


def serialise(calls: list[ToolCall], as_list: bool) -> str:
    objs = [{"name": c.name, "arguments": c.arguments} for c in calls]
    # Escaping "<" keeps tags that happen to be inside strings from being seen as tags;
    # the JSON decodes to the same value.
    body = json.dumps(objs if as_list or len(objs) != 1 else objs[0]).replace("<", "\\u003c")
    return f"<tool_call>{body}</tool_call>"


@settings(max_examples=200)
@given(
    st.lists(st.lists(tool_calls, min_size=1, max_size=3), max_size=4),
    st.lists(st.booleans(), min_size=4, max_size=4),
    st.text(alphabet=st.characters(blacklist_characters="<"), max_size=20),
)
def test_serialised_calls_round_trip(groups, as_list, prose):
    text = prose.join(serialise(g, a) for g, a in zip(groups, as_list, strict=False))
    allowed = {c.name for g in groups for c in g}
    r = parse_tool_calls(text, allowed_tools=allowed)
    assert r.calls == [c for g in groups for c in g]
    assert r.fmt == (1.0 if groups else 0.0)
    assert r.n_invalid_calls == 0
    assert not r.malformed
