"""Demo: one rollout group through the real pipeline, GRPO vs SLCA advantages side by side.

Six scripted rollouts of one task ("add 17 and 25, then explain") go through the real agent
loop (tiny offline tokenizer, schema-guided simulator executing a real Python tool), the
HierR reward (process reward + RuleJudge summary score + omission guard), the paper's
mask-run segmenter and both routers. The table shows what each estimator tells the
tool-call tokens and the summary tokens of every rollout; the last line shows the measured
advantage contamination of the batch. Run: ``python -m slca_lightning.demo``.
"""

from __future__ import annotations

import json

import torch

from slca_lightning.advantages import GRPORouter, SLCARouter, advantage_contamination
from slca_lightning.models.tiny import build_tiny_tokenizer
from slca_lightning.rewards import HierarchicalReward
from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.collate import collate_episodes
from slca_lightning.rollout.engine import SamplingConfig
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.segmenters import mask_run_segments
from slca_lightning.tools.simulator import SchemaGuidedSimulator
from slca_lightning.tools.tool_backends import PythonBackend
from slca_lightning.types import Task, ToolCall

ADD = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Add two integers",
        "parameters": {
            "type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
            "required": ["a", "b"],
        },
    },
}
QUESTION = "What is 17 plus 25? Tell me the sum."


def _call(a: int, b: int) -> str:
    return (
        "<tool_call>\n"
        + json.dumps({"name": "add", "arguments": {"a": a, "b": b}})
        + "\n</tool_call>"
    )


GOOD = "The sum of 17 plus 25 is 42, computed with the add tool."
VAGUE = "Okay, done."
ROLLOUTS = [
    ("right call, good summary", [_call(17, 25), GOOD]),
    ("right call, vague summary", [_call(17, 25), VAGUE]),
    (
        "wrong call, good-sounding summary",
        [_call(17, 52), "The sum of 17 plus 25 is 69, computed with the add tool."],
    ),
    ("wrong call, vague summary", [_call(71, 25), VAGUE]),
    ("no call (omission)", ["The sum of 17 plus 25 is 42."]),
    ("right call, good summary", [_call(17, 25), "17 plus 25 gives a sum of 42."]),
]


def run_demo() -> dict[str, float]:
    """Build the group, print the table, return the contamination figures."""
    tok = build_tiny_tokenizer()
    task = Task(
        task_id="demo",
        messages=[{"role": "user", "content": QUESTION}],
        tools=[ADD],
        allowed_tools=["add"],
        gold_calls=[[ToolCall("add", {"a": 17, "b": 25})]],
        question=QUESTION,
    )
    sim = SchemaGuidedSimulator(PythonBackend({"add": lambda a, b: {"sum": a + b}}), timeout_s=None)
    episodes = []
    for _, turns in ROLLOUTS:

        def script(context: str, turn: int, turns=turns) -> str:
            text = turns[min(turn, len(turns) - 1)]
            return text if "<tool_call>" in text else text + tok.eos_token

        loop = AgentLoop(ScriptedEngine(tok, script), tok, sim, SamplingConfig(max_new_tokens=128))
        episodes += loop.run([task], group_size=1, group_offset=0)
    batch = collate_episodes(episodes, tok.pad_token_id)
    rewards = HierarchicalReward()(episodes)
    segments = mask_run_segments(batch.assistant_mask)
    grpo = GRPORouter().route(rewards, segments, batch.group_ids).segment_values
    slca = SLCARouter().route(rewards, segments, batch.group_ids).segment_values

    ch = rewards.channels
    header = f"{'rollout':36s} {'tool':>6s} {'summ':>6s} {'total':>6s} | {'GRPO tool':>9s} {'GRPO sum':>8s} | {'SLCA tool':>9s} {'SLCA sum':>8s}"
    print("One group of G = 6 rollouts: channel rewards and the advantage each segment receives\n")
    print(header)
    print("-" * len(header))
    for i, (label, _) in enumerate(ROLLOUTS):
        has_tool = bool(segments.present["tool"][i])
        gt = f"{float(grpo['tool'][i]):9.3f}" if has_tool else f"{'-':>9s}"
        st = f"{float(slca['tool'][i]):9.3f}" if has_tool else f"{'-':>9s}"
        print(
            f"{label:36s} {float(ch['tool'][i]):6.3f} {float(ch['summary'][i]):6.3f} {float(ch['total'][i]):6.3f} | "
            f"{gt} {float(grpo['summary'][i]):8.3f} | {st} {float(slca['summary'][i]):8.3f}"
        )
    tool_mask = segments.masks["tool"]
    grpo_tokens = GRPORouter()(rewards, segments, batch.group_ids)
    slca_tokens = SLCARouter()(rewards, segments, batch.group_ids)
    figures = {
        "contamination_grpo": advantage_contamination(ch["summary"], grpo_tokens, tool_mask),
        "contamination_slca": advantage_contamination(ch["summary"], slca_tokens, tool_mask),
    }
    print(
        "\nadvantage contamination (corr of summary reward with mean tool-token advantage): "
        f"GRPO {figures['contamination_grpo']:+.3f}, SLCA {figures['contamination_slca']:+.3f}"
    )
    print(
        "'-' = no tool segment (single assistant run). Omitted rollouts carry −0.5 on the summary channel."
    )
    assert torch.isfinite(slca_tokens).all()
    return figures


def main() -> None:
    run_demo()
