"""BFCL possible answers rendered as hermes model output (an oracle "model").

:func:`render_answer` writes one possible answer of an entry as the text a perfect
hermes model would produce: one ``<tool_call>`` block per call, each argument set to the
first allowed value; an optional argument that may be left out (``""`` among its allowed
values) is left out.
Feeding this text through :func:`~slca_lightning.eval.bfcl.checker.score_entry` checks the
whole decode → checker path end to end; feeding another entry's answer must fail.

Python values are written as JSON. Java and JavaScript arguments are strings in BFCL (the
model is told so by the language hints), so values are written as the source literals that
BFCL's type converters parse back: ``5L`` for a Java long, ``1.5f`` for a float,
``new int[]{1, 2}``, ``new ArrayList<>(Arrays.asList(1, 2))``, ``new HashMap<String,
Object>() {{ put("k", 1); }}``, ``[1, 2]`` / ``{k: v}`` / ``5n`` in JavaScript.
"""

from __future__ import annotations

import json
from typing import Any

from slca_lightning.eval.bfcl.data import BFCLEntry

__all__ = ["NO_CALL", "oracle_outputs", "render_answer", "shuffled_outputs"]

_MISSING = object()
#: The oracle's reply when no call is wanted.
NO_CALL = "I cannot help with that using the functions provided."


def _any_call(entry: BFCLEntry) -> str:
    name = entry.checker_functions[0]["name"] if entry.checker_functions else "unknown"
    return f"<tool_call>\n{json.dumps({'name': name, 'arguments': {}})}\n</tool_call>"


def _pick(options: Any, required: bool = False) -> Any:
    """The value to write: omitted (``_MISSING``) when ``""`` ("may be left out") is allowed
    and the argument is not required, else the first allowed value that is not ``""``."""
    if not isinstance(options, list):
        return options
    if "" in options and not required:
        return _MISSING
    for value in options:
        if value != "":
            return value
    return _MISSING


def _pick_dict(option: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for key, options in option.items():
        value = _pick(options)
        if value is not _MISSING:
            out[key] = value
    return out


def _python_value(schema: dict[str, Any], value: Any) -> Any:
    kind = schema.get("type")
    if kind == "dict" and isinstance(value, dict):
        return _pick_dict(value)
    item = (schema.get("items") or {}).get("type")
    if kind == "array" and item == "dict" and isinstance(value, list):
        return [_pick_dict(v) if isinstance(v, dict) else v for v in value]
    return value


def _java_scalar(kind: str | None, value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}L" if kind == "long" else str(value)
    if isinstance(value, float):
        return f"{value}f" if kind == "float" else repr(value)
    return json.dumps(value)


def _java_literal(schema: dict[str, Any], value: Any) -> str:
    kind = schema.get("type")
    item = (schema.get("items") or {}).get("type")
    if kind == "Array" and isinstance(value, list):
        return f"new {item or 'Object'}[]{{{', '.join(_java_scalar(item, v) for v in value)}}}"
    if kind == "ArrayList" and isinstance(value, list):
        quote = item in ("String", "char")
        parts = [f'"{v}"' if quote else _java_scalar(item, v) for v in value]
        return f"new ArrayList<>(Arrays.asList({', '.join(parts)}))"
    if kind == "HashMap" and isinstance(value, dict):
        puts = " ".join(
            f'put("{k}", {json.dumps(v) if isinstance(v, str) else _java_scalar(None, v)});'
            for k, v in _pick_dict(value).items()
        )
        return f"new HashMap<String, Object>() {{{{ {puts} }}}}"
    return _java_scalar(kind, value)


def _js_literal(schema: dict[str, Any], value: Any, top: bool = True) -> str:
    kind = schema.get("type") if top else None
    if isinstance(value, str):
        return value if top else f"'{value}'"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return f"{value}n" if kind == "Bigint" else str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(_js_literal({}, v, top=False) for v in value) + "]"
    if isinstance(value, dict):
        picked = _pick_dict(value) if top else value
        inner = ", ".join(
            f"{k}: {v if isinstance(v, str) else _js_literal({}, v, top=False)}"
            for k, v in picked.items()
        )
        return "{" + inner + "}"
    return json.dumps(value)


def _arguments(entry: BFCLEntry, func: str, answer: dict[str, Any]) -> dict[str, Any]:
    doc = next((f for f in entry.checker_functions if f.get("name") == func), {})
    params = doc.get("parameters") or {}
    props = params.get("properties") or {}
    required = set(params.get("required") or [])
    args = {}
    for name, options in answer.items():
        value = _pick(options, required=name in required)
        if value is _MISSING:
            continue
        schema = props.get(name, {})
        if entry.language == "java":
            args[name] = _java_literal(schema, value)
        elif entry.language == "javascript":
            args[name] = _js_literal(schema, value)
        else:
            args[name] = _python_value(schema, value)
    return args


def render_answer(entry: BFCLEntry, ground_truth: list[dict[str, Any]] | None = None) -> str:
    """Hermes text for ``ground_truth`` (default: the entry's own) in ``entry``'s language.

    Entries without possible answers render as BFCL wants them: no call for irrelevance,
    a call to the first function for relevance.
    """
    truth = entry.ground_truth if ground_truth is None else ground_truth
    if ground_truth is None and entry.ground_truth is None and "irrelevance" not in entry.category:
        return _any_call(entry)  # relevance: any call is right
    if not truth:
        return NO_CALL
    blocks = []
    for call in truth:
        for func, answer in call.items():
            body = {"name": func, "arguments": _arguments(entry, func, answer)}
            blocks.append(f"<tool_call>\n{json.dumps(body, ensure_ascii=False)}\n</tool_call>")
    return "\n".join(blocks)


def oracle_outputs(entries: list[BFCLEntry]) -> list[str]:
    """Each entry's own possible answer as model output (the checker should accept it)."""
    return [render_answer(e) for e in entries]


def shuffled_outputs(entries: list[BFCLEntry], seed: int = 0) -> list[str]:
    """Each entry answered with another entry's answer (a seeded cyclic shift by category).

    Within a category, entry ``i`` of a seeded permutation gets the answer of entry
    ``i + 1``, so no entry keeps its own answer (when the category has two or more).
    (Ir)relevance entries have no answers to swap; they get the wrong verdict instead: a
    call for irrelevance, no call for relevance.
    """
    import random

    out: list[str | None] = [None] * len(entries)
    by_cat: dict[str, list[int]] = {}
    for i, e in enumerate(entries):
        by_cat.setdefault(e.category, []).append(i)
    for cat, idx in by_cat.items():
        order = list(idx)
        random.Random(f"{seed}:{cat}").shuffle(order)
        for k, i in enumerate(order):
            if entries[i].ground_truth is None:
                irrelevant = "irrelevance" in cat
                out[i] = _any_call(entries[i]) if irrelevant else NO_CALL
                continue
            donor = entries[order[(k + 1) % len(order)]]
            out[i] = render_answer(entries[i], donor.ground_truth if len(order) > 1 else [])
    return [o or "" for o in out]
