"""benchmarks/bench_multiturn.py: what TRL is given matches what slca does, and a fit of each runs.

Real parts throughout: TRL 1.16's own template checks and ``parse_response``, the suite's
tools, both trainers (the smoke run uses the random ``tiny`` model, which rarely calls a tool;
the tool path of TRL's loop is checked on a known completion instead)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "benchmarks"))

import bench_multiturn as bm

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.data.suite import builtin_suite
from slca_lightning.data.synthetic import reference_answer
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.types import ToolCall


def test_trl_template_renders_slca_conversations_unchanged():
    tok = build_tiny_tokenizer()
    trl_tok = bm.trl_tokenizer(tok)
    for task in SyntheticTasks(n_train=12, n_heldout=4, seed=0).train():
        chat = [*task.messages, *reference_answer(task)]
        for end in range(len(task.messages), len(chat) + 1):
            ours = tok.apply_chat_template(chat[:end], tokenize=False, add_generation_prompt=True)
            theirs = trl_tok.apply_chat_template(
                chat[:end], tokenize=False, add_generation_prompt=True
            )
            assert theirs == ours


def test_trl_accepts_the_template_and_parses_hermes_calls_from_it():
    from trl.chat_template_utils import (
        is_chat_template_prefix_preserving,
        parse_response,
        supports_tool_calling,
    )

    trl_tok = bm.trl_tokenizer(build_tiny_tokenizer())
    assert supports_tool_calling(trl_tok) and is_chat_template_prefix_preserving(trl_tok)
    call = {"name": "add", "arguments": {"a": 2, "b": 3}}
    prompt = trl_tok.apply_chat_template(
        [{"role": "user", "content": "2+3?"}], tokenize=False, add_generation_prompt=True
    )
    completion = f"<tool_call>\n{json.dumps(call)}\n</tool_call><|im_end|>"
    message = parse_response(
        trl_tok, trl_tok.encode(completion), prefix=trl_tok.encode(prompt), tools=bm.suite_tools()
    )
    assert message["tool_calls"] == [{"type": "function", "function": call}]
    rendered = trl_tok.apply_chat_template(
        [{"role": "user", "content": "x"}, message], tokenize=False
    )
    assert parse_tool_calls(rendered).calls == [ToolCall("add", {"a": 2, "b": 3})]


def test_suite_tools_return_what_the_suite_returns():
    suite = builtin_suite()
    tools = {f.__name__: f for f in bm.suite_tools()}
    assert sorted(tools) == sorted(suite.names)
    cases = {
        "add": {"a": 2, "b": 3},
        "convert": {"value": 3, "from_unit": "km", "to_unit": "m"},
        "weather": {"city": "Oslo", "day": "today"},
        "add_days": {"date": "2020-02-28", "days": 2},
    }
    for name, args in cases.items():
        assert json.loads(tools[name](**args)) == suite.run(ToolCall(name, args))


@pytest.mark.slow
def test_one_round_of_each_system_runs_and_counts_tokens():
    shape = bm.MultiTurnShape(
        model="tiny", prompts_per_step=1, group_size=2, turns=2, max_new_tokens=16, steps=1,
        rounds=1, n_train=4,
    )  # fmt: skip
    out = bm.run(shape)
    for side in ("slca", "trl"):
        assert out["tokens_per_s"][side] > 0 and out["tokens_per_step"][side] > 0
        assert out["tool_calls_per_episode"][side] >= 0
    assert out["speedup"] == pytest.approx(out["tokens_per_s"]["slca"] / out["tokens_per_s"]["trl"])
