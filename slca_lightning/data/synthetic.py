"""Synthetic tool-calling tasks from the built-in suite, reproducible from a seed.

:class:`SyntheticTaskGenerator` draws templated questions (:mod:`.templates`) over the
built-in tools (:mod:`.suite`): single calls, parallel calls (two calls in one step),
multi-step chains (the second call's argument is the real result of the first) and an
``irrelevant`` subset (no call is right: gold ``[]``). :func:`reference_answer` writes the
demonstration transcript of a task for an SFT warm start.
"""

from __future__ import annotations

import json
import logging
import random
from typing import Any, Literal

from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.data.suite import ToolSuite, builtin_suite
from slca_lightning.data.templates import KINDS, TEMPLATES, Template
from slca_lightning.types import Task, ToolCall

__all__ = [
    "SyntheticTaskGenerator",
    "ToolSuite",
    "builtin_suite",
    "reference_answer",
    "render_hermes_system_prompt",
    "tool_call_block",
]

_MAX_TRIES = 200
logger = logging.getLogger(__name__)


def tool_call_block(call: ToolCall | list[ToolCall], string_arguments: bool = False) -> str:
    """The hermes block of one call, ``<tool_call>\\n{json}\\n</tool_call>``, or of
    several parallel calls as one JSON list in one block (the paper's parallel format).
    ``string_arguments`` writes each ``arguments`` as a JSON *string* holding the object
    (OpenAI chat-completions logs store calls so), which METHOD's parser rejects
    (``arguments_not_dict``)."""
    calls = call if isinstance(call, list) else [call]
    objs = [
        {
            "name": c.name,
            "arguments": json.dumps(c.arguments, ensure_ascii=False)
            if string_arguments
            else c.arguments,
        }
        for c in calls
    ]
    body = json.dumps(objs if isinstance(call, list) else objs[0], ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


class SyntheticTaskGenerator:
    """Draws distinct synthetic :class:`~slca_lightning.types.Task` objects from a seed.

    Each task picks a kind (``irrelevant`` / ``parallel`` / ``multistep`` with the given
    fractions, ``single`` for the rest), a template of that kind among the chosen families,
    and its parameters. The task lists the tools of its family plus ``distractor_families``
    other families (so picking the right name matters). No two tasks of one generator share
    their gold calls (for ``irrelevant`` tasks: their question), so :meth:`splits` gives
    disjoint train and held-out sets. When a kind runs out of distinct tasks (small
    families, large ``n``) it is no longer drawn (one warning) and the other kinds fill in;
    when all have run out, it raises ``ValueError``. ``generate(n)`` is a prefix of ``generate(m)``, m > n.

    Args:
        seed: the random seed; equal seeds give equal tasks.
        families: tool families to use (default all: math, units, city, text, dates).
        irrelevant_fraction, parallel_fraction, multistep_fraction: kind probabilities
            (their sum at most 1).
        distractor_families: how many other families' tools each task also lists.
        suite: the tool suite (default :func:`builtin_suite`; the templates need its tools).
    """

    def __init__(
        self,
        seed: int = 0,
        families: list[str] | None = None,
        irrelevant_fraction: float = 0.15,
        parallel_fraction: float = 0.3,
        multistep_fraction: float = 0.2,
        distractor_families: int = 1,
        suite: ToolSuite | None = None,
    ):
        self.seed = seed
        self.suite = suite if suite is not None else builtin_suite()
        known = list(self.suite.families)
        self.families = list(families) if families is not None else known
        unknown = [f for f in self.families if f not in known]
        if unknown or not self.families:
            raise ValueError(f"unknown or no families {unknown}; known: {', '.join(known)}")
        fractions = (irrelevant_fraction, parallel_fraction, multistep_fraction)
        if any(not 0.0 <= f <= 1.0 for f in fractions) or sum(fractions) > 1.0 + 1e-9:
            raise ValueError(f"fractions must be in [0, 1] and sum to at most 1, got {fractions}")
        single = max(0.0, 1.0 - sum(fractions))
        self.weights = {
            "single": single,
            "parallel": parallel_fraction,
            "multistep": multistep_fraction,
            "irrelevant": irrelevant_fraction,
        }
        self.distractor_families = max(0, int(distractor_families))
        self._templates: dict[str, list[Template]] = {
            kind: [t for t in TEMPLATES if t.kind == kind and t.family in (None, *self.families)]
            for kind in KINDS
        }

    def _draw(self, rng: random.Random, kind: str, seen: set[str]):
        for _ in range(_MAX_TRIES):
            template = rng.choice(self._templates[kind])
            question, steps, answer = template.build(rng, self.suite)
            key = (
                question
                if not steps
                else json.dumps([[[c.name, c.arguments] for c in s] for s in steps], sort_keys=True)
            )
            if key not in seen:
                seen.add(key)
                return template, question, steps, answer
        return None

    def _task(self, rng: random.Random, i: int, seen: set[str], spent: set[str]) -> Task:
        kinds = [k for k in KINDS if self.weights[k] > 0 and k not in spent]
        drawn = None
        while kinds and drawn is None:
            kind = rng.choices(kinds, weights=[self.weights[k] for k in kinds])[0]
            drawn = self._draw(rng, kind, seen)
            if drawn is None:  # this kind ran out of distinct tasks: stop drawing it
                logger.warning("synthetic: no new %r task left after %d tasks", kind, i)
                spent.add(kind)
                kinds.remove(kind)
        if drawn is None:
            raise ValueError(
                f"could not draw a new distinct task after task {i} (families "
                f"{self.families}): ask for fewer tasks or allow more families"
            )
        template, question, steps, answer = drawn
        family = template.family or rng.choice(self.families)
        others = [f for f in self.families if f != family]
        shown = [family, *rng.sample(others, min(self.distractor_families, len(others)))]
        tools = self.suite.tools_of(shown)
        metadata: dict[str, Any] = {
            "source": "synthetic",
            "seed": self.seed,
            "index": i,
            "family": family,
            "template": template.name,
            "kind": kind,
            "tool_families": sorted(shown),
        }
        if answer is not None:
            metadata["answer"] = answer
        task = Task(
            task_id=f"syn-{self.seed}-{i}",
            messages=[
                {"role": "system", "content": render_hermes_system_prompt(tools)},
                {"role": "user", "content": question},
            ],
            tools=tools,
            allowed_tools=[t["function"]["name"] for t in tools],
            gold_calls=steps,
            question=question,
            subset="irrelevant" if kind == "irrelevant" else "tool_call",
            gold_format="nested",
            metadata=metadata,
        )
        # the gold final reply (what a reference-based judge compares a reply with)
        metadata["reference_reply"] = reference_answer(task, self.suite)[-1]["content"]
        return task

    def generate(self, n: int) -> list[Task]:
        """``n`` distinct tasks, ids ``syn-{seed}-{i}`` for i = 0 … n-1."""
        rng = random.Random(self.seed)
        seen: set[str] = set()
        spent: set[str] = set()
        return [self._task(rng, i, seen, spent) for i in range(n)]

    def splits(self, n_train: int, n_heldout: int) -> tuple[list[Task], list[Task]]:
        """Disjoint ``(train, heldout)``: the first ``n_train`` tasks, then the next ones."""
        tasks = self.generate(n_train + n_heldout)
        return tasks[:n_train], tasks[n_train:]


def reference_answer(
    task: Task,
    suite: ToolSuite | None = None,
    parallel: Literal["list", "blocks"] = "list",
    string_arguments: bool = False,
) -> list[dict[str, Any]]:
    """A demonstration transcript of ``task``: the chat messages after its prompt.

    For each gold step, an assistant turn with its calls, then one ``{"role": "tool"}``
    message per call with the real result as JSON; last, an assistant reply stating the
    results. A step of one call is one ``<tool_call>`` block holding a JSON object; a step
    of parallel calls is, with ``parallel="list"`` (the paper's format, the default), one
    block holding a JSON list of them, with ``"blocks"`` one block per call in the same
    turn (how e.g. Qwen2.5's chat template writes parallel calls). ``string_arguments``
    writes every call's arguments as a JSON string (:func:`tool_call_block`): a demonstration
    from a source whose calls the agent loop rejects. A task without gold calls gets a
    single assistant reply (``metadata["answer"]`` when set).

    Raises:
        ValueError: a gold call is not a tool of ``suite`` or its arguments are invalid.
    """
    suite = suite if suite is not None else builtin_suite()
    if not task.needs_tools:
        reply = task.metadata.get("answer") or (
            "None of the available tools is needed or able to help with this request."
        )
        return [{"role": "assistant", "content": reply}]
    messages: list[dict[str, Any]] = []
    clauses: list[str] = []
    for step in task.gold_calls:
        if not step:
            continue
        if len(step) > 1 and parallel == "list":
            content = tool_call_block(list(step), string_arguments)
        else:
            content = "\n".join(tool_call_block(c, string_arguments) for c in step)
        messages.append({"role": "assistant", "content": content})
        for call in step:
            result = suite.run(call)
            messages.append({"role": "tool", "content": json.dumps(result, ensure_ascii=False)})
            clauses.append(suite.describe(call, result))
    summary = "Here is what I found: " + "; ".join(clauses) + "."
    messages.append({"role": "assistant", "content": summary})
    return messages
