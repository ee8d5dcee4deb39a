"""Tool-schema helpers: names, indexing, required parameters, jsonschema validation, keys."""

from __future__ import annotations

from slca_lightning.calls.schema import (
    canonical_arguments,
    index_schemas,
    required_params,
    tool_name,
    tool_parameters,
    validate_arguments,
)

PARAMS = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "days": {"type": "integer"},
        "unit": {"type": "string", "enum": ["c", "f"]},
    },
    "required": ["city", "days"],
}
OPENAI = {"type": "function", "function": {"name": "weather", "parameters": PARAMS}}
BARE = {"name": "weather", "description": "d", "parameters": PARAMS}


def test_name_and_parameters_read_both_forms():
    for schema in (OPENAI, BARE):
        assert tool_name(schema) == "weather"
        assert tool_parameters(schema) is PARAMS
    assert tool_parameters({"name": "m", "inputSchema": PARAMS}) is PARAMS
    assert tool_name({"description": "nameless"}) is None
    assert tool_name("not a dict") is None


def test_index_skips_nameless_and_keeps_first_duplicate():
    other = {"name": "weather", "parameters": {}}
    index = index_schemas([OPENAI, {"parameters": {}}, other, BARE | {"name": "b"}])
    assert list(index) == ["weather", "b"]
    assert index["weather"] is OPENAI
    assert index_schemas(None) == {}


def test_required_params_in_schema_order():
    assert required_params(OPENAI) == ["city", "days"]
    assert required_params({"name": "x"}) == []
    assert required_params({"name": "x", "parameters": {"required": "city"}}) == []


def test_valid_arguments_give_no_messages():
    assert validate_arguments(OPENAI, {"city": "Paris", "days": 3, "unit": "c"}) == []
    assert validate_arguments({"name": "noparams"}, {"anything": 1}) == []


def test_type_enum_and_required_messages_carry_the_json_path():
    errors = validate_arguments(OPENAI, {"days": "three", "unit": "kelvin"})
    assert errors == [
        "$: 'city' is a required property",
        "$.days: 'three' is not of type 'integer'",
        "$.unit: 'kelvin' is not one of ['c', 'f']",
    ]


def test_nested_path():
    schema = {
        "name": "n",
        "parameters": {
            "type": "object",
            "properties": {"items": {"type": "array", "items": {"type": "number"}}},
        },
    }
    assert validate_arguments(schema, {"items": [1, "x"]}) == [
        "$.items[1]: 'x' is not of type 'number'"
    ]


def test_draft_chosen_from_dollar_schema():
    # Draft 4 treats 1.0 as not an integer; later drafts accept it.
    draft4 = {"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}
    assert validate_arguments({"name": "d", "parameters": draft4}, 1.0) != []
    assert validate_arguments({"name": "d", "parameters": {"type": "integer"}}, 1.0) == []


def test_bfcl_type_names_are_understood():
    schema = {
        "name": "bfcl",
        "parameters": {
            "type": "dict",
            "properties": {"x": {"type": "float"}, "t": {"type": "tuple"}, "a": {"type": "any"}},
        },
    }
    assert validate_arguments(schema, {"x": 1.5, "t": [1, 2], "a": None}) == []
    assert validate_arguments(schema, {"x": "no"}) == ["$.x: 'no' is not of type 'float'"]


def test_broken_schema_gives_one_schema_error_message():
    for params in (
        {"type": 5},
        {"type": "mystery"},
        {"properties": {"a": {"enum": 3}}},
        {"properties": {"a": {"pattern": "["}}},
        "not a schema",
    ):
        errors = validate_arguments({"name": "b", "parameters": params}, {"a": "x"})
        assert len(errors) == 1 and errors[0].startswith("schema error"), (params, errors)


def test_canonical_arguments_ignores_key_order_and_keeps_unicode():
    a = canonical_arguments({"b": 1, "a": {"y": "é", "x": [1, 2]}})
    assert a == canonical_arguments({"a": {"x": [1, 2], "y": "é"}, "b": 1})
    assert a == '{"a":{"x":[1,2],"y":"é"},"b":1}'
    assert canonical_arguments({"a": 1}) != canonical_arguments({"a": 2})
    assert canonical_arguments({"s": {1, 2}}).startswith('{"s":"{')  # str() fallback
