"""Fuzz: a real ``fit`` through more than a thousand hostile tool calls (issue 17).

Real parts: LightningCLI, Trainer, the built-in tiny model and tokenizer, the agent loop,
the schema-guided simulator over the built-in Python tools, HierR. The policy is a
ScriptedEngine that writes seeded hostile call blocks as plain ASCII (what a model can
sample): lone surrogates and control characters spelled as JSON escapes in names, keys and
values, huge integers (results past Python's 4,300-digit limit), NaN and Infinity, wrong
JSON types, deep nesting (some past the parser's recursion limit), raw control bytes,
unbalanced tags, turns of up to 44 entries and, in the last step, one block of 2,000
entries. The run must finish with no environment error, every entry must be answered by
its own observation or counted in its turn's overflow observation, and no observation may
hold text an encoder rejects. (Found on the way: the rule judge raised OverflowError on a
tool result holding a huge integer; HierR now scores such a batch request by request.)
"""

from __future__ import annotations

import json
import random
from dataclasses import replace

import lightning as L
import pytest

from slca_lightning.calls.env_errors import EnvironmentBrokenError
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.sanitize import is_clean
from slca_lightning.cli.commands import main
from slca_lightning.data.task_sources import SyntheticTasks
from slca_lightning.rollout.agent_loop import not_executed
from slca_lightning.rollout.scripted_engine import ScriptedEngine
from slca_lightning.tools.base import ToolBackend
from slca_lightning.tools.simulator import SchemaGuidedSimulator

CAP = 16
STEPS = 6
ROWS = 8  # prompts_per_step × group_size
# Response tokens an episode may spend on hostile turns (the tiny tokenizer spends about one
# token per character; the update's cost grows with the row length, so rows stay short),
# except the one row of the last step that writes a block of MEGA_ENTRIES entries.
BUDGET = 3600
TURN_CHARS = 900  # longest hostile turn (regenerated until shorter)
MEGA_ENTRIES = 2000
ARGS = [
    "--model.model=tiny",
    "--model.micro_batch_size=8",
    "--model.kl_coef=0",
    "--data.prompts_per_step=2",
    "--data.group_size=4",
    "--data.max_turns=6",
    f"--data.max_calls_per_turn={CAP}",
    "--data.max_new_tokens=4400",
    "--data.max_response_tokens=5600",
    "--data.max_tool_response_tokens=8",
    "--data.tasks.class_path=slca_lightning.data.task_sources.SyntheticTasks",
    "--data.tasks.init_args.n_train=8",
    "--data.tasks.init_args.n_heldout=2",
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.enable_checkpointing=false",
    "--trainer.logger=false",
    f"--trainer.max_steps={STEPS}",
]

TOOLS = ["add", "multiply", "power", "convert", "weather", "reverse", "word_count", "add_days"]
NASTY = ["\udc00", "\ud800", "\x00", "\x1b", "\x7f", "\x85", "\u2028", "\ufffe", "'", '"', "\\"]


def nasty(rng: random.Random, n: int = 8) -> str:
    return "".join(rng.choice([*NASTY, "a", "b", " "]) for _ in range(rng.randint(1, n)))


def nested(depth: int):
    value: object = 1
    for _ in range(depth):
        value = [value]
    return value


def hostile_entry(rng: random.Random) -> object:
    """One call object (or not-an-object) a model might write."""
    name = rng.choice(TOOLS)
    kind = rng.randrange(16)
    if kind == 0:
        return {"name": name + nasty(rng), "arguments": {}}
    if kind == 1:
        return {"name": name, "arguments": {nasty(rng): nasty(rng, 30), "a": 1, "b": 2}}
    if kind == 2:  # the result has 4,310 digits: past Python's str(int) limit
        return {"name": "power", "arguments": {"base": int("9" * 431), "exponent": 10}}
    if kind == 3:
        big = int("7" * rng.randint(100, 300))
        return {"name": rng.choice(["add", "multiply"]), "arguments": {"a": big, "b": -big}}
    if kind == 4:
        value = rng.choice([float("nan"), float("inf"), -float("inf"), 1e308, -0.0, 5e-324])
        return {
            "name": "convert",
            "arguments": {"value": value, "from_unit": "km", "to_unit": "mi"},
        }
    if kind == 5:
        return rng.choice([5, "add", None, True, [], [1, 2], 1.5])  # not an object
    if kind == 6:
        return {"name": rng.choice([7, None, ["add"], {"n": 1}, "", "  "]), "arguments": {}}
    if kind == 7:
        return {"name": name, "arguments": rng.choice([[1], "a=1", 3, None, True])}
    if kind == 8:
        return {"name": name, "arguments": {"a": nested(rng.randint(33, 150)), "b": 1}}
    if kind == 9:
        return {"name": "reverse", "arguments": {"text": nasty(rng, 12) * rng.randint(1, 20)}}
    if kind == 10:
        return {"name": "add_days", "arguments": {"date": "2024-01-01", "days": 10**400}}
    if kind == 11:
        return {"name": nasty(rng, 3) * 50, "arguments": {}}  # a long name
    if kind == 12:
        return {"name": name, "arguments": {f"k{i}\udc00": i for i in range(rng.randint(1, 20))}}
    if kind == 13:
        return {"name": "word_count", "parameters": {"text": nasty(rng, 20)}}
    if kind == 14:
        return {"name": "weather", "arguments": {"city": nasty(rng), "day": nasty(rng)}}
    return {"name": "add", "arguments": {"a": rng.randint(-9, 9), "b": rng.randint(-9, 9)}}


def hostile_turn(rng: random.Random) -> str:
    """One hostile tool turn (always opens a <tool_call>) of at most TURN_CHARS chars."""
    while len(text := _hostile_turn(rng)) > TURN_CHARS:
        pass
    return text


def _hostile_turn(rng: random.Random) -> str:
    kind = rng.randrange(10)
    if kind == 0:  # deeper than the JSON parser's recursion limit (1,000 frames)
        depth = rng.randint(1000, 1500) if rng.random() < 0.02 else 400
        return "<tool_call>\n" + "[" * depth + "]" * depth + "\n</tool_call>"
    if kind == 1:  # raw control bytes and a lone surrogate escape outside any string
        return '<tool_call>\n{"name": "add"\x07\x00, "arguments": {}}\\udc00\n</tool_call>'
    if kind == 2:  # unbalanced tags, then a block
        entries = [hostile_entry(rng) for _ in range(rng.randint(1, 4))]
        return "<tool_call>" * rng.randint(1, 40) + "\n" + json.dumps(entries) + "\n</tool_call>"
    entries = [hostile_entry(rng) for _ in range(rng.randint(1, CAP + 8))]
    if rng.random() < 0.5:  # many short ones: wrong types, bad names
        entries += [rng.choice([5, {}, {"name": 7}, {"name": "x\udc00"}]) for _ in range(20)]
    body = json.dumps(entries if len(entries) > 1 or rng.random() < 0.5 else entries[0])
    return f"<tool_call>\n{body}\n</tool_call>"


MEGA = "<tool_call>\n[" + ",".join((["5"] * 9 + ["{}"]) * (MEGA_ENTRIES // 10)) + "]\n</tool_call>"


def entries_written(text: str) -> int:
    """How many calls the model wrote in one turn: entries of each block (1 for a block
    that failed before its entries) plus unmatched tags."""
    parsed = parse_tool_calls(text)
    blocks = sum(len(b.entries) if b.entries else 1 for b in parsed.blocks)
    return blocks + parsed.denominator - len(parsed.blocks)


class CompactTasks(SyntheticTasks):
    """The built-in synthetic tasks (tools, gold calls, real functions) with a one-line
    prompt: the scripted policy never reads the tool list, and short rows keep the fit's
    updates fast on two cores."""

    def train(self):
        return [replace(t, messages=[{"role": "user", "content": "Go."}]) for t in super().train()]


class Witness(L.Callback):
    """Keeps every step's episodes and logged metrics."""

    def __init__(self):
        self.episodes, self.metrics = [], []

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.episodes.append(module.last_rollout.batch.episodes)
        self.metrics.append({k: float(v) for k, v in trainer.callback_metrics.items()})


@pytest.mark.slow
def test_a_fit_survives_a_thousand_hostile_calls_and_answers_every_one(tmp_path):
    cli = main([*ARGS, f"--trainer.default_root_dir={tmp_path}"], run=False)
    cli.model.configure_model()
    tok = cli.model.tokenizer
    rng = random.Random(17)
    rows = iter(range(10**6))

    header = "<|im_start|>assistant"

    def script(context, turn):
        row = next(rows) if turn == 0 else -1
        if row == ROWS * (STEPS - 1):  # the first row of the last step
            return MEGA + tok.eos_token
        # response tokens so far: the context after the prompt (which ends at the first header)
        response = context[context.index(header) + len(header) :]
        room = BUDGET - len(tok.encode(response, add_special_tokens=False))
        if room < TURN_CHARS + (CAP + 1) * 60:  # an observation costs ≤ ~60 tokens here
            return "I could not finish." + tok.eos_token
        return hostile_turn(rng) + tok.eos_token

    cli.datamodule.source = CompactTasks(n_train=8, n_heldout=2)
    cli.datamodule.engine = ScriptedEngine(tok, script)
    witness = Witness()
    cli.trainer.callbacks.append(witness)
    cli.trainer.fit(cli.model, cli.datamodule)

    assert cli.trainer.global_step == STEPS and len(witness.episodes) == STEPS
    written = answered = overflowed = mega = 0
    for episodes in witness.episodes:
        for ep in episodes:
            assert ep.finish_reason != "length", "a turn hit a token cap: raise the caps"
            for text, results in zip(ep.assistant_texts, ep.tool_results, strict=True):
                n = entries_written(text)
                if "<tool_call>" not in text:
                    assert n == 0 and results == []
                    continue
                extra = not_executed(results[-1]) if results else 0
                assert len(results) <= CAP + 1
                assert len(results) - (extra > 0) + extra == n, (text[:200], len(results))
                written += n
                answered += len(results) - (extra > 0)
                overflowed += extra
                mega += n == MEGA_ENTRIES
                for r in results:
                    assert isinstance(r.content, str) and is_clean(r.content), r
                    r.content.encode("utf-8")
                    assert r.error_kind != "env_error", r.content
    assert mega == 1
    assert written - MEGA_ENTRIES >= 1000, written  # besides the huge block
    assert overflowed >= MEGA_ENTRIES - CAP
    for logged in witness.metrics:
        assert logged["env/errors"] == 0.0
        assert logged["rollout/render_check_failed"] == 0.0  # ids re-render exactly
    print(f"hostile calls written {written}, answered {answered}, in overflow {overflowed}")


class DeadBackend(ToolBackend):
    """A tool server that is down (the broken environment under test)."""

    def execute(self, call, schema, task):
        raise ConnectionResetError("connection reset by peer")


def test_a_broken_environment_stops_the_fit_loudly_instead_of_training_on_errors(tmp_path):
    args = [a for a in ARGS if not a.startswith(("--trainer.max_steps", "--data.group_size"))]
    cli = main(
        [
            *args,
            f"--trainer.default_root_dir={tmp_path}",
            "--trainer.max_steps=2",
            "--data.group_size=2",
            "--data.max_env_error_rate=0.5",
        ],
        run=False,
    )
    cli.model.configure_model()
    tok = cli.model.tokenizer
    call = '<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>'
    cli.datamodule.source = CompactTasks(n_train=8, n_heldout=2, families=["math"])
    cli.datamodule.engine = ScriptedEngine(
        tok, lambda context, turn: (call if turn == 0 else "Sorry.") + tok.eos_token
    )
    cli.datamodule.simulator = SchemaGuidedSimulator(DeadBackend(), timeout_s=None, max_retries=0)
    with pytest.raises(EnvironmentBrokenError, match=r"ConnectionResetError=4.*max_env_error"):
        cli.trainer.fit(cli.model, cli.datamodule)
    assert cli.trainer.global_step == 0  # no update on a batch of error observations
