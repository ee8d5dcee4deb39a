"""Scoring model output with BFCL's official checkers.

* :func:`decode_hermes` turns the model's hermes ``<tool_call>`` text into the checker's
  form ``[{func_name: {arg: value}}]``, with the project's parser
  (:func:`~slca_lightning.calls.parsing.parse_tool_calls`, reasoning blocks stripped). Like
  BFCL's Qwen FC handler it keeps the calls of every well-formed block and drops blocks that
  are not valid JSON calls; text without any block decodes to ``[]``.
  :func:`decode_calls` does the same for a model that writes its calls in another format
  (:class:`~slca_lightning.calls.formats.ToolCallFormat`, the run's ``data.tool_format``):
  the reply is first rewritten as hermes text by the format (HermesFormat: unchanged).
* :func:`score_entry` runs ``bfcl_eval``'s ``ast_checker`` on the AST categories and, for
  the (ir)relevance categories, BFCL's rule: the output "contains a call" when it decodes to
  a non-empty call list (``is_empty_output`` false); irrelevance is correct without one,
  relevance with one. A checker exception is a counted, logged failure, never a crash.
* :func:`bfcl_summary` aggregates per-category accuracies as BFCL's leaderboard does.

``ast_checker`` imports ``bfcl_eval.constants.model_config``, which imports every API SDK;
:func:`install_model_config_stub` puts a small module in ``sys.modules`` first. The checker
reads only ``MODEL_CONFIG_MAPPING[name].underscore_to_dot`` (whether to compare dotted names
as underscores); names are shown to the model with their dots, so it is False here.
"""

from __future__ import annotations

import logging
import sys
import types
from dataclasses import dataclass
from typing import Any

from slca_lightning.calls.formats import ToolCallFormat
from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.eval.bfcl.data import AST_CATEGORIES, MULTI_TURN_CATEGORIES, BFCLEntry

__all__ = [
    "CHECKER_MODEL_NAME",
    "EntryScore",
    "bfcl_summary",
    "decode_calls",
    "decode_hermes",
    "install_model_config_stub",
    "score_entry",
]

log = logging.getLogger(__name__)

#: The model name handed to the checker (its key in the stubbed config mapping).
CHECKER_MODEL_NAME = "slca-hermes"
_STUB = "bfcl_eval.constants.model_config"


class _Config:
    """The one model-config field the AST checker reads."""

    underscore_to_dot = False


class _ConfigMapping(dict):
    """``MODEL_CONFIG_MAPPING`` stand-in: every model name maps to :class:`_Config`."""

    def __missing__(self, key: str) -> _Config:
        return _Config()


def install_model_config_stub() -> None:
    """Make ``bfcl_eval.constants.model_config`` importable without the API SDKs.

    A real, already imported module is left alone (our model name is added to its mapping).
    """
    module = sys.modules.get(_STUB)
    if module is None:
        module = types.ModuleType(_STUB)
        module.__doc__ = "Stub installed by slca_lightning.eval.bfcl.checker (AST checker only)."
        module.MODEL_CONFIG_MAPPING = _ConfigMapping()
        sys.modules[_STUB] = module
    else:
        module.MODEL_CONFIG_MAPPING.setdefault(CHECKER_MODEL_NAME, _Config())


def _checker():
    install_model_config_stub()
    from bfcl_eval.constants.enums import Language
    from bfcl_eval.eval_checker.ast_eval.ast_checker import ast_checker

    return ast_checker, Language


def decode_hermes(text: str) -> list[dict[str, dict[str, Any]]]:
    """Hermes ``<tool_call>`` text → ``[{name: arguments}, ...]`` (``[]`` when none)."""
    parsed = parse_tool_calls(text)
    return [{call.name: dict(call.arguments)} for call in parsed.calls]


def decode_calls(
    text: str, tool_format: ToolCallFormat | None = None
) -> list[dict[str, dict[str, Any]]]:
    """A reply in ``tool_format`` (None: hermes) → ``[{name: arguments}, ...]``: the format
    rewrites its calls as hermes blocks, then :func:`decode_hermes` reads them."""
    if tool_format is not None:
        text = tool_format.canonical(text).text
    return decode_hermes(text)


@dataclass
class EntryScore:
    """The verdict on one entry.

    Attributes:
        id: the BFCL entry id.
        category: its category.
        valid: the checker accepts the output.
        error_type: BFCL's error type (e.g. ``"simple_function_checker:wrong_func_name"``,
            ``"irrelevance_error:decoder_success"``), ``"checker_exception"``,
            ``"tool_format_exception"`` (the format raised on the reply) or None.
        error: the checker's first error message, or None.
        decoded: the decoded calls handed to the checker.
    """

    id: str
    category: str
    valid: bool
    error_type: str | None
    error: str | None
    decoded: list[dict[str, Any]]


def _first_error(result: dict[str, Any]) -> str | None:
    err = result.get("error")
    if isinstance(err, list):
        return str(err[0]) if err else None
    return None if err is None else str(err)


def score_entry(
    entry: BFCLEntry, text: str, tool_format: ToolCallFormat | None = None
) -> EntryScore:
    """Score one model output for ``entry`` with BFCL's rules; never raises on ``text``.

    ``tool_format``: how the model writes its calls (None: hermes tags), see
    :func:`decode_calls`."""
    from bfcl_eval.utils import is_empty_output, is_function_calling_format_output

    try:
        decoded = decode_calls(text, tool_format)
    except Exception as exc:  # a format tripping on odd text: a failure, not a crash
        log.warning("tool format %r raised on %s: %r", tool_format, entry.id, exc)
        return EntryScore(entry.id, entry.category, False, "tool_format_exception", repr(exc), [])
    if entry.category not in AST_CATEGORIES:
        has_call = not is_empty_output(decoded)
        if "irrelevance" in entry.category:
            ok, why = not has_call, "irrelevance_error:decoder_success"
        else:
            ok, why = has_call, "relevance_error:decoder_failed"
        return EntryScore(entry.id, entry.category, ok, None if ok else why, None, decoded)
    if not is_function_calling_format_output(decoded):  # cannot happen with our decoder
        return EntryScore(
            entry.id, entry.category, False, "ast_decoder:decoder_wrong_output_format", None, []
        )
    ast_checker, language = _checker()
    lang = {"python": language.PYTHON, "java": language.JAVA, "javascript": language.JAVASCRIPT}
    try:
        result = ast_checker(
            entry.checker_functions,
            decoded,
            entry.ground_truth,
            lang[entry.language],
            entry.category,
            CHECKER_MODEL_NAME,
        )
    except Exception as exc:  # the checker can trip on odd values; a failure, not a crash
        log.warning("BFCL checker raised on %s: %r", entry.id, exc)
        return EntryScore(entry.id, entry.category, False, "checker_exception", repr(exc), decoded)
    ok = bool(result.get("valid"))
    return EntryScore(
        entry.id,
        entry.category,
        ok,
        None if ok else result.get("error_type"),
        None if ok else _first_error(result),
        decoded,
    )


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def bfcl_summary(
    accuracy: dict[str, float], counts: dict[str, int] | None = None
) -> dict[str, float]:
    """BFCL's leaderboard aggregates over the categories present in ``accuracy``.

    * ``simple``: unweighted mean of simple_python / simple_java / simple_javascript;
    * ``non_live_ast``: unweighted mean of simple, multiple, parallel, parallel_multiple;
    * ``live_ast``: mean of the live AST categories weighted by entry count (BFCL weights
      these by count);
    * ``irrelevance_mean``: unweighted mean of irrelevance and live_irrelevance;
    * ``multi_turn``: unweighted mean of the multi-turn categories;
    * ``overall``: unweighted mean of those summaries. BFCL's own total weights non-live,
      live and irrelevance 10 each, multi-turn 30 and agentic 40 (not evaluated here); with
      single-turn summaries only, the two agree.

    BFCL counts a missing category as 0 inside a summary; here a summary only uses the
    categories that were run (a partial run stays readable), and a summary with none of its
    categories is left out.
    """
    counts = counts or {}
    out: dict[str, float] = {}
    simple = _mean([accuracy[c] for c in AST_CATEGORIES[:3] if c in accuracy])
    if simple is not None:
        out["simple"] = simple
    parts = [simple] + [accuracy.get(c) for c in ("multiple", "parallel", "parallel_multiple")]
    non_live = _mean([p for p in parts if p is not None])
    live_cats = [c for c in AST_CATEGORIES if c.startswith("live_") and c in accuracy]
    n_live = sum(counts.get(c, 1) for c in live_cats)
    live = sum(accuracy[c] * counts.get(c, 1) for c in live_cats) / n_live if n_live else None
    irr = _mean([accuracy[c] for c in ("irrelevance", "live_irrelevance") if c in accuracy])
    multi = _mean([accuracy[c] for c in MULTI_TURN_CATEGORIES if c in accuracy])
    parts = {"non_live_ast": non_live, "live_ast": live, "irrelevance_mean": irr}
    parts["multi_turn"] = multi
    out.update({k: v for k, v in parts.items() if v is not None})
    overall = _mean([v for v in parts.values() if v is not None])
    if overall is not None:
        out["overall"] = overall
    return out
