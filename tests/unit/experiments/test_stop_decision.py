"""experiments/credit_assignment/stop_decision.py: rollout classes and the stop token's credit
on literal episodes and rewards (the sampling itself runs in the script, not here)."""

import torch

from experiments.credit_assignment.stop_decision import classify, stop_credit, summarise, turn_mask
from slca_lightning.advantages import SLCARouter
from slca_lightning.types import Episode, RewardOutput, Task, ToolCall, ToolResult

TWO_STEPS = Task(
    task_id="t",
    messages=[{"role": "user", "content": "q"}],
    gold_calls=[[ToolCall("power", {"base": 2, "exponent": 4})], [ToolCall("add", {"a": 16})]],
)


def episode(call_turns: int, answered: bool = True, finish: str = "stop") -> Episode:
    result = [ToolResult(ToolCall("power"), "{}")]
    texts = ["<tool_call>…</tool_call>"] * call_turns + (["answer"] if answered else [])
    results = [result] * call_turns + ([[]] if answered else [])
    return Episode(
        task=TWO_STEPS, assistant_texts=texts, tool_results=results, finish_reason=finish
    )


def test_classes_follow_call_turns_against_gold_steps():
    assert classify(episode(1)) == "early"
    assert classify(episode(2)) == "complete"
    assert classify(episode(0)) == "none"
    assert classify(episode(3, answered=False, finish="max_turns")) == "other"


def test_turn_mask_has_one_run_per_assistant_turn():
    mask = turn_mask([episode(2), episode(1)])
    assert mask.tolist() == [[1, 0, 1, 0, 1, 0], [1, 0, 1, 0, 0, 0]]


def test_early_stop_is_credited_by_its_summary_under_the_paper_and_by_tool_when_moved():
    eps = [episode(2), episode(2), episode(1), episode(1)]
    tool = torch.tensor([1.0, 1.0, 0.742, 0.742])
    summary = torch.tensor([0.6, 0.65, 0.7, 0.7])
    rewards = RewardOutput(channels={"tool": tool, "summary": summary, "total": tool + summary})
    credit = stop_credit(eps, rewards, SLCARouter(), torch.zeros(4, dtype=torch.long))
    assert credit["paper"][2] > 0 and credit["paper"][3] > 0  # summary z-score: above mean
    assert credit["stop_decision_tokens=1"][2] < 0 < credit["stop_decision_tokens=1"][0]
    rows = [
        {"class": classify(e), "paper": credit["paper"][b], "stop_decision_tokens=1": v}
        for b, (e, v) in enumerate(zip(eps, credit["stop_decision_tokens=1"]))
    ]
    fig = summarise(rows)
    assert fig["early"]["rollouts"] == 2 and fig["early"]["paper"]["positive"] == 1.0
    assert fig["early"]["stop_decision_tokens=1"]["positive"] == 0.0


def test_smollm2_readme_block_is_the_committed_result():
    """experiments/smollm2/README.md's stop-decision table is ``table()`` of the committed
    JSON (``--from-json ... --embed``), never typed in."""
    import json
    from pathlib import Path

    from experiments.credit_assignment.stop_decision import BEGIN, END, table

    root = Path(__file__).resolve().parents[3]
    result = root / "experiments/credit_assignment/results/stop_decision/smollm2_sft.json"
    text = (root / "experiments/smollm2/README.md").read_text()
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    assert block.strip() == table(json.loads(result.read_text())).strip()
    assert "| early |" in block
