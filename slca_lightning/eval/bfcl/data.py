"""BFCL v4 single-turn data, read from the installed ``bfcl-eval`` package.

Each entry keeps what the official pipeline uses at each stage:

* ``functions``: the function docs *with* BFCL's language hints (what the model is shown,
  as ``bfcl_eval.utils.load_dataset_entry(..., include_language_specific_hint=True)``
  gives them at generation time);
* ``checker_functions``: the raw docs (no hints), which is what BFCL's eval runner hands to
  ``ast_checker``;
* ``ground_truth``: the possible answers, ``[{func_name: {arg: [allowed values]}}]``
  (None for the relevance / irrelevance categories, which have none).

:func:`to_tools` turns BFCL's docs (``"dict"``, ``"float"``, ``"tuple"``, Java/JS type
names …) into OpenAI/JSON-schema tools the way BFCL's ``_cast_to_openai_type`` does for
function-calling models: types mapped through ``GORILLA_TO_OPENAPI`` (unknown or missing →
``"string"``), ``"float"`` also gets ``format: float`` and a sentence in the description,
nested ``properties`` / ``items`` converted recursively, and the top level typed
``"object"``. Function names keep their dots (hermes names are free strings, as in BFCL's
own Qwen FC handler), so the checker runs with ``underscore_to_dot = False``.
"""

from __future__ import annotations

import copy
import random
from dataclasses import dataclass
from typing import Any

__all__ = [
    "AST_CATEGORIES",
    "CATEGORIES",
    "MULTI_TURN_CATEGORIES",
    "RELEVANCE_CATEGORIES",
    "BFCLEntry",
    "language_of",
    "load_category",
    "to_tools",
]

#: Categories scored by the AST checker against possible answers.
AST_CATEGORIES = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
)
#: Scored by whether the output decodes to a call (irrelevance: must not; relevance: must).
RELEVANCE_CATEGORIES = ("irrelevance", "live_irrelevance", "live_relevance")
CATEGORIES = AST_CATEGORIES + RELEVANCE_CATEGORIES
#: Multi-turn categories (:mod:`~slca_lightning.eval.bfcl.multi_turn`; not in ``CATEGORIES``).
MULTI_TURN_CATEGORIES = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)


@dataclass
class BFCLEntry:
    """One BFCL test entry.

    Attributes:
        id: BFCL's id, e.g. ``"simple_python_0"``.
        category: the test category.
        messages: the chat turns of the (single) user turn, system messages included.
        functions: docs shown to the model (with BFCL's language hints).
        checker_functions: raw docs given to ``ast_checker``.
        ground_truth: possible answers, or None for (ir)relevance categories.
    """

    id: str
    category: str
    messages: list[dict[str, Any]]
    functions: list[dict[str, Any]]
    checker_functions: list[dict[str, Any]]
    ground_truth: list[dict[str, Any]] | None

    @property
    def language(self) -> str:
        return language_of(self.category)

    @property
    def tools(self) -> list[dict[str, Any]]:
        """``functions`` as OpenAI function tools (see :func:`to_tools`)."""
        return to_tools(self.functions)


def language_of(category: str) -> str:
    """``"java"``, ``"javascript"`` or ``"python"``, as BFCL's ``is_java`` / ``is_js`` decide."""
    if "javascript" in category:
        return "javascript"
    if "java" in category:
        return "java"
    return "python"


def _openapi_type(name: Any) -> str:
    from bfcl_eval.constants.type_mappings import GORILLA_TO_OPENAPI

    return GORILLA_TO_OPENAPI.get(name, "string") if isinstance(name, str) else "string"


def _convert_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """One parameter schema, BFCL types → JSON-schema types (in place on a copy)."""
    raw = schema.get("type")
    schema["type"] = _openapi_type(raw) if raw is not None else "string"
    if raw == "float":
        schema["format"] = "float"
        schema["description"] = schema.get("description", "") + " This is a float type value."
    if schema["type"] in ("array", "object"):
        if isinstance(schema.get("properties"), dict):
            schema["properties"] = {
                k: _convert_schema(dict(v)) for k, v in schema["properties"].items()
            }
        elif isinstance(schema.get("items"), dict):
            schema["items"] = _convert_schema(dict(schema["items"]))
    return schema


def to_tools(functions: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """BFCL function docs → ``[{"type": "function", "function": {...}}]`` JSON-schema tools."""
    tools = []
    for doc in copy.deepcopy(functions):
        params = doc.get("parameters") or {}
        params["type"] = "object"
        params["properties"] = {
            k: _convert_schema(dict(v)) for k, v in (params.get("properties") or {}).items()
        }
        doc["parameters"] = params
        tools.append({"type": "function", "function": doc})
    return tools


def _messages(question: Any) -> list[dict[str, Any]]:
    # Single-turn entries hold one turn: ``question = [[msg, ...]]``.
    turn = question[0] if question and isinstance(question[0], list) else question
    return [dict(m) for m in turn]


def load_category(
    category: str, limit: int | None = None, seed: int = 0, ids: list[str] | None = None
) -> list[BFCLEntry]:
    """The entries of one category, in BFCL's order.

    Args:
        category: one of :data:`CATEGORIES`.
        limit: keep a seeded random sample of this many entries (None: all).
        seed: seed of that sample (the same seed always gives the same entries).
        ids: keep only these ids (applied before ``limit``).

    Raises:
        ValueError: unknown category (multi-turn and agentic ones are not single-turn).
    """
    if category not in CATEGORIES:
        raise ValueError(
            f"unknown BFCL category {category!r}; single-turn categories are {list(CATEGORIES)}"
        )
    from bfcl_eval.utils import load_dataset_entry, load_ground_truth_entry

    shown = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=True)
    raw = load_dataset_entry(category, include_prereq=False, include_language_specific_hint=False)
    truth = load_ground_truth_entry(category) if category in AST_CATEGORIES else None
    if truth is not None:
        by_id = {t["id"]: t["ground_truth"] for t in truth}
        missing = [e["id"] for e in shown if e["id"] not in by_id]
        if missing:
            raise ValueError(f"BFCL {category}: no possible answer for {missing[:5]}")
    entries = [
        BFCLEntry(
            id=s["id"],
            category=category,
            messages=_messages(s["question"]),
            functions=s["function"],
            checker_functions=r["function"],
            ground_truth=None if truth is None else by_id[s["id"]],
        )
        for s, r in zip(shown, raw, strict=True)
    ]
    if ids is not None:
        wanted = set(ids)
        entries = [e for e in entries if e.id in wanted]
    if limit is not None and limit < len(entries):
        keep = sorted(random.Random(f"{seed}:{category}").sample(range(len(entries)), limit))
        entries = [entries[i] for i in keep]
    return entries
