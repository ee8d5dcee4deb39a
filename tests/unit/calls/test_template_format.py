"""ResponseTemplateFormat: transformers' response-template parser → the hermes text rewards read.

Real parts: transformers' ``chat_parsing`` parser, the real tiny tokenizer, the SGLS simulator
and HierR in the agent-loop test (only the policy's text is scripted)."""

import json

import pytest

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.template_format import RESPONSE_TEMPLATES, ResponseTemplateFormat
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.datamodule import RolloutDataModule
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import ToolCall

ADD = {"name": "add", "arguments": {"a": 2, "b": 3}}
MUL = {"name": "mul", "arguments": {"a": 4, "b": 5}}
CALLS = [ToolCall("add", {"a": 2, "b": 3}), ToolCall("mul", {"a": 4, "b": 5})]


def _hermes(obj) -> str:
    return f"<tool_call>\n{json.dumps(obj)}\n</tool_call>"


def _params(call: dict) -> dict:
    return {"name": call["name"], "parameters": call["arguments"]}


@pytest.mark.parametrize(
    ("template", "text", "blocks"),
    [
        ("hermes", "Let me check.\n" + _hermes(ADD) + "\n" + _hermes(MUL), 2),  # Qwen2.5 style
        ("hermes", _hermes([ADD, MUL]), 1),  # the paper's parallel list
        ("llama3_json", json.dumps(_params(ADD)) + "; " + json.dumps(_params(MUL)), 2),
        (
            "llama3_json",
            "<|python_tag|>" + json.dumps(_params(ADD)) + "; " + json.dumps(_params(MUL)),
            2,
        ),
        ("mistral", "[TOOL_CALLS]" + json.dumps([ADD, MUL]), 1),
    ],
)
def test_each_built_in_template_reads_its_family_as_hermes_blocks(template, text, blocks):
    fmt = ResponseTemplateFormat(template)
    out = fmt.canonical(text)
    parsed = parse_tool_calls(out.text, ["add", "mul"])
    assert parsed.calls == CALLS
    assert parsed.fmt == 1.0 and len(parsed.blocks) == blocks
    assert (out.accepted, out.rejected) == (blocks, 0)
    assert fmt.stats == {"accepted": blocks, "rejected": 0}


def test_string_arguments_are_decoded_as_openai_writes_them():
    call = {"name": "add", "arguments": json.dumps(ADD["arguments"])}
    out = ResponseTemplateFormat("mistral").canonical("[TOOL_CALLS]" + json.dumps([call]))
    assert parse_tool_calls(out.text).calls == CALLS[:1]


def test_a_broken_region_is_one_invalid_block_and_the_good_one_stays():
    fmt = ResponseTemplateFormat("hermes")
    broken = '<tool_call>\n{"name": "add", "arguments": {"a": 2\n</tool_call>'
    out = fmt.canonical(broken + _hermes(MUL))
    parsed = parse_tool_calls(out.text)
    assert (out.accepted, out.rejected) == (1, 1)
    assert parsed.calls == CALLS[1:] and parsed.fmt == 0.5  # as HermesFormat scores it
    assert [b.error for b in parsed.blocks] == ["invalid_json", None]
    cut = ResponseTemplateFormat("llama3_json").canonical('{"name": "add", "parameters": {"a": 2')
    assert (cut.accepted, cut.rejected) == (0, 1) and parse_tool_calls(cut.text).fmt == 0.0


def test_a_region_without_a_call_object_is_rejected():
    out = ResponseTemplateFormat("hermes").canonical(_hermes({"answer": 5}))
    assert (out.accepted, out.rejected) == (0, 1)
    assert parse_tool_calls(out.text).fmt == 0.0


@pytest.mark.parametrize("template", sorted(RESPONSE_TEMPLATES))
def test_prose_is_left_alone(template):
    reply = "The sum is 5, and 4 times 5 is 20."
    fmt = ResponseTemplateFormat(template)
    assert fmt.canonical(reply).text == reply
    assert fmt.stats["accepted"] == fmt.stats["rejected"] == 0


def test_a_spec_dict_works_and_bad_specs_say_what_is_wrong():
    spec = {
        "defaults": {"role": "assistant"},
        "fields": {
            "tool_calls": {"open": "<call>", "close_pattern": r"</call>\s*", "repeats": True,
                           "content": "json", "transform": {"type": "function", "function": "{content}"}},
            "content": {"close_pattern": r"\Z", "content": "text"},
        },
        "start_anchor": "<assistant>",
    }  # fmt: skip
    out = ResponseTemplateFormat(spec).canonical(f"<call>{json.dumps(ADD)}</call>")
    assert parse_tool_calls(out.text).calls == CALLS[:1]
    with pytest.raises(ValueError, match=r"unknown template 'qwen9'.*hermes"):
        ResponseTemplateFormat("qwen9")
    with pytest.raises(ValueError, match="'tool_calls' field"):
        ResponseTemplateFormat({"fields": {"content": {"content": "text"}}})
    bad = {
        **spec,
        "fields": {**spec["fields"], "tool_calls": {"open": "<call>", "content": "nope"}},
    }
    with pytest.raises(ValueError):  # transformers' own validation
        ResponseTemplateFormat(bad)


def test_turn_end_follows_the_closing_tag():
    assert ResponseTemplateFormat("hermes").turn_ends == ("eos", "tool_call")
    assert RolloutDataModule(turn_end="tool_call", tool_format=ResponseTemplateFormat("hermes"))
    with pytest.raises(ValueError, match=r"data.turn_end='tool_call'.*ResponseTemplateFormat"):
        RolloutDataModule(turn_end="tool_call", tool_format=ResponseTemplateFormat("llama3_json"))


def test_agent_loop_runs_llama_calls_and_hierr_scores_them(add_task):
    tok = build_tiny_tokenizer()
    task = add_task
    turns = ["<|python_tag|>" + json.dumps(_params(ADD)), "The sum of 2 and 3 is 5."]
    engine = ScriptedEngine(tok, lambda ctx, turn: turns[min(turn, 1)] + tok.eos_token)
    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    fmt = ResponseTemplateFormat("llama3_json")
    loop = AgentLoop(engine, tok, sim, SamplingConfig(max_new_tokens=200, stop_strings=[]),
                     render_check="strict", tool_format=fmt)  # fmt: skip
    (ep,) = loop.run([task])
    assert ep.tool_results[0][0].content == '{"sum":5}'
    sampled = tok.decode([t for t, m in zip(ep.response_ids, ep.assistant_mask) if m])
    assert "<|python_tag|>" in sampled and "<tool_call>" not in sampled  # trained as written
    assert (loop.stats["tool_format/accepted"], loop.stats["tool_format/rejected"]) == (1, 0)
    assert HierarchicalReward()([ep]).channels["tool"].tolist() == [1.0]
