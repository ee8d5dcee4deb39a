"""BFCL evaluation: the package's own data and checker, prompts through the chat template.

:class:`BFCLEvaluator` loads the selected single-turn categories from ``bfcl-eval``
(:mod:`~slca_lightning.eval.bfcl.data`), renders each entry with the model's chat template
and the entry's function docs as tools, generates one greedy reply per entry (``HFEngine``:
one assistant turn, nothing executed, no stop string, so parallel calls can follow each
other), reads the calls of each reply through the model's tool-call format (``tool_format``:
the run's ``data.tool_format``; hermes tags by default) and scores them with BFCL's AST /
relevance checkers (:mod:`~slca_lightning.eval.bfcl.checker`). Multi-turn categories (by name or the
``multi_turn`` group; not in ``all``) run step by step against BFCL's executable backends
and its multi-turn checker (:mod:`~slca_lightning.eval.bfcl.multi_turn`). The report holds
per-category accuracy and BFCL's summaries. While it runs, progress (entries done of the
total, time elapsed and left) goes to stderr (:func:`~slca_lightning.eval.progress.progress`).

Standalone::

    python -m slca_lightning.eval.bfcl --model tiny --categories simple_python,irrelevance \\
        --limit 3 --out report.md
    python -m slca_lightning.eval.bfcl --model ./llama-3.2-1b --tool-format json --limit 20

``--model`` takes ``tiny`` / ``tiny-sft`` / a local HF folder (as ``load_policy``), or
``oracle``: no model, the possible answers themselves are the replies (checks the decode and
checker path; every AST category scores ~100%; multi-turn replays its ground truth).
"""

from __future__ import annotations

import argparse
import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from slca_lightning.calls.formats import HermesFormat, ToolCallFormat
from slca_lightning.data.prompt import render_hermes_system_prompt
from slca_lightning.eval.bfcl.checker import EntryScore, bfcl_summary, score_entry
from slca_lightning.eval.bfcl.data import (
    AST_CATEGORIES,
    CATEGORIES,
    MULTI_TURN_CATEGORIES,
    RELEVANCE_CATEGORIES,
    BFCLEntry,
    load_category,
)
from slca_lightning.eval.progress import Update, progress
from slca_lightning.eval.tool_format import format_name, resolve_tool_format

__all__ = ["BFCLEvaluator", "BFCLReport", "main", "resolve_categories"]

log = logging.getLogger(__name__)

_GROUPS = {
    "all": CATEGORIES,
    "ast": AST_CATEGORIES,
    "relevance": RELEVANCE_CATEGORIES,
    "simple": AST_CATEGORIES[:3],
    "non_live": (*AST_CATEGORIES[:6], "irrelevance"),
    "live": (*AST_CATEGORIES[6:], "live_irrelevance", "live_relevance"),
    "multi_turn": MULTI_TURN_CATEGORIES,
}
_ALL = CATEGORIES + MULTI_TURN_CATEGORIES


def resolve_categories(names: str | Sequence[str]) -> list[str]:
    """Category names and groups (``all`` = every single-turn category, ``ast``,
    ``relevance``, ``simple``, ``non_live``, ``live``, ``multi_turn``; commas allowed) →
    distinct categories in BFCL's order.

    Raises:
        ValueError: a name that is neither a category nor a group.
    """
    if isinstance(names, str):
        names = [names]
    wanted: set[str] = set()
    for chunk in names:
        for name in (n.strip() for n in chunk.split(",")):
            if not name:
                continue
            if name in _GROUPS:
                wanted.update(_GROUPS[name])
            elif name in _ALL:
                wanted.add(name)
            else:
                raise ValueError(
                    f"unknown BFCL category {name!r}: expected one of {list(_ALL)} "
                    f"or a group {list(_GROUPS)}"
                )
    return [c for c in _ALL if c in wanted]


@dataclass
class BFCLReport:
    """Per-entry verdicts with per-category accuracy and BFCL's summaries.

    Attributes:
        scores: one :class:`EntryScore` per evaluated entry.
        accuracy: category → fraction of its entries the checker accepts.
        counts: category → entries evaluated.
        summary: BFCL's aggregates (``simple``, ``non_live_ast``, ``live_ast``,
            ``irrelevance_mean``, ``overall``; see :func:`bfcl_summary`).
        stats: counters (e.g. ``tool_prompt_fallback``, ``prompt_too_long``).
    """

    scores: list[EntryScore]
    accuracy: dict[str, float] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, float] = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    @classmethod
    def from_scores(cls, scores: list[EntryScore], stats: dict[str, int] | None = None):
        counts: Counter = Counter(s.category for s in scores)
        right: Counter = Counter(s.category for s in scores if s.valid)
        order = [c for c in _ALL if c in counts]
        accuracy = {c: right[c] / counts[c] for c in order}
        counts_d = {c: counts[c] for c in order}
        return cls(scores, accuracy, counts_d, bfcl_summary(accuracy, counts_d), dict(stats or {}))

    def metrics(self) -> dict[str, float]:
        """Flat scalars: one per category, one per summary."""
        return {**self.accuracy, **self.summary}

    def markdown(self) -> str:
        """The report as a Markdown table (categories, then summaries)."""
        lines = ["| category | entries | correct | accuracy |", "|---|---|---|---|"]
        for cat, acc in self.accuracy.items():
            n = self.counts[cat]
            lines.append(f"| {cat} | {n} | {round(acc * n)} | {acc:.3f} |")
        for name, value in self.summary.items():
            lines.append(f"| **{name}** | | | {value:.3f} |")
        errors = Counter(s.error_type for s in self.scores if not s.valid)
        if errors:
            lines += ["", "| error type | entries |", "|---|---|"]
            lines += [f"| {k} | {v} |" for k, v in errors.most_common()]
        return "\n".join(lines)


class BFCLEvaluator:
    """Greedy BFCL single-turn accuracy of a causal LM, scored by BFCL's own checkers.

    Args:
        categories: categories or groups (see :func:`resolve_categories`).
        limit: entries per category (a seeded sample; None: all).
        seed: seed of that sample.
        max_new_tokens: generation cap of the single reply.
        batch_size: prompts per ``generate`` call (prompts are batched by length).
        tool_prompt: ``"template"``: ``apply_chat_template(messages, tools=...)``; when the
            template ignores ``tools`` (the rendered prompt lacks the first tool's name) the
            hermes system prompt is used instead, counted as ``tool_prompt_fallback``.
            ``"system"``: always the hermes system prompt the policy is trained with
            (:func:`~slca_lightning.data.prompt.render_hermes_system_prompt`).
        max_prompt_tokens: entries whose prompt is longer are not generated and count as
            failures (``prompt_too_long``); None: no cap.
        chat_template_kwargs: extra arguments for ``apply_chat_template`` (e.g.
            ``{"enable_thinking": False}``).
        tool_format: how the model writes its calls: a
            :class:`~slca_lightning.calls.formats.ToolCallFormat` or what
            :func:`~slca_lightning.eval.tool_format.resolve_tool_format` takes (``"json"``,
            ``"llama3_json"``, a class path …); None: hermes tags. Every reply (single- and
            multi-turn) is read through it. The prompt is not changed by it: the chat
            template shows the tools as the model family expects them.
        progress: report entries done, time elapsed and left on stderr while running.
    """

    def __init__(
        self,
        categories: str | Sequence[str] = "all",
        limit: int | None = None,
        seed: int = 0,
        max_new_tokens: int = 512,
        batch_size: int = 8,
        tool_prompt: Literal["template", "system"] = "template",
        max_prompt_tokens: int | None = None,
        chat_template_kwargs: dict[str, Any] | None = None,
        tool_format: ToolCallFormat | str | dict[str, Any] | None = None,
        progress: bool = True,
    ) -> None:
        if tool_prompt not in ("template", "system"):
            raise ValueError(f"tool_prompt must be 'template' or 'system', got {tool_prompt!r}")
        self.categories = resolve_categories(categories)
        if not self.categories:
            raise ValueError("no BFCL category selected")
        self.limit, self.seed = limit, seed
        self.max_new_tokens, self.batch_size = max_new_tokens, batch_size
        self.tool_prompt = tool_prompt
        self.max_prompt_tokens = max_prompt_tokens
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.tool_format = resolve_tool_format(tool_format)
        self.progress = progress
        self.stats: Counter = Counter()
        self._warned_prompt = False
        self._entries: list[BFCLEntry] | None = None
        self._mt_entries: list | None = None

    def entries(self) -> list[BFCLEntry]:
        """The selected entries (loaded once)."""
        if self._entries is None:
            self._entries = [
                e
                for c in self.categories
                if c in CATEGORIES
                for e in load_category(c, self.limit, self.seed)
            ]
        return self._entries

    def multi_turn_entries(self) -> list:
        """The selected multi-turn entries (loaded once)."""
        from slca_lightning.eval.bfcl.multi_turn import load_multi_turn

        if self._mt_entries is None:
            cats = [c for c in self.categories if c in MULTI_TURN_CATEGORIES]
            self._mt_entries = [e for c in cats for e in load_multi_turn(c, self.limit, self.seed)]
        return self._mt_entries

    # -- prompts ---------------------------------------------------------------------------
    def prompt_text(self, entry: BFCLEntry, tokenizer: Any) -> str:
        """The rendered prompt of ``entry``, ending with the assistant header."""
        return self.render(entry.messages, entry.tools, tokenizer)

    def render(self, messages: list[dict], tools: list[dict], tokenizer: Any) -> str:
        """``messages`` with ``tools`` through the chat template (see ``tool_prompt``)."""
        kw = dict(tokenize=False, add_generation_prompt=True, **self.chat_template_kwargs)
        if self.tool_prompt == "template":
            text = tokenizer.apply_chat_template(messages, tools=tools, **kw)
            first = tools[0]["function"]["name"] if tools else None
            if first is None or first in text:
                return text
            self.stats["tool_prompt_fallback"] += 1
            if self.stats["tool_prompt_fallback"] == 1:
                log.warning("chat template ignores tools=; using the hermes system prompt")
        if not isinstance(self.tool_format, HermesFormat) and not self._warned_prompt:
            self._warned_prompt = True
            log.warning(
                "BFCL: the hermes system prompt asks for <tool_call> tags; replies are read "
                "with %s (no format renders its own prompt): check that it reads such tags",
                format_name(self.tool_format),
            )
        msgs = [dict(m) for m in messages]
        system = msgs.pop(0).get("content") if msgs and msgs[0].get("role") == "system" else None
        content = render_hermes_system_prompt(tools, system)
        return tokenizer.apply_chat_template([{"role": "system", "content": content}, *msgs], **kw)

    # -- generation and scoring ------------------------------------------------------------
    def generate(
        self,
        entries: list[BFCLEntry],
        model: Any,
        tokenizer: Any,
        update: Update | None = None,
    ) -> list[str | None]:
        """One greedy reply per entry (None where the prompt exceeds ``max_prompt_tokens``);
        ``update(n)`` is told each batch's entries as the batch finishes."""
        from slca_lightning.rollout.engine import SamplingConfig
        from slca_lightning.rollout.hf_engine import HFEngine

        ids = [
            tokenizer.encode(self.prompt_text(e, tokenizer), add_special_tokens=False)
            for e in entries
        ]
        keep = [
            i
            for i, p in enumerate(ids)
            if self.max_prompt_tokens is None or len(p) <= self.max_prompt_tokens
        ]
        self.stats["prompt_too_long"] += len(ids) - len(keep)
        if update is not None:
            update(len(ids) - len(keep))
        # the engine's own order (its loop sorts the prompts and cuts batches of
        # max_batch_size): batch by batch here gives the same batches, with progress between
        keep.sort(key=lambda i: ids[i])
        engine = HFEngine(model, tokenizer, max_batch_size=self.batch_size)
        sampling = SamplingConfig(
            max_new_tokens=self.max_new_tokens, temperature=0.0, stop_strings=[], seed=0
        )
        out: list[str | None] = [None] * len(entries)
        step = max(1, int(self.batch_size))
        for start in range(0, len(keep), step):
            chunk = keep[start : start + step]
            gens = engine.generate([ids[i] for i in chunk], sampling)
            for i, gen in zip(chunk, gens, strict=True):
                out[i] = tokenizer.decode(gen.token_ids, skip_special_tokens=False)
            if update is not None:
                update(len(chunk))
        return out

    def score(self, entries: list[BFCLEntry], outputs: Sequence[str | None]) -> BFCLReport:
        """Score ``outputs`` (None: not generated, a failure) against ``entries``, reading
        their calls through ``tool_format``."""
        if len(outputs) != len(entries):
            raise ValueError(f"{len(outputs)} outputs for {len(entries)} BFCL entries")
        scores = [
            score_entry(e, o, self.tool_format)
            if o is not None
            else EntryScore(e.id, e.category, False, "prompt_too_long", None, [])
            for e, o in zip(entries, outputs, strict=True)
        ]
        return BFCLReport.from_scores(scores, dict(self.stats))

    def run_multi_turn(
        self, model: Any, tokenizer: Any, update: Update | None = None
    ) -> list[EntryScore]:
        """Drive and score the selected multi-turn entries (one greedy reply per step);
        ``update(1)`` is told each entry once scored."""
        from slca_lightning.eval.bfcl.multi_turn import run_multi_turn, score_multi_turn
        from slca_lightning.rollout.engine import SamplingConfig
        from slca_lightning.rollout.hf_engine import HFEngine

        engine = HFEngine(model, tokenizer, max_batch_size=1)
        sampling = SamplingConfig(self.max_new_tokens, 0.0, stop_strings=[], seed=0)

        def reply(messages: list[dict], tools: list[dict]) -> str:
            ids = tokenizer.encode(
                self.render(messages, tools, tokenizer), add_special_tokens=False
            )
            if self.max_prompt_tokens is not None and len(ids) > self.max_prompt_tokens:
                self.stats["prompt_too_long"] += 1
                return ""  # ends the turn without a call
            (gen,) = engine.generate([ids], sampling)
            return tokenizer.decode(gen.token_ids, skip_special_tokens=False)

        out = []
        for e in self.multi_turn_entries():
            steps = run_multi_turn(e, reply, tool_format=self.tool_format)
            out.append(score_multi_turn(e, steps))
            if update is not None:
                update(1)
        return out

    def run(self, model: Any, tokenizer: Any) -> BFCLReport:
        """Generate and score every selected entry (progress on stderr, see ``progress``)."""
        self.stats.clear()
        entries = self.entries()
        multi_entries = self.multi_turn_entries()
        total = len(entries) + len(multi_entries)
        with progress("bfcl", total, enabled=self.progress) as update:
            outputs = self.generate(entries, model, tokenizer, update)
            single = self.score(entries, outputs).scores
            multi = self.run_multi_turn(model, tokenizer, update) if multi_entries else []
        return BFCLReport.from_scores(single + multi, dict(self.stats))


def main(argv: Sequence[str] | None = None) -> BFCLReport:
    """``python -m slca_lightning.eval.bfcl``: evaluate a model and write the table."""
    p = argparse.ArgumentParser(
        prog="python -m slca_lightning.eval.bfcl",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--model", required=True, help="tiny | tiny-sft | HF folder | oracle")
    p.add_argument("--categories", nargs="+", default=["all"], help="names or groups")
    p.add_argument("--limit", type=int, default=None, help="entries per category")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=512)
    p.add_argument("--batch-size", type=int, default=8)
    p.add_argument("--tool-prompt", choices=["template", "system"], default="template")
    p.add_argument("--max-prompt-tokens", type=int, default=None)
    p.add_argument(
        "--tool-format",
        default=None,
        help="how the model writes calls: hermes (default) | json | llama3_json | mistral | "
        "template:<name> | a ToolCallFormat class path",
    )
    p.add_argument("--dtype", default="float32")
    p.add_argument("--out", default=None, help="write the Markdown table here")
    args = p.parse_args(argv)
    evaluator = BFCLEvaluator(
        args.categories,
        limit=args.limit,
        seed=args.seed,
        max_new_tokens=args.max_new_tokens,
        batch_size=args.batch_size,
        tool_prompt=args.tool_prompt,
        max_prompt_tokens=args.max_prompt_tokens,
        tool_format=args.tool_format,
    )
    if args.model == "oracle":
        from slca_lightning.eval.bfcl.answers import oracle_outputs
        from slca_lightning.eval.bfcl.multi_turn import ground_truth_steps, score_multi_turn

        entries = evaluator.entries()
        single = evaluator.score(entries, oracle_outputs(entries)).scores
        mt = [score_multi_turn(e, ground_truth_steps(e)) for e in evaluator.multi_turn_entries()]
        report = BFCLReport.from_scores(single + mt)
    else:
        from slca_lightning.models.policy import load_policy

        model, tokenizer = load_policy(args.model, dtype=args.dtype)
        report = evaluator.run(model, tokenizer)
    table = report.markdown()
    print(table)
    if args.out:
        with open(args.out, "w") as f:
            f.write(f"# BFCL ({args.model})\n\n{table}\n")
    return report


if __name__ == "__main__":
    main()
