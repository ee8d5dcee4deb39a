"""HeldoutTable: greedy held-out episodes before and after training, as a printed table."""

from __future__ import annotations

import os
from dataclasses import replace

import lightning as L
import torch

from slca_lightning.rollout.agent_loop import AgentLoop
from slca_lightning.rollout.hf_engine import HFEngine


def heldout_metrics(module, datamodule, num_tasks: int) -> dict[str, float]:
    """Greedy (temperature 0) episodes on the first ``num_tasks`` held-out tasks.

    Returns tool-call accuracy (every gold call made strictly correctly, and no call on
    irrelevant tasks: ToolPO's action score = 1), the mean process reward, Success@0.9
    (total / (λ_p + λ_s) ≥ 0.9, METHOD §8) and executed tool calls per episode.
    """
    tasks = datamodule.source.heldout()[:num_tasks]
    if not tasks:
        return {}
    engine = HFEngine(module.policy, module.tokenizer)
    loop = datamodule.loop
    greedy = AgentLoop(
        engine,
        module.tokenizer,
        datamodule.simulator,
        replace(datamodule.sampling, temperature=0.0, seed=0),
        max_turns=loop.max_turns,
        max_calls_per_turn=loop.max_calls_per_turn,
        max_response_tokens=loop.max_response_tokens,
        max_tool_response_tokens=loop.max_tool_response_tokens,
        render_check="off",
    )
    episodes = greedy.run(tasks, group_size=1)
    rewards = module.reward_head(episodes)
    head = module.reward_head
    scale = getattr(head, "lambda_process", 1.0) + getattr(head, "lambda_summary", 1.0)
    ch = rewards.channels
    from slca_lightning.rewards import action_score
    from slca_lightning.tools.parsing import parse_tool_calls

    if "action" in ch:
        action = ch["action"]
    else:
        action = torch.tensor(
            [
                action_score(parse_tool_calls(e.response_text).calls, e.task.gold_calls)
                for e in episodes
            ]
        )
    calls = [sum(len(r) for r in e.tool_results) for e in episodes]
    return {
        "tool_accuracy": float((action >= 1.0).float().mean()),
        "process": float(ch["tool"].mean()),
        "success@0.9": float((ch["total"] / scale >= 0.9).float().mean()),
        "calls_per_episode": sum(calls) / len(calls),
    }


def markdown_table(rows: dict[str, dict[str, float]]) -> str:
    """``{"before RL": {...}, "after RL": {...}}`` → a Markdown table."""
    keys = list(next(iter(rows.values())).keys()) if rows else []
    lines = ["| | " + " | ".join(keys) + " |", "|---" * (len(keys) + 1) + "|"]
    for name, m in rows.items():
        lines.append(
            f"| {name} | " + " | ".join(f"{m.get(k, float('nan')):.3f}" for k in keys) + " |"
        )
    return "\n".join(lines)


class HeldoutTable(L.Callback):
    """Prints (and writes ``heldout.md``) the held-out table before and after training.

    Args:
        num_tasks: held-out tasks evaluated (greedy, one episode each).
    """

    def __init__(self, num_tasks: int = 32) -> None:
        self.num_tasks = num_tasks
        self.rows: dict[str, dict[str, float]] = {}

    def _eval(self, trainer, module, name: str) -> None:
        dm = trainer.datamodule
        if dm is None or getattr(dm, "loop", None) is None:
            return
        metrics = heldout_metrics(module, dm, self.num_tasks)
        if not metrics:
            return
        self.rows[name] = metrics
        for k, v in metrics.items():
            if trainer.logger is not None:
                trainer.logger.log_metrics({f"heldout/{k}": v}, step=trainer.global_step)
        table = markdown_table(self.rows)
        print(
            f"\nheld-out ({len(dm.source.heldout()[: self.num_tasks])} tasks, greedy):\n{table}\n"
        )
        folder = trainer.log_dir or trainer.default_root_dir
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, "heldout.md"), "w") as f:
            f.write(table + "\n")

    def on_train_start(self, trainer, pl_module) -> None:
        if trainer.datamodule is not None and trainer.datamodule.loop is None:
            trainer.datamodule.connect(pl_module.policy, pl_module.tokenizer)
        self._eval(trainer, pl_module, "before RL")

    def on_train_end(self, trainer, pl_module) -> None:
        self._eval(trainer, pl_module, "after RL")
