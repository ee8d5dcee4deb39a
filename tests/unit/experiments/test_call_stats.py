"""experiments/learning/call_stats.py: counts malformed calls and exact copies on literal episodes."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from experiments.learning.call_stats import call_stats, main  # noqa: E402

GOLD = [[["add", {"a": 2, "b": 3}], ["multiply", {"a": 4, "b": 5}]]]


def _turn(body: str) -> str:
    return f"<tool_call>\n{body}\n</tool_call>"


def test_counts_invalid_and_exact_calls():
    rows = [
        {  # one exact call, one with a wrong value, in one list block
            "gold": GOLD,
            "exact": False,
            "turns": [
                _turn(
                    '[{"name": "add", "arguments": {"a": 2, "b": 3}}, '
                    '{"name": "multiply", "arguments": {"a": 4, "b": 6}}]'
                ),
                "Here is what I found.",
            ],
        },
        {  # string arguments: invalid, even though they hold the gold values
            "gold": GOLD,
            "exact": False,
            "turns": [_turn('{"name": "add", "arguments": "{\\"a\\": 2, \\"b\\": 3}"}')],
        },
        {"gold": [], "exact": True, "turns": ["No tool can do that."]},
    ]
    s = call_stats(rows)
    assert (s["episodes"], s["exact_episodes"], s["calls"], s["invalid"]) == (3, 1, 3, 1)
    assert (s["well_formed"], s["gold_exact"]) == (2, 1)
    assert math.isclose(s["invalid_share"], 1 / 3) and s["gold_exact_share"] == 0.5
    assert math.isnan(call_stats([rows[2]])["invalid_share"])


def test_cli_prints_one_line_per_file(tmp_path, capsys):
    path = tmp_path / "step_0.jsonl"
    row = {
        "gold": GOLD,
        "exact": False,
        "turns": [_turn('{"name": "add", "arguments": {"a": 2, "b": 3}}')],
    }
    path.write_text(json.dumps(row) + "\n")
    assert main([str(path)]) == 0
    out = capsys.readouterr().out
    assert (
        "0/1 episodes exact; 1 calls, 0 invalid (0.00); of 1 well-formed, 1 exactly a gold call (1.000)"
        in out
    )


def test_stop_stats_counts_early_answers_on_multistep_tasks():
    from experiments.common import stop_stats

    def row(gold_steps, observations):
        return {"gold": [[["f", {}]]] * gold_steps, "observations": observations}

    rows = [
        row(1, [["x"], []]),  # single-step: not counted
        row(2, [["x"], []]),  # one call turn, then the answer: early
        row(2, [["x"], ["y"], []]),  # both steps, then the answer: complete
        row(2, [["x"], ["y"], ["z"]]),  # still calling when cut off: unanswered
        row(3, [[]]),  # answered without a call
    ]
    assert stop_stats(rows) == {
        "multistep": 4,
        "early": 1,
        "complete": 1,
        "none": 1,
        "unanswered": 1,
    }


def test_turn_changes_pairs_tasks_and_splits_by_kind_and_tool_reward():
    from experiments.learning.call_stats import turn_changes

    def row(task, kind, observations, tool, exact):
        rewards = {"tool": tool}
        return {
            "task_id": task,
            "kind": kind,
            "observations": observations,
            "rewards": rewards,
            "exact": exact,
        }

    before = [
        row("a", "single", [["x"], ["y"], []], 0.9, True),
        row("b", "parallel", [["x"], ["y"], []], 1.0, True),
        row("c", "parallel", [["x"], []], 0.5, False),
        row("d", "multistep", [["x"], []], 0.5, False),
    ]
    after = [  # another order: pairing is by task id
        row("c", "parallel", [["x"], ["y"], []], 1.0, True),
        row("b", "parallel", [["x"], []], 0.5, False),
        row("a", "single", [["x"], []], 1.0, True),
        row("d", "multistep", [["x"], []], 0.5, False),
    ]
    zero = dict.fromkeys(
        ("fewer", "fewer_tool_up", "fewer_tool_down", "more", "more_tool_up", "more_tool_down"), 0
    )
    assert turn_changes(before, after) == {
        "multistep": {**zero, "tasks": 1, "exact_before": 0, "exact_after": 0},
        "parallel": {**zero, "tasks": 2, "fewer": 1, "fewer_tool_down": 1, "more": 1, "more_tool_up": 1,
                     "exact_before": 1, "exact_after": 1},
        "single": {**zero, "tasks": 1, "fewer": 1, "fewer_tool_up": 1, "exact_before": 1, "exact_after": 1},
    }  # fmt: skip
    with pytest.raises(ValueError, match="same task ids"):
        turn_changes(before, after[:3])


def test_short_stats_counts_multi_call_tasks_answered_with_too_few_calls():
    from experiments.common import short_stats

    def row(gold, observations):
        return {"gold": gold, "observations": observations}

    parallel, steps = [[["f", {}], ["g", {}]]], [[["f", {}]], [["g", {}]]]
    rows = [
        row([[["f", {}]]], [["x"], []]),  # one gold call: not counted
        row(parallel, [["x"], []]),  # one call of two, then the answer: short
        row(parallel, [["x", "y"], []]),  # both calls in one turn: not short
        row(steps, [["x"], []]),  # one step of two answered: short
        row(steps, [["x"], ["y"]]),  # still calling when cut off: not an answer
        row(steps, [[]]),  # no call at all: not short (stop_stats counts it as none)
    ]
    assert short_stats(rows) == {"multicall": 5, "short": 2}
