"""BFCL decode + official checker path, on the package's own data and possible answers.

Nothing is mocked: entries and possible answers come from the installed ``bfcl-eval``, the
verdicts from its ``ast_checker`` (behind the documented ``model_config`` stub). The
ground-truth test runs *every* entry of every single-turn category (the checker is fast).
"""

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slca_lightning.eval.bfcl.answers import oracle_outputs, render_answer, shuffled_outputs
from slca_lightning.eval.bfcl.checker import bfcl_summary, decode_hermes, score_entry
from slca_lightning.eval.bfcl.data import (
    AST_CATEGORIES,
    CATEGORIES,
    MULTI_TURN_CATEGORIES,
    RELEVANCE_CATEGORIES,
    BFCLEntry,
    load_category,
    to_tools,
)
from slca_lightning.eval.bfcl.evaluator import BFCLEvaluator, resolve_categories

# Possible answers the checker itself cannot accept (BFCL data): simple_java_36 / _65 give
# typed ints/bools for an Array of String; simple_java_64 gives a HashMap answer as a bare
# string; the live_* ones omit a required parameter or add one the function lacks.
KNOWN_UNPASSABLE = {
    "simple_java_36",
    "simple_java_64",
    "simple_java_65",
    "live_simple_106-63-0",
    "live_simple_112-68-0",
    "live_multiple_507-149-4",
    "live_multiple_862-181-3",
    "live_multiple_964-207-0",
}


@pytest.fixture(scope="module")
def all_entries():
    return {c: load_category(c) for c in CATEGORIES}


def _verdicts(entries, outputs):
    return [score_entry(e, o) for e, o in zip(entries, outputs, strict=True)]


def tool_call(name, arguments):
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def test_ground_truth_as_model_output_passes(all_entries):
    ast = [e for c in AST_CATEGORIES for e in all_entries[c]]
    scores = _verdicts(ast, oracle_outputs(ast))
    pooled = sum(s.valid for s in scores) / len(scores)
    per_cat = {}
    for c in AST_CATEGORIES:
        cs = [s for s in scores if s.category == c]
        per_cat[c] = sum(s.valid for s in cs) / len(cs)
    print(f"\nground truth: pooled AST {pooled:.4f} over {len(scores)} entries; {per_cat}")
    assert pooled >= 0.98
    assert all(acc >= 0.97 for acc in per_cat.values()), per_cat
    failed = {s.id for s in scores if not s.valid}
    assert failed <= KNOWN_UNPASSABLE, failed - KNOWN_UNPASSABLE
    rel = [e for c in RELEVANCE_CATEGORIES for e in all_entries[c]]
    assert all(s.valid for s in _verdicts(rel, oracle_outputs(rel)))


def test_shuffled_answers_fail(all_entries):
    ast = [e for c in AST_CATEGORIES for e in all_entries[c]]
    scores = _verdicts(ast, shuffled_outputs(ast, seed=0))
    pooled = sum(s.valid for s in scores) / len(scores)
    print(f"\nshuffled: pooled AST {pooled:.4f} over {len(scores)} entries")
    assert pooled <= 0.01
    rel = [e for c in RELEVANCE_CATEGORIES for e in all_entries[c]]
    assert not any(s.valid for s in _verdicts(rel, shuffled_outputs(rel)))


def test_parallel_order_and_list_block_accepted(all_entries):
    entry = next(e for e in all_entries["parallel"] if len(e.ground_truth) >= 2)
    calls = [
        {"name": name, "arguments": args}
        for d in decode_hermes(render_answer(entry))
        for name, args in d.items()
    ]
    assert score_entry(entry, "\n".join(tool_call(**c) for c in calls)).valid
    reordered = "\n".join(tool_call(**c) for c in reversed(calls))
    assert score_entry(entry, reordered).valid  # BFCL's parallel check ignores order
    one_block = f"<think>plan</think><tool_call>{json.dumps(calls)}</tool_call>"
    assert score_entry(entry, one_block).valid
    assert not score_entry(entry, tool_call(**calls[0])).valid  # a call missing


def _simple(all_entries):
    return next(e for e in all_entries["simple_python"] if e.id == "simple_python_0")


@pytest.mark.parametrize(
    "text, error_type",
    [
        ("The area is 25.", "simple_function_checker:wrong_count"),
        ("<tool_call>{not json</tool_call>", "simple_function_checker:wrong_count"),
        ("<tool_call>\n{\"name\": \"calculate_triangle_area\"", "simple_function_checker:wrong_count"),
        (tool_call("no_such_function", {"base": 10, "height": 5}), "simple_function_checker:wrong_func_name"),
        (tool_call("calculate_triangle_area", {"base": "ten", "height": 5}), "type_error:simple"),
        (tool_call("calculate_triangle_area", {"base": [10], "height": None}), "type_error:simple"),
        (tool_call("calculate_triangle_area", {"base": 10}), "simple_function_checker:missing_required"),
        (tool_call("calculate_triangle_area", {"base": 10, "height": 5, "x": 1}), "simple_function_checker:unexpected_param"),
        (tool_call("calculate_triangle_area", {"base": 11, "height": 5}), "value_error:others"),
    ],
)  # fmt: skip
def test_bad_output_is_a_failure(all_entries, text, error_type):
    entry = _simple(all_entries)
    assert entry.checker_functions[0]["name"] == "calculate_triangle_area"
    assert score_entry(entry, render_answer(entry)).valid  # the right call passes
    verdict = score_entry(entry, text)
    assert not verdict.valid and verdict.error_type == error_type


def test_java_wants_strings_and_irrelevance_wants_no_call(all_entries):
    java = all_entries["simple_java"][0]
    args = {k: v[0] for k, v in java.ground_truth[0][java.checker_functions[0]["name"]].items()}
    good = tool_call(java.checker_functions[0]["name"], args)
    assert score_entry(java, good).valid
    bad = tool_call(java.checker_functions[0]["name"], {k: 7 for k in args})
    assert score_entry(java, bad).error_type == "type_error:java"
    irr = all_entries["irrelevance"][0]
    name = irr.checker_functions[0]["name"]
    assert score_entry(irr, "Sorry, no tool fits.").valid
    assert score_entry(irr, "<tool_call>{broken</tool_call>").valid  # not a call
    verdict = score_entry(irr, tool_call(name, {}))
    assert verdict.error_type == "irrelevance_error:decoder_success"


def test_checker_exception_is_a_counted_failure():
    # A Java "Set" parameter makes BFCL's type converter raise NotImplementedError.
    doc = {"name": "f", "description": "", "parameters": {"type": "dict", "properties": {
        "s": {"type": "Set", "description": ""}}, "required": ["s"]}}  # fmt: skip
    entry = BFCLEntry("simple_java_x", "simple_java", [], [doc], [doc], [{"f": {"s": ["a"]}}])
    verdict = score_entry(entry, tool_call("f", {"s": "new HashSet<>()"}))
    assert not verdict.valid and verdict.error_type == "checker_exception"
    assert "NotImplementedError" in verdict.error


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.sampled_from(list('<>/{}[]":,tool_call nameargs0-9x')), max_size=80))
def test_random_text_never_crashes(text):
    entries = TEST_ENTRIES
    for entry in entries:
        verdict = score_entry(entry, text)
        assert isinstance(verdict.valid, bool)


TEST_ENTRIES = [load_category(c, limit=1, seed=3)[0] for c in CATEGORIES]


def test_decode_keeps_valid_blocks_and_strips_thinking():
    text = (
        '<think><tool_call>{"name": "hidden"}</tool_call></think>'
        + tool_call("a.b", {"x": 1})
        + "<tool_call>{oops}</tool_call>"
        + '<tool_call>[{"name": "c", "arguments": {}}, {"name": "d"}]</tool_call>'
    )
    assert decode_hermes(text) == [{"a.b": {"x": 1}}, {"c": {}}, {"d": {}}]
    assert decode_hermes("no call") == []


def test_to_tools_maps_bfcl_types_like_bfcl():
    raw = [{"name": "m.f", "description": "d", "parameters": {"type": "dict", "properties": {
        "a": {"type": "float", "description": "x."},
        "b": {"type": "tuple", "items": {"type": "integer"}, "description": ""},
        "c": {"type": "dict", "properties": {"k": {"type": "any", "description": ""}}},
        "d": {"description": "no type"},
        "e": {"type": "HashMap", "description": ""},
    }, "required": ["a"]}}]  # fmt: skip
    before = json.dumps(raw)
    (tool,) = to_tools(raw)
    assert json.dumps(raw) == before  # the docs are not modified
    fn = tool["function"]
    assert tool["type"] == "function" and fn["name"] == "m.f"
    props = fn["parameters"]["properties"]
    assert fn["parameters"]["type"] == "object" and fn["parameters"]["required"] == ["a"]
    assert props["a"]["type"] == "number" and props["a"]["format"] == "float"
    assert props["a"]["description"].endswith("This is a float type value.")
    assert props["b"] == {"type": "array", "items": {"type": "integer"}, "description": ""}
    assert props["c"]["type"] == "object" and props["c"]["properties"]["k"]["type"] == "string"
    assert props["d"]["type"] == "string" and props["e"]["type"] == "object"


def test_summary_follows_bfcl_aggregation():
    acc = {"simple_python": 0.9, "simple_java": 0.6, "simple_javascript": 0.3, "multiple": 1.0,
           "live_simple": 0.5, "live_multiple": 1.0, "irrelevance": 0.2, "live_irrelevance": 0.4}  # fmt: skip
    counts = {"live_simple": 100, "live_multiple": 300}
    s = bfcl_summary(acc, counts)
    assert s["simple"] == pytest.approx(0.6)
    assert s["non_live_ast"] == pytest.approx((0.6 + 1.0) / 2)
    assert s["live_ast"] == pytest.approx((0.5 * 100 + 1.0 * 300) / 400)
    assert s["irrelevance_mean"] == pytest.approx(0.3)
    assert s["overall"] == pytest.approx((0.8 + 0.875 + 0.3) / 3)
    assert bfcl_summary({"irrelevance": 1.0}) == {"irrelevance_mean": 1.0, "overall": 1.0}
    mt = bfcl_summary({"multi_turn_base": 0.5, "multi_turn_miss_func": 0.1, "multiple": 0.9})
    assert mt["multi_turn"] == pytest.approx(0.3) and mt["overall"] == pytest.approx(0.6)


def test_categories_and_sampling():
    assert resolve_categories("simple,irrelevance") == [*AST_CATEGORIES[:3], "irrelevance"]
    assert resolve_categories(["all"]) == list(CATEGORIES)
    assert resolve_categories("multi_turn,simple_java") == ["simple_java", *MULTI_TURN_CATEGORIES]
    with pytest.raises(ValueError, match="web_search_base"):
        resolve_categories("web_search_base")
    with pytest.raises(ValueError, match="unknown BFCL category"):
        load_category("nope")
    a = [e.id for e in load_category("parallel", limit=5, seed=1)]
    assert a == [e.id for e in load_category("parallel", limit=5, seed=1)]
    assert a != [e.id for e in load_category("parallel", limit=5, seed=2)] and len(a) == 5
    with pytest.raises(ValueError, match="tool_prompt"):
        BFCLEvaluator("simple", tool_prompt="xml")
