"""BFCL multi-turn: the package's executable backends and ``multi_turn_checker``.

Real parts: BFCL's data, ground truth, backend classes (file system, Twitter, trading …)
and checker. The model is replaced by a scripted replier (a boundary: no model here can
solve these) that answers each user turn with that turn's ground-truth calls as hermes
``<tool_call>`` blocks and then a plain reply, so the loop's execution, observations, turn
ends and state handling are checked against the official checker.
"""

import ast
import json

import pytest

from slca_lightning.eval.bfcl.data import MULTI_TURN_CATEGORIES
from slca_lightning.eval.bfcl.multi_turn import (
    call_string,
    ground_truth_steps,
    load_multi_turn,
    run_multi_turn,
    score_multi_turn,
)


@pytest.fixture(scope="module")
def entries():
    return {c: load_multi_turn(c) for c in MULTI_TURN_CATEGORIES}


def test_ground_truth_replay_passes_and_shuffled_fails(entries):
    for cat, es in entries.items():
        ok = sum(score_multi_turn(e, ground_truth_steps(e)).valid for e in es) / len(es)
        wrong = 0
        for i, e in enumerate(es):
            other = ground_truth_steps(es[(i + 1) % len(es)])
            steps = (other + [[]] * len(e.ground_truth))[: len(e.ground_truth)]
            wrong += score_multi_turn(e, steps).valid
        print(f"\n{cat}: ground truth {ok:.3f}, shuffled {wrong / len(es):.3f} ({len(es)})")
        assert ok >= 0.98 and wrong / len(es) <= 0.02


def test_a_wrong_action_fails(entries):
    e = entries["multi_turn_base"][0]
    steps = ground_truth_steps(e)
    assert score_multi_turn(e, steps).valid
    dropped = [list(t) for t in steps]
    dropped[0] = [dropped[0][0][:-1]]  # forget the last call of turn 0
    assert not score_multi_turn(e, dropped).valid
    assert score_multi_turn(e, steps[:-1]).error_type == "multi_turn:force_terminated"
    assert score_multi_turn(e, None).error_type == "multi_turn:force_terminated"


def _hermes(call: str, docs: dict) -> dict:
    node = ast.parse(call, mode="eval").body
    name = node.func.id if isinstance(node.func, ast.Name) else node.func.attr
    params = list(docs[name]["parameters"]["properties"])
    args = {params[i]: ast.literal_eval(a) for i, a in enumerate(node.args)}
    args.update({k.arg: ast.literal_eval(k.value) for k in node.keywords})
    return {"name": name, "arguments": args}


def scripted(entry):
    """Replies with each user turn's ground-truth calls, then ends the turn in text."""
    turns = [t for t in entry.ground_truth]
    docs = {f["name"]: f for f in entry.functions}
    for extra in entry.missed.values():
        docs.update({f["name"]: f for f in extra})

    def reply(messages, tools):
        assert {t["function"]["name"] for t in tools} <= set(docs)
        if messages[-1]["role"] != "user":
            return "Done."
        turn = turns[sum(m["role"] == "user" for m in messages) - 1]
        blocks = [json.dumps(_hermes(c, docs)) for c in turn]
        return "".join(f"<tool_call>\n{b}\n</tool_call>" for b in blocks) or "I can't."

    return reply


def test_loop_with_scripted_replies_passes_the_checker(entries):
    sample = entries["multi_turn_base"][:15] + entries["multi_turn_miss_func"][:5]
    verdicts = [score_multi_turn(e, run_multi_turn(e, scripted(e))) for e in sample]
    rate = sum(v.valid for v in verdicts) / len(verdicts)
    print(f"\nscripted loop: {rate:.3f} of {len(verdicts)}")
    assert rate >= 0.9, [(v.id, v.error_type) for v in verdicts if not v.valid]
    again = score_multi_turn(sample[0], run_multi_turn(sample[0], scripted(sample[0])))
    assert again.valid == verdicts[0].valid  # fresh backend state on every run


def test_tool_results_are_observations_and_unknown_names_never_run(entries):
    e = entries["multi_turn_base"][0]
    seen = []

    def reply(messages, tools):
        seen.append(list(messages))
        if len(seen) == 1:
            return (
                '<tool_call>{"name": "__import__", "arguments": {"name": "os"}}</tool_call>'
                '<tool_call>{"name": "ls", "arguments": {}}</tool_call>'
            )
        return "ok"

    steps = run_multi_turn(e, reply)
    assert steps[0] == [["ls()"]]  # the unsafe call is neither executed nor recorded
    error, listing = seen[1][-2], seen[1][-1]
    assert error == {"role": "tool", "content": "Error: unknown function '__import__'."}
    assert listing["role"] == "tool" and "current_directory_content" in listing["content"]
    assert not score_multi_turn(e, steps).valid


def test_force_termination_after_the_step_limit(entries):
    e = entries["multi_turn_base"][0]
    always = lambda messages, tools: '<tool_call>{"name": "pwd", "arguments": {}}</tool_call>'  # noqa: E731
    assert run_multi_turn(e, always, max_steps=3) is None


def test_call_string_is_safe():
    allowed = {"cd", "ls"}
    assert call_string("cd", {"folder": "a'b"}, allowed) == 'cd(folder="a\'b")'
    assert call_string("rm", {}, allowed) is None
    assert call_string("cd", {"x) or (1": 1}, allowed) is None
    assert call_string("os.system", {}, {"os.system"}) is None
