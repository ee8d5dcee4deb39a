"""AgentLoop on hostile calls (issue 17): model-chosen text is cleaned before the simulator
and the tokenizer, observations per turn are capped like calls, and every exception on the
environment side becomes a counted error observation instead of ending the rollout.

Real tiny tokenizer, real simulator over the built-in tools, a ScriptedEngine as the
policy. Two tests inject a failure at a boundary on purpose (a simulator whose
``simulate_batch`` raises, a tokenizer wrapper that raises on one observation): that is
the fault under test, not a stand-in for a missing part.
"""

from __future__ import annotations

import json
import time

import pytest

from slca_lightning.data.suite import builtin_suite
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rollout.agent_loop import AgentLoop, middle_cut, not_executed
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import Task

SUITE = builtin_suite()


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def task() -> Task:
    return Task(
        task_id="t",
        messages=[{"role": "user", "content": "Add 1 and 2."}],
        tools=SUITE.tools_of(["math", "text"]),
        allowed_tools=["add", "multiply", "power", "reverse", "word_count"],
        question="Add 1 and 2.",
    )


def make_loop(tok, turns, simulator=None, **kw) -> AgentLoop:
    eos = tok.eos_token

    def script(context, turn):
        text = turns[min(turn, len(turns) - 1)]
        return text if "<tool_call>" in text else text + eos

    sim = simulator or SchemaGuidedSimulator(PythonBackend(SUITE.functions), timeout_s=None)
    sampling = SamplingConfig(max_new_tokens=kw.pop("max_new", 10**6))
    kw.setdefault("max_response_tokens", 10**7)
    return AgentLoop(ScriptedEngine(tok, script), tok, sim, sampling, **kw)


def block(*entries) -> str:
    return "<tool_call>\n" + json.dumps(list(entries)) + "\n</tool_call>"


def test_a_lone_surrogate_in_a_name_is_answered_and_the_episode_goes_on(tok):
    # what a model writes: plain ASCII with a JSON escape for a lone surrogate
    turn = (
        '<tool_call>\n{"name": "tool\\udc00", "arguments": {"k\\u0000": "\\ud800"}}\n</tool_call>'
    )
    loop = make_loop(tok, [turn, "Done."], render_check="strict")
    (ep,) = loop.run([task()])
    assert ep.finish_reason == "stop" and ep.final_reply == "Done."
    (result,) = ep.tool_results[0]
    assert result.error_kind == "unknown_tool"
    assert result.content == "Tool 'tool\ufffd' not found in the current available tools set."
    assert result.call.arguments == {"k\\x00": "\ufffd"}  # the clean copy the simulator saw
    env = tok.decode([t for t, m in zip(ep.response_ids, ep.assistant_mask) if not m])
    assert "Tool 'tool\ufffd' not found" in env
    assert loop.stats["env_errors"] == 0
    assert ep.assistant_texts[0] == turn  # the model's own text is kept as written


def test_invalid_entries_count_toward_the_cap_and_the_rest_share_one_observation(tok):
    entries = [{"name": "add"}, 5, {"name": "add", "arguments": {"a": 1, "b": 2}}] * 3
    loop = make_loop(tok, [block(*entries), "ok"], max_calls_per_turn=4)
    (ep,) = loop.run([task()])
    kinds = [r.error_kind for r in ep.tool_results[0]]
    assert kinds == ["missing_arguments", "not_object", None, "missing_arguments", "too_many_calls"]
    overflow = ep.tool_results[0][-1]
    assert not_executed(overflow) == 5 and "5 more call(s) not executed" in overflow.content
    assert loop.stats["overflow_calls"] == 5 and loop.stats["tool_calls"] == 3
    assert loop.stats["observations"] == 5


def test_ten_thousand_entries_in_one_block_give_cap_plus_one_observations(tok):
    entries = [{"name": "add", "arguments": {"a": k, "b": 1}} for k in range(10_000)]
    sim = SchemaGuidedSimulator(PythonBackend(SUITE.functions), timeout_s=None)
    loop = make_loop(tok, [block(*entries), "ok"], simulator=sim, max_calls_per_turn=20)
    t0 = time.perf_counter()
    (ep,) = loop.run([task()])
    assert time.perf_counter() - t0 < 30
    results = ep.tool_results[0]
    assert len(results) == 21 and sim.stats["calls"] == 20
    assert [r.content for r in results[:2]] == ['{"result":1}', '{"result":2}']
    assert results[-1].error_kind == "too_many_calls" and not_executed(results[-1]) == 9_980
    # unmatched tags count too: 31 opens, one close (the first open pairs with it)
    turn = "<tool_call>" * 30 + block({"name": "add", "arguments": {"a": 1, "b": 1}})
    loop = make_loop(tok, [turn, "ok"], max_calls_per_turn=20)
    (ep,) = loop.run([task()])
    kinds = [r.error_kind for r in ep.tool_results[0]]
    assert kinds == ["invalid_json"] + ["unbalanced_tags"] * 19 + ["too_many_calls"]
    assert not_executed(ep.tool_results[0][-1]) == 11


def test_a_simulator_that_raises_gives_counted_error_observations(tok):
    class Raising(SchemaGuidedSimulator):
        def simulate_batch(self, calls):
            raise OSError("socket closed")

    sim = Raising(PythonBackend(SUITE.functions), timeout_s=None)
    two = block({"name": "add", "arguments": {"a": 1, "b": 2}}, {"name": "nope"})
    loop = make_loop(tok, [two, "Sorry."], simulator=sim)
    (ep,) = loop.run([task()])
    assert ep.finish_reason == "stop"
    assert [r.error_kind for r in ep.tool_results[0]] == ["env_error", "env_error"]
    assert "OSError: socket closed" in json.loads(ep.tool_results[0][0].content)["error"]
    assert loop.stats["env_errors"] == 2 and loop.stats["env_errors/OSError"] == 2


class FailingOn:
    """The real tokenizer, except that encoding text containing ``marker`` raises (a
    tokenizer bug on one observation, injected on purpose)."""

    def __init__(self, tok, marker: str):
        self._tok, self._marker = tok, marker

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def encode(self, text, **kw):
        if self._marker in text:
            raise TypeError("TextEncodeInput must be Union[...]")
        return self._tok.encode(text, **kw)


def test_an_observation_that_cannot_be_tokenised_becomes_an_error_observation(tok):
    calls = block(
        {"name": "reverse", "arguments": {"text": "poison"}},
        {"name": "add", "arguments": {"a": 1, "b": 2}},
    )
    loop = make_loop(tok, [calls, "Done."], render_check="off")
    loop.tokenizer = FailingOn(tok, "nosiop")  # the reversed text
    (ep,) = loop.run([task()])
    assert ep.finish_reason == "stop" and ep.final_reply == "Done."
    first, second = ep.tool_results[0]
    assert first.error_kind == "env_error" and "TypeError" in first.content
    assert second.content == '{"result":3}'
    assert loop.stats["env_errors/TypeError"] == 1


def test_middle_cut_bounds_the_tokenizer_work_and_cleans_the_text(tok):
    text = "head " + "abc " * 500_000 + "\udc00 tail"
    t0 = time.perf_counter()
    cut, was_cut = middle_cut(tok, text, 64)
    assert time.perf_counter() - t0 < 5
    assert was_cut and cut.startswith("head") and cut.endswith("\ufffd tail")
    assert "tokens truncated" in cut and len(tok.encode(cut, add_special_tokens=False)) < 120
