"""Whole multi-turn training steps with tools: ``slca fit`` vs TRL 1.16 ``GRPOTrainer(tools=...)``.

The multi-turn companion of :mod:`bench_step`: both systems run episodes in which the policy
calls the built-in suite's tools, gets their results and writes again, up to ``turns``
assistant turns, then take one GRPO update; tokens/s of whole steps, alternated in one
process.

- **slca**: a real ``slca fit``: HFEngine sampling, the agent loop over ``turns`` turns, the
  schema-guided simulator executing the suite's Python tools, HierR (rule judge),
  MaskRunSegmenter, SLCARouter, the update.
- **TRL**: a real ``GRPOTrainer(tools=[...]).train()``: its tool loop (``_tool_call_loop``)
  parses each completion with ``tokenizer.parse_response`` (this project's ``hermes``
  response template, :data:`~slca_lightning.calls.template_format.RESPONSE_TEMPLATES`),
  executes the calls with the same Python functions, appends the results with the chat
  template and generates again (``max_tool_calling_iterations = turns - 1``); a cheap reward
  (the last reply's length): it does less work than slca's HierR, which favours TRL.

Matched: the model (a tool-calling warm start, e.g. ``suite-sft``, or an SFT'd folder such
as SmolLM2's), the prompts (the synthetic tasks' system + user messages; TRL's copy of the
tokenizer renders them with the same template, minus its ``tools=`` block, so the tools are
listed once, by the system prompt, exactly as slca's prompts list them), float32, CPU,
prompts per step, G, temperature 1, no KL (no reference model), one PPO epoch of one
mini-batch, loss ``grpo``, max grad norm 1, AdamW, no activation checkpointing, rows per
forward/backward (``micro_batch``). Caps: slca ``max_new_tokens`` per turn and
``turns × max_new_tokens`` per episode; TRL ``max_completion_length = turns ×
max_new_tokens`` for the whole multi-turn completion (it has no per-turn cap).

Tokens are counted TRL's way on both sides: prompt tokens + tokens the policy sampled (TRL's
``num_input_tokens_seen`` leaves tool-result tokens out; slca's count here does too), per
optimiser step, after one warm-up step. A round runs one fit of each system; the ratio is
the median over rounds of slca tokens/s ÷ TRL tokens/s of the same round. Also reported:
tool calls per episode on each side (so a reader can see both really called tools).

    python benchmarks/bench_multiturn.py --model suite-sft --threads 1
"""

from __future__ import annotations

import json
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass

import lightning as L
from bench_step import per_step, slca_args, trl_config


@dataclass
class MultiTurnShape:
    """Settings of the multi-turn comparison."""

    model: str = "suite-sft"
    prompts_per_step: int = 2
    group_size: int = 8
    turns: int = 3
    max_new_tokens: int = 64
    steps: int = 3
    rounds: int = 3
    n_train: int = 64
    lr: float = 1e-5
    micro_batch: int | None = None


def suite_tools() -> list:
    """The built-in suite's tools as the plain Python functions TRL calls (typed, with
    docstrings, as transformers' ``get_json_schema`` wants); each returns the tool's real
    result as JSON, as slca's simulator does for the same call."""
    from slca_lightning.data.suite import builtin_suite
    from slca_lightning.types import ToolCall

    suite = builtin_suite()

    def run(name: str, **arguments) -> str:
        return json.dumps(suite.run(ToolCall(name, arguments)), separators=(",", ":"))

    def add(a: int, b: int) -> str:
        """Add two integers.

        Args:
            a: First integer.
            b: Second integer.
        """
        return run("add", a=a, b=b)

    def multiply(a: int, b: int) -> str:
        """Multiply two integers.

        Args:
            a: First integer.
            b: Second integer.
        """
        return run("multiply", a=a, b=b)

    def power(base: int, exponent: int) -> str:
        """Raise an integer base to an integer exponent.

        Args:
            base: The base.
            exponent: The exponent.
        """
        return run("power", base=base, exponent=exponent)

    def convert(value: float, from_unit: str, to_unit: str) -> str:
        """Convert a value between units.

        Args:
            value: The value.
            from_unit: Its unit.
            to_unit: The target unit.
        """
        return run("convert", value=value, from_unit=from_unit, to_unit=to_unit)

    def weather(city: str, day: str) -> str:
        """Get the weather forecast of a city.

        Args:
            city: City name.
            day: Which day.
        """
        return run("weather", city=city, day=day)

    def city_info(city: str) -> str:
        """Get facts about a city.

        Args:
            city: City name.
        """
        return run("city_info", city=city)

    def reverse(text: str) -> str:
        """Reverse a text.

        Args:
            text: The text.
        """
        return run("reverse", text=text)

    def word_count(text: str) -> str:
        """Count the words of a text.

        Args:
            text: The text.
        """
        return run("word_count", text=text)

    def add_days(date: str, days: int) -> str:
        """Add days to an ISO date.

        Args:
            date: The date.
            days: Days to add.
        """
        return run("add_days", date=date, days=days)

    def weekday(date: str) -> str:
        """The weekday of an ISO date.

        Args:
            date: The date.
        """
        return run("weekday", date=date)

    tools = [add, multiply, power, convert, weather, city_info, reverse, word_count]
    tools += [add_days, weekday]
    missing = {f.__name__ for f in tools} ^ set(suite.names)
    if missing:
        raise RuntimeError(f"suite tools and their TRL wrappers differ: {sorted(missing)}")
    return tools


class _Clock(L.Callback):
    """slca side: time, prompt + sampled tokens, and tool calls at each optimiser step."""

    def __init__(self) -> None:
        self.marks: list[tuple[float, int]] = []
        self.calls: list[float] = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        eps = batch.episodes
        tokens = sum(len(e.prompt_ids) + sum(e.assistant_mask) for e in eps)
        self.marks.append((time.perf_counter(), tokens))
        self.calls.append(sum(len(c) for e in eps for c in e.tool_results) / max(len(eps), 1))


def run_slca(shape: MultiTurnShape) -> tuple[float, float, float]:
    """One ``slca fit``: (tokens, seconds) of the measured steps and tool calls per episode."""
    from slca_lightning.cli.commands import main

    with tempfile.TemporaryDirectory(prefix="slca_bench_mt_") as root:
        cli = main(slca_args(shape, root, max_turns=shape.turns), run=False)
        clock = _Clock()
        cli.trainer.callbacks.append(clock)
        cli.trainer.fit(cli.model, cli.datamodule)
    tokens, seconds = per_step(clock.marks, cumulative=False)
    return tokens, seconds, statistics.mean(clock.calls[1:])


#: The hermes ChatML template as TRL needs it: no ``tools=`` block (the system prompt lists
#: the tools), and an assistant message's structured ``tool_calls`` rendered as the hermes
#: blocks the model writes (TRL's ``supports_tool_calling`` check asks for that).
TRL_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}"
    "\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content or '' }}"
    "{% for call in message.tool_calls or [] %}{% if message.content or not loop.first %}\n"
    "{% endif %}<tool_call>\n{{ call.function | tojson }}\n</tool_call>{% endfor %}"
    "<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def trl_tokenizer(tokenizer):
    """A copy of ``tokenizer`` for TRL: :data:`TRL_TEMPLATE` (renders a conversation without
    structured tool calls exactly as slca's template does: a test checks) and this project's
    ``hermes`` response template for ``parse_response``."""
    import copy

    from slca_lightning.calls.template_format import RESPONSE_TEMPLATES

    tok = copy.deepcopy(tokenizer)
    tok.chat_template = TRL_TEMPLATE
    tok.response_template = copy.deepcopy(RESPONSE_TEMPLATES["hermes"])
    return tok


def run_trl(shape: MultiTurnShape, prompts: list[list[dict]]) -> tuple[float, float, float]:
    """One ``GRPOTrainer(tools=...).train()``: (tokens, seconds) and tool calls per episode."""
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOTrainer

    from slca_lightning.models.policy import load_policy

    marks: list[tuple[float, int]] = []
    calls: list[tuple[int, int]] = []  # (tool results, episodes) of each reward call

    class Clock(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            marks.append((time.perf_counter(), int(state.num_input_tokens_seen)))

    def reward(completions, **kw):  # the last message's length; counts the tool results
        calls.append((sum(m["role"] == "tool" for c in completions for m in c), len(completions)))
        return [len(c[-1].get("content") or "") / 100.0 for c in completions]

    model, tokenizer = load_policy(shape.model, seed=0)
    model.train()
    with tempfile.TemporaryDirectory(prefix="slca_bench_trl_mt_") as out:
        args = trl_config(
            shape, out, max_completion_length=shape.turns * shape.max_new_tokens,
            max_tool_calling_iterations=shape.turns - 1,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            trainer = GRPOTrainer(
                model=model, reward_funcs=reward, args=args,
                train_dataset=Dataset.from_dict({"prompt": prompts}),
                processing_class=trl_tokenizer(tokenizer), tools=suite_tools(),
                callbacks=[Clock()],
            )  # fmt: skip
            trainer.train()
    tokens, seconds = per_step(marks, cumulative=True)
    measured = calls[1:] or calls  # the first generation is the warm-up step's
    return tokens, seconds, sum(c for c, _ in measured) / sum(n for _, n in measured)


def task_messages(n: int) -> list[list[dict]]:
    """The synthetic training tasks' prompts as messages (system prompt listing the tools)."""
    from slca_lightning.data.task_sources import SyntheticTasks

    return [list(t.messages) for t in SyntheticTasks(n_train=n, n_heldout=4, seed=0).train()]


def run(shape: MultiTurnShape) -> dict:
    """Alternate whole fits of TRL and slca for ``shape.rounds`` rounds; return figures."""
    prompts = task_messages(shape.n_train)
    got: dict[str, list[tuple[float, float, float]]] = {"trl": [], "slca": []}
    for r in range(shape.rounds):
        order = ("trl", "slca") if r % 2 == 0 else ("slca", "trl")
        for name in order:
            got[name].append(run_slca(shape) if name == "slca" else run_trl(shape, prompts))
    tps = {n: [tok / sec for tok, sec, _ in v] for n, v in got.items()}
    ratios = [s / t for s, t in zip(tps["slca"], tps["trl"], strict=True)]
    med = statistics.median
    return {
        "shape": shape,
        "tokens_per_s": {n: med(v) for n, v in tps.items()},
        "tokens_per_step": {n: med(t / shape.steps for t, _, _ in v) for n, v in got.items()},
        "step_seconds": {n: med(s / shape.steps for _, s, _ in v) for n, v in got.items()},
        "tool_calls_per_episode": {n: med(c for _, _, c in v) for n, v in got.items()},
        "speedup": med(ratios),
        "speedup_spread": (min(ratios), max(ratios)),
    }


def main(argv: list[str] | None = None) -> dict:
    """``python benchmarks/bench_multiturn.py --model suite-sft --threads 1``"""
    import argparse

    import torch

    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="suite-sft", help="a tool-calling model (name or folder)")
    p.add_argument("--prompts", type=int, default=2)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--turns", type=int, default=3)
    p.add_argument("--new-tokens", type=int, default=64, help="per turn")
    p.add_argument("--steps", type=int, default=3, help="measured steps per fit (+1 warm-up)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=None)
    p.add_argument("--out", default=None, help="write the figures as JSON here")
    a = p.parse_args(argv)
    b = a.prompts * a.group
    if a.micro_batch is not None and (a.micro_batch < 1 or b % a.micro_batch):
        p.error(f"--micro-batch {a.micro_batch} must divide the batch of {b} rollouts")
    torch.set_num_threads(a.threads)
    shape = MultiTurnShape(
        model=a.model, prompts_per_step=a.prompts, group_size=a.group, turns=a.turns,
        max_new_tokens=a.new_tokens, steps=a.steps, rounds=a.rounds, micro_batch=a.micro_batch,
    )  # fmt: skip
    out = run(shape)
    tps, calls = out["tokens_per_s"], out["tool_calls_per_episode"]
    print(
        f"{a.model}, {a.threads} thread(s), {a.prompts}x{a.group} rollouts, ≤{a.turns} turns × "
        f"{a.new_tokens} tokens: slca {tps['slca']:.0f} tok/s, TRL {tps['trl']:.0f} tok/s, ratio "
        f"{out['speedup']:.2f} (spread {out['speedup_spread'][0]:.2f}-"
        f"{out['speedup_spread'][1]:.2f}); step {out['step_seconds']['slca']:.1f} s vs "
        f"{out['step_seconds']['trl']:.1f} s; tool calls/episode {calls['slca']:.2f} vs "
        f"{calls['trl']:.2f}"
    )
    if a.out:
        from dataclasses import asdict

        with open(a.out, "w") as fh:
            json.dump({**out, "shape": asdict(shape), "threads": a.threads}, fh, indent=2)
    return out


if __name__ == "__main__":
    main()
