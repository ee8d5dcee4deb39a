"""Tool-call formats: model text → the hermes text rewards read, with accepted/rejected counts.

The agent-loop test uses the scripted engine (a policy that writes known text) with the real
tiny tokenizer, the real SGLS simulator and HierR: only the policy's choices are fixed."""

import json

import pytest

from slca_lightning.calls.formats import HermesFormat, JSONFormat
from slca_lightning.calls.parsing import parse_tool_calls
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


def test_hermes_is_the_identity_and_counts_valid_and_invalid_blocks():
    fmt = HermesFormat()
    text = f"<tool_call>\n{json.dumps(ADD)}\n</tool_call><tool_call>nope</tool_call><tool_call>"
    out = fmt.canonical(text)
    assert out.text == text
    assert (out.accepted, out.rejected) == (1, 2)  # one invalid block, one unmatched open
    assert fmt.stats == {"accepted": 1, "rejected": 2}


@pytest.mark.parametrize(
    "text",
    [
        json.dumps(ADD),  # bare object
        "I'll add them. " + json.dumps(ADD),  # prose first
        "<|python_tag|>" + json.dumps({"name": "add", "parameters": {"a": 2, "b": 3}}),  # Llama 3.1
        "```json\n" + json.dumps(ADD) + "\n```",  # a Markdown fence
    ],
)
def test_json_format_reads_one_bare_call(text):
    out = JSONFormat().canonical(text)
    assert (out.accepted, out.rejected) == (1, 0)
    parsed = parse_tool_calls(out.text, ["add"])
    assert parsed.fmt == 1.0
    assert parsed.calls == [ToolCall("add", {"a": 2, "b": 3})]
    assert "<|python_tag|>" not in out.text and "```" not in out.text


def test_json_format_a_list_is_one_parallel_block_and_two_objects_two_blocks():
    two = [ADD, {"name": "add", "arguments": {"a": 1, "b": 1}}]
    parallel = parse_tool_calls(JSONFormat().canonical(json.dumps(two)).text)
    assert len(parallel.blocks) == 1 and len(parallel.calls) == 2
    separate = JSONFormat().canonical(json.dumps(two[0]) + "\n" + json.dumps(two[1]))
    assert separate.accepted == 2
    assert len(parse_tool_calls(separate.text).blocks) == 2


def test_json_format_a_broken_call_is_one_invalid_block_and_counted():
    fmt = JSONFormat()
    out = fmt.canonical('{"name": "add", "arguments": {"a": 2, "b": ')  # cut mid-call
    assert (out.accepted, out.rejected) == (0, 1)
    parsed = parse_tool_calls(out.text)
    assert parsed.denominator == 1 and parsed.fmt == 0.0
    assert parsed.blocks[0].error == "invalid_json"
    mixed = fmt.canonical(json.dumps(ADD) + ' then {"name": 7')
    assert (mixed.accepted, mixed.rejected) == (1, 1)
    assert parse_tool_calls(mixed.text).fmt == 0.5
    assert fmt.stats == {"accepted": 1, "rejected": 2}


def test_json_format_leaves_prose_and_hermes_text_alone():
    fmt = JSONFormat()
    reply = 'The sum is 5. {"total": 5} is what the tool said.'
    assert fmt.canonical(reply).text == reply
    hermes = f"<tool_call>\n{json.dumps(ADD)}\n</tool_call>"
    assert fmt.canonical(hermes).text == hermes
    assert fmt.stats == {"accepted": 1, "rejected": 0}


def test_a_format_without_closing_tags_refuses_turn_end_tool_call():
    with pytest.raises(ValueError, match=r"data.turn_end='tool_call'.*JSONFormat"):
        RolloutDataModule(turn_end="tool_call", tool_format=JSONFormat())
    assert RolloutDataModule(turn_end="eos", tool_format=JSONFormat()).tool_format.turn_ends


def test_agent_loop_executes_json_calls_and_rewards_read_the_canonical_text(add_task):
    tok = build_tiny_tokenizer()
    task = add_task
    turns = ["<|python_tag|>" + json.dumps({"name": "add", "parameters": {"a": 2, "b": 3}}),
             "The sum is 5."]  # fmt: skip
    engine = ScriptedEngine(tok, lambda ctx, turn: turns[min(turn, 1)] + tok.eos_token)
    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    loop = AgentLoop(engine, tok, sim, SamplingConfig(max_new_tokens=200, stop_strings=[]),
                     render_check="strict", tool_format=JSONFormat())  # fmt: skip
    (ep,) = loop.run([task])
    assert ep.tool_results[0][0].content == '{"sum":5}'
    assert ep.assistant_texts[0].startswith("<tool_call>") and ep.finish_reason == "stop"
    sampled = tok.decode([t for t, m in zip(ep.response_ids, ep.assistant_mask) if m])
    assert "<|python_tag|>" in sampled and "<tool_call>" not in sampled  # trained as written
    assert (loop.stats["tool_format/accepted"], loop.stats["tool_format/rejected"]) == (1, 0)
    out = HierarchicalReward()([ep, _hermes_twin(ep)])
    assert out.channels["tool"].tolist() == [1.0, 1.0]  # the right call, format 1


def _hermes_twin(ep):
    """The same episode as if the model had written hermes tags (same calls, same results)."""
    import copy

    twin = copy.deepcopy(ep)
    twin.assistant_texts[0] = f"<tool_call>\n{json.dumps(ADD)}\n</tool_call>"
    return twin


def test_without_the_json_format_the_same_turn_is_no_call(add_task):
    tok = build_tiny_tokenizer()
    task = add_task
    engine = ScriptedEngine(tok, lambda ctx, turn: json.dumps(ADD) + tok.eos_token)
    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    loop = AgentLoop(engine, tok, sim, SamplingConfig(max_new_tokens=200, stop_strings=[]))
    (ep,) = loop.run([task])
    assert ep.tool_results == [[]] and ep.finish_reason == "stop"
    assert loop.stats["tool_format/accepted"] == 0
