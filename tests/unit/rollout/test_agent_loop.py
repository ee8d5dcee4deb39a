"""AgentLoop on the real tiny tokenizer and the real simulator (PythonBackend).

The policy is a ScriptedEngine (pre-written turns encoded with the real tokenizer) so the
environment side — masks, glue, caps, error observations — is tested deterministically.
"""

import json

import pytest
import torch

from slca_lightning.demo import ADD
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.rollout.agent_loop import AgentLoop, RenderMismatchError, middle_cut
from slca_lightning.rollout.collate import collate_episodes
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import Task, ToolCall

TOOLS = [ADD]  # the demo's add(a, b) schema


def call(a, b, name="add"):
    return (
        "<tool_call>\n"
        + json.dumps({"name": name, "arguments": {"a": a, "b": b}})
        + "\n</tool_call>"
    )


@pytest.fixture(scope="module")
def tok():
    return build_tiny_tokenizer()


def make_task():
    return Task(
        task_id="t0",
        messages=[
            {"role": "system", "content": "tools: add"},
            {"role": "user", "content": "What is 2+3?"},
        ],
        tools=TOOLS,
        allowed_tools=["add"],
        gold_calls=[[ToolCall("add", {"a": 2, "b": 3})]],
        question="What is 2+3?",
    )


def loop_for(tok, turns, **kw):
    eos = tok.eos_token

    def script(context, turn):
        text = turns[min(turn, len(turns) - 1)]
        return text if "<tool_call>" in text else text + eos

    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    engine = ScriptedEngine(tok, script)
    return AgentLoop(engine, tok, sim, SamplingConfig(max_new_tokens=kw.pop("max_new", 200)), **kw)


def check_mask_invariants(tok, ep):
    assert len(ep.assistant_mask) == len(ep.response_ids) == len(ep.logprobs)
    sampled = [t for t, m in zip(ep.response_ids, ep.assistant_mask) if m]
    # sampled tokens decode to exactly the assistant texts (+ the EOS ending the last turn)
    text = tok.decode(sampled, skip_special_tokens=False)
    assert text.replace(tok.eos_token, "") == "".join(ep.assistant_texts)
    # no tool-response text ever sits under the assistant mask
    assert "<tool_response>" not in text


def test_two_turn_episode_masks_only_sampled_tokens(tok):
    loop = loop_for(tok, [call(2, 3), "The sum of 2 and 3 is 5."], render_check="strict")
    (ep,) = loop.run([make_task()])
    check_mask_invariants(tok, ep)
    assert ep.finish_reason == "stop"
    assert ep.tool_results[0][0].content == '{"sum":5}'
    assert ep.final_reply == "The sum of 2 and 3 is 5."
    env = tok.decode([t for t, m in zip(ep.response_ids, ep.assistant_mask) if not m])
    assert "<tool_response>" in env and '{"sum":5}' in env
    # lengths count model tokens only
    assert loop.stats["sampled_tokens"] == sum(ep.assistant_mask)


def test_parallel_calls_in_one_block_and_invalid_calls_are_observations(tok):
    turns = [
        call(1, 1) + call(2, 2),  # stop string cuts after the first block
        '<tool_call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>',  # missing b
        "<tool_call>\nnot json\n</tool_call>",
        call(1, 2, name="nope"),
        "Done: 2.",
    ]
    loop = loop_for(tok, turns, render_check="strict")
    (ep,) = loop.run([make_task()])
    check_mask_invariants(tok, ep)
    kinds = [r.error_kind for turn in ep.tool_results for r in turn]
    assert kinds == [None, "missing_arguments", "invalid_json", "unknown_tool"]
    assert (
        "Tool 'nope' not found in the current available tools set." in ep.tool_results[3][0].content
    )
    assert ep.finish_reason == "stop" and loop.stats["invalid_calls"] == 1


def test_list_block_runs_parallel_calls(tok):
    block = (
        "<tool_call>\n"
        + json.dumps(
            [
                {"name": "add", "arguments": {"a": 1, "b": 1}},
                {"name": "add", "arguments": {"a": 2, "b": 2}},
            ]
        )
        + "\n</tool_call>"
    )
    loop = loop_for(tok, [block, "2 and 4."], max_calls_per_turn=1)
    (ep,) = loop.run([make_task()])
    assert [r.error_kind for r in ep.tool_results[0]] == [None, "too_many_calls"]


def test_turn_cap_and_length_cap_end_episodes(tok):
    loop = loop_for(tok, [call(1, 1)], max_turns=3)
    (ep,) = loop.run([make_task()])
    assert ep.finish_reason == "max_turns" and len(ep.assistant_texts) == 3
    check_mask_invariants(tok, ep)
    # a generation that hits max tokens inside a tool call
    loop = loop_for(
        tok, ['<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 22222222222}}'], max_new=8
    )
    (ep,) = loop.run([make_task()])
    assert ep.finish_reason == "length" and ep.truncated and ep.tool_results == [[]]
    assert loop.stats["cut_tool_calls"] == 1 and loop.stats["tool_calls"] == 0
    check_mask_invariants(tok, ep)
    batch = collate_episodes([ep], tok.pad_token_id)
    assert bool(batch.truncated[0]) and int(batch.assistant_mask.sum()) == 8


def other_task():
    task = make_task()
    task.task_id, task.question = "t1", "What is 4+4?"
    task.messages = [task.messages[0], {"role": "user", "content": task.question}]
    return task


def test_empty_generation_ends_its_episode_with_a_defined_reward_and_is_counted(tok):
    eos = tok.eos_token
    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)

    def script(context, turn):  # t0 ends its first turn at once; t1 calls, then replies
        if "4+4" in context:
            return [call(4, 4), "The sum is 8." + eos][min(turn, 1)]
        return eos

    # an immediate end of turn (the sampled ids are just EOS) beside a normal episode
    loop = AgentLoop(ScriptedEngine(tok, script), tok, sim, SamplingConfig(max_new_tokens=50))
    empty, normal = loop.run([make_task(), other_task()])
    assert empty.response_ids == [tok.eos_token_id] and empty.assistant_mask == [True]
    assert empty.finish_reason == "stop" and empty.final_reply == "" and empty.tool_results == [[]]
    assert normal.finish_reason == "stop" and normal.final_reply == "The sum is 8."
    assert normal.tool_results[0][0].content == '{"sum":8}'  # the batch carried on
    assert loop.stats["empty_generations"] == 1
    check_mask_invariants(tok, empty)
    out = HierarchicalReward()([empty, normal])
    # no call where the gold needs one: the omission guard
    assert out.flags["omitted"].tolist() == [True, False]
    assert out.channels["tool"][0] == 0.0 and out.channels["total"][0] == -0.5
    assert out.channels["summary"][0] == -0.5 and out.channels["rltr"][0] == 0.0
    # an empty reply after a tool round: the call is scored, the reply gets 0 unjudged
    loop = loop_for(tok, [call(2, 3), ""], render_check="strict")
    (ep,) = loop.run([make_task()])
    assert ep.finish_reason == "stop" and ep.final_reply == "" and len(ep.tool_results) == 2
    assert loop.stats["empty_generations"] == 1
    check_mask_invariants(tok, ep)
    out = HierarchicalReward()([ep])
    assert out.channels["summary"].tolist() == [0.0] and not out.flags["judge_called"][0]
    assert out.channels["tool"].tolist() == [1.0] and out.channels["total"].tolist() == [1.0]
    # an engine that returns no token at all (reported as a cap hit): truncated, counted
    loop = AgentLoop(ScriptedEngine(tok, lambda c, t: ""), tok, sim, SamplingConfig())
    (ep,) = loop.run([make_task()])
    assert ep.response_ids == [] and ep.assistant_texts == [""] and ep.tool_results == [[]]
    assert ep.finish_reason == "length" and loop.stats["empty_generations"] == 1
    assert HierarchicalReward()([ep]).channels["total"].tolist() == [-0.5]


def test_generation_cut_inside_a_tool_call_after_a_round_is_defined_and_counted(tok):
    cut = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": ' + "2" * 300
    loop = loop_for(tok, [call(2, 3), cut], max_new=60, render_check="strict")
    (ep,) = loop.run([make_task()])
    # the first call ran; the cut one is never executed and gets no observation
    assert [[r.content for r in t] for t in ep.tool_results] == [['{"sum":5}'], []]
    assert ep.finish_reason == "length" and ep.truncated
    assert loop.stats["cut_tool_calls"] == 1 and loop.stats["tool_calls"] == 1
    assert loop.stats["finish/length"] == 1
    check_mask_invariants(tok, ep)
    out = HierarchicalReward()([ep])
    assert all(bool(torch.isfinite(v).all()) for v in out.channels.values())
    assert out.channels["rltr"].tolist() == [-1.0]  # RLTR: malformed (unclosed) output
    assert not out.flags["omitted"][0]  # a call was made: no omission penalty


def test_mask_matches_the_sampled_ids_after_every_tool_round(tok):
    """After each tool round (and at every turn cap) the mask has one entry per id, and its
    True positions are exactly the ids the engine returned, where it returned them."""
    parallel = "<tool_call>\n" + json.dumps(
        [{"name": "add", "arguments": {"a": 1, "b": 1}}, {"name": "add", "arguments": {"a": 2}}]
    )
    turns = [parallel + "\n</tool_call>", "<tool_call>\nnot json\n</tool_call>", call(2, 3), "5."]
    for max_turns in (1, 2, 3, 4):
        loop = loop_for(tok, turns, max_turns=max_turns, render_check="strict")
        sampled: list[tuple[list[int], list[int]]] = []  # (context, returned ids) per row
        generate = loop.engine.generate

        def spy(prompts, sampling, generate=generate, sampled=sampled):
            gens = generate(prompts, sampling)
            sampled.extend((list(p), list(g.token_ids)) for p, g in zip(prompts, gens))
            return gens

        def check(ep, sampled=sampled):
            n = len(ep.response_ids)
            assert len(ep.assistant_mask) == n == len(ep.logprobs)
            expected = [False] * n
            for context, ids in sampled:
                k = len(context) - len(ep.prompt_ids)
                assert context == ep.prompt_ids + ep.response_ids[:k]
                assert ep.response_ids[k : k + len(ids)] == ids
                expected[k : k + len(ids)] = [True] * len(ids)
            assert ep.assistant_mask == expected
            assert ep.logprobs == [-1.0 if m else 0.0 for m in expected]

        rounds = []

        def execute(episodes, histories, pending, last_turn, loop=loop, check=check, rounds=rounds):
            AgentLoop._execute(loop, episodes, histories, pending, last_turn)
            for ep in episodes:
                check(ep)
            if pending:  # a round ran: these episodes made calls this turn
                rounds.append(sum(ep.assistant_mask.count(False) for ep in episodes))

        loop.engine.generate, loop._execute = spy, execute
        (ep,) = loop.run([make_task()])
        check(ep)
        assert len(sampled) == len(ep.assistant_texts) == max_turns
        # one round per tool turn; each appended unmasked glue unless it was the last turn
        assert len(rounds) == min(max_turns, 3)
        grew = [now > before for before, now in zip([0, *rounds], rounds)]
        assert grew == [turn < max_turns - 1 for turn in range(len(rounds))]
        assert ep.finish_reason == ("stop" if max_turns == 4 else "max_turns")


def test_groups_share_ids_and_collate_aligns_masks(tok):
    loop = loop_for(tok, [call(2, 3), "It is 5."])
    eps = loop.run([make_task(), make_task()], group_size=3, group_offset=10)
    assert [e.group_id for e in eps] == [10, 10, 10, 11, 11, 11]
    batch = collate_episodes(eps, tok.pad_token_id)
    for r, ep in enumerate(eps):
        p, n = len(ep.prompt_ids), len(ep.response_ids)
        assert batch.assistant_mask[r, :p].sum() == 0
        assert batch.assistant_mask[r, p : p + n].tolist() == ep.assistant_mask
        assert batch.assistant_mask[r, p + n :].sum() == 0
        assert batch.attention_mask[r].sum() == p + n


def test_render_check_catches_templates_that_rewrite_history(tok):
    class RewritingTokenizer:
        """Wraps the real tokenizer; its template drops earlier assistant turns' text."""

        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def apply_chat_template(self, messages, **kw):
            last = max((i for i, m in enumerate(messages) if m["role"] == "assistant"), default=-1)
            msgs = [
                {**m, "content": "[hidden]"} if m["role"] == "assistant" and i != last else m
                for i, m in enumerate(messages)
            ]
            return self.inner.apply_chat_template(msgs, **kw)

    loop = loop_for(tok, [call(2, 3), "It is 5."], render_check="strict")
    loop.tokenizer = RewritingTokenizer(tok)
    with pytest.raises(RenderMismatchError, match="re-renders the conversation"):
        loop.run([make_task()])
    loop.render_check = "warn"
    loop.run([make_task()])
    assert loop.stats["render_check_failed"] == 1


def test_middle_cut_keeps_head_and_tail(tok):
    text = "head " + "x y z " * 200 + " tail"
    cut, was_cut = middle_cut(tok, text, 20)
    assert was_cut and cut.startswith("head") and cut.endswith("tail") and "truncated" in cut
    assert middle_cut(tok, "short", 20) == ("short", False)
