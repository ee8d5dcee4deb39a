"""BFCL multi-turn categories: the package's executable backends and multi-turn checker.

An entry is a conversation of user turns over stateful API classes (file system, Twitter,
trading …) with an initial state. The model runs as in BFCL's function-calling handlers:
within a turn, each step generates one reply; its calls (read through the model's
:class:`~slca_lightning.calls.formats.ToolCallFormat`, hermes tags by default) are executed on
the entry's backend instances (``execute_multi_turn_func_call``) and the results come back as tool
messages, until a reply has no call (or :data:`MAXIMUM_STEP_LIMIT` steps: force-terminated,
a failure). Held-out functions (``miss_func``) are added at their turn with BFCL's
"I have updated some more functions" user message. ``multi_turn_checker`` then replays the
ground truth on fresh instances and compares the state and the call results turn by turn.

Safety: BFCL executes calls with ``eval`` of ``"name(arg=value, ...)"`` strings.
:func:`call_string` only builds a string for a name among the entry's function docs
(identifiers only) and writes values with ``repr`` of JSON data, so model text never
reaches ``eval`` as code. Backend instances live in that module's globals, keyed by a model
name: each run uses a fresh name and removes its instances afterwards.
"""

from __future__ import annotations

import itertools
import random
import re
from dataclasses import dataclass, field
from typing import Any

from slca_lightning.calls.formats import ToolCallFormat
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.eval.bfcl.checker import EntryScore, install_model_config_stub
from slca_lightning.eval.bfcl.data import MULTI_TURN_CATEGORIES, to_tools

__all__ = [
    "MAXIMUM_STEP_LIMIT",
    "MULTI_TURN_CATEGORIES",
    "MultiTurnEntry",
    "call_string",
    "ground_truth_steps",
    "load_multi_turn",
    "run_multi_turn",
    "score_multi_turn",
]

MAXIMUM_STEP_LIMIT = 20  # BFCL's default_prompts.MAXIMUM_STEP_LIMIT
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RUNS = itertools.count()


@dataclass
class MultiTurnEntry:
    """One BFCL multi-turn entry.

    Attributes:
        id: BFCL id, e.g. ``"multi_turn_base_0"``.
        category: its category.
        turns: user messages per turn (a held-out turn is empty).
        functions: docs shown from the start (held-out ones removed).
        missed: turn index → docs added at that turn.
        initial_config: initial state of each backend class.
        involved_classes: backend class names.
        ground_truth: call strings per turn.
    """

    id: str
    category: str
    turns: list[list[dict[str, Any]]]
    functions: list[dict[str, Any]]
    missed: dict[int, list[dict[str, Any]]]
    initial_config: dict[str, Any]
    involved_classes: list[str]
    ground_truth: list[list[str]]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    @property
    def long_context(self) -> bool:
        return "long_context" in self.category or "composite" in self.category


def load_multi_turn(category: str, limit: int | None = None, seed: int = 0):
    """Entries of a multi-turn category (a seeded sample of ``limit`` when given)."""
    if category not in MULTI_TURN_CATEGORIES:
        raise ValueError(f"unknown BFCL multi-turn category {category!r}")
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    shown = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
    truth = {t["id"]: t["ground_truth"] for t in load_ground_truth_entry(category)}
    entries = [
        MultiTurnEntry(
            id=e["id"],
            category=category,
            turns=e["question"],
            functions=e["function"],
            missed={int(k): v for k, v in (e.get("missed_function") or {}).items()},
            initial_config=e.get("initial_config") or {},
            involved_classes=list(e["involved_classes"]),
            ground_truth=truth[e["id"]],
            raw=e,
        )
        for e in shown
    ]
    if limit is not None and limit < len(entries):
        keep = sorted(random.Random(f"{seed}:{category}").sample(range(len(entries)), limit))
        entries = [entries[i] for i in keep]
    return entries


def call_string(name: str, arguments: dict[str, Any], allowed: set[str]) -> str | None:
    """``name(k=repr(v), ...)`` for BFCL's executor, or None for a name not offered/unsafe."""
    if name not in allowed or not _IDENT.match(name):
        return None
    if not all(isinstance(k, str) and _IDENT.match(k) for k in arguments):
        return None
    return f"{name}({', '.join(f'{k}={v!r}' for k, v in arguments.items())})"


def _execute(calls: list[str], entry: MultiTurnEntry, run: str) -> list[str]:
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils import (
        execute_multi_turn_func_call,
    )

    results, _ = execute_multi_turn_func_call(
        calls, entry.initial_config, entry.involved_classes, run, entry.id, entry.long_context
    )
    return results


def _cleanup(run: str) -> None:
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_utils

    prefix = re.sub(r"[-./:]", "_", run) + "_"  # "slca_mt_1_" never matches run 10
    for key in [k for k in vars(multi_turn_utils) if k.startswith(prefix)]:
        del vars(multi_turn_utils)[key]


def score_multi_turn(entry: MultiTurnEntry, steps: list[list[list[str]]] | None) -> EntryScore:
    """BFCL's verdict on ``steps[turn][step] = [call strings]`` (None: force-terminated)."""
    install_model_config_stub()
    from bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker import multi_turn_checker

    if steps is None or len(steps) != len(entry.ground_truth):
        return EntryScore(entry.id, entry.category, False, "multi_turn:force_terminated", None, [])
    decoded = [[s for s in turn if s] for turn in steps]
    run = f"slca_mt_{next(_RUNS)}"
    test_entry = {**entry.raw, "initial_config": entry.initial_config}
    try:
        result = multi_turn_checker(decoded, entry.ground_truth, test_entry, entry.category, run)
    except Exception as exc:  # a backend tripping on odd input is a failure, not a crash
        return EntryScore(entry.id, entry.category, False, "checker_exception", repr(exc), [])
    finally:
        _cleanup(run)
    ok = bool(result.get("valid"))
    err = None if ok else str(result.get("error_message"))
    return EntryScore(
        entry.id, entry.category, ok, None if ok else result.get("error_type"), err, []
    )


def run_multi_turn(
    entry: MultiTurnEntry,
    generate,
    max_steps: int = MAXIMUM_STEP_LIMIT,
    tool_format: ToolCallFormat | None = None,
):
    """Drive one entry: ``generate(messages, tools) -> reply text``; returns the call strings
    per turn and step (None when a turn hit ``max_steps``), ready for
    :func:`score_multi_turn`.

    ``tool_format``: how the replies write their calls (None: hermes tags); each reply is
    read through :meth:`~slca_lightning.calls.formats.ToolCallFormat.canonical`, while the
    conversation keeps the reply as written."""
    from bfcl_eval.constants.default_prompts import DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC

    functions = list(entry.functions)
    messages: list[dict[str, Any]] = []
    run = f"slca_mt_{next(_RUNS)}"
    out: list[list[list[str]]] = []
    try:
        for t, turn in enumerate(entry.turns):
            if t in entry.missed:
                functions = functions + entry.missed[t]
                turn = [{"role": "user", "content": DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC}]
            messages.extend(dict(m) for m in turn)
            tools, allowed = to_tools(functions), {f["name"] for f in functions}
            steps: list[list[str]] = []
            for _ in range(max_steps + 1):
                if len(steps) >= max_steps:
                    return None
                reply = generate(messages, tools)
                messages.append({"role": "assistant", "content": reply})
                canonical = reply if tool_format is None else tool_format.canonical(reply).text
                calls = parse_tool_calls(canonical).calls
                if not calls:
                    break
                strings = [call_string(c.name, c.arguments, allowed) for c in calls]
                runnable = [s for s in strings if s is not None]
                results = iter(_execute(runnable, entry, run) if runnable else [])
                for s, c in zip(strings, calls, strict=True):
                    content = next(results) if s else f"Error: unknown function {c.name!r}."
                    messages.append({"role": "tool", "content": content})
                steps.append(runnable)
            out.append(steps)
    finally:
        _cleanup(run)
    return out


def ground_truth_steps(entry: MultiTurnEntry) -> list[list[list[str]]]:
    """The ground truth as model steps (all of a turn's calls in one step)."""
    return [[list(turn)] if turn else [] for turn in entry.ground_truth]
