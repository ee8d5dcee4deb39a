"""Tool-call formats: how a model writes a call, turned into the hermes text every reward reads.

Rewards, metrics and checkers in this project read calls with
:func:`~slca_lightning.calls.parsing.parse_tool_calls`, the hermes ``<tool_call>`` parser
whose block counts define METHOD §4.1's ``fmt``. A model that writes its calls another way
is served by a :class:`ToolCallFormat`: the agent loop hands it each assistant turn's text,
and the format returns the *canonical* text, the same turn with each call it recognises
rewritten as one hermes block (the call's JSON unchanged inside). The sampled token ids are
never touched: the policy is trained on what it wrote, and rewards score what it meant.

- :class:`HermesFormat` (default): the identity, so the paper's semantics stay exact.
- :class:`JSONFormat`: bare JSON calls, ``{"name": ..., "arguments"|"parameters": {...}}``
  or a list of them, optionally after a marker such as Llama 3.1's ``<|python_tag|>`` or
  inside a Markdown code fence (what Llama-3.x, SmolLM2 and many small instruct models emit
  when asked for a call without tags). One JSON value is one block (a list: a parallel
  step). A call that starts (``{"name":``) but does not decode is kept as an invalid block,
  so ``fmt`` falls exactly as for a broken hermes block.

Every format counts what it accepted (calls recognised) and rejected (attempts that did not
decode) in :attr:`ToolCallFormat.stats`; the agent loop logs them as
``rollout/tool_format/accepted`` and ``rollout/tool_format/rejected``.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from slca_lightning.calls.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, parse_tool_calls

__all__ = ["Canonical", "HermesFormat", "JSONFormat", "ToolCallFormat"]


@dataclass
class Canonical:
    """One turn in hermes form: ``text`` and the calls the format accepted or rejected."""

    text: str
    accepted: int = 0
    rejected: int = 0


class ToolCallFormat:
    """How a model writes tool calls: model text → hermes text (see the module docstring).

    Subclasses implement :meth:`_canonical`; :meth:`canonical` counts its results in
    :attr:`stats` (``accepted``, ``rejected``).
    """

    #: ``data.turn_end`` values this format works with (``"tool_call"`` stops a turn at
    #: ``</tool_call>``, a tag only the hermes format writes).
    turn_ends: tuple[str, ...] = ("eos", "tool_call")

    def __init__(self) -> None:
        self.stats: Counter = Counter()

    def canonical(self, text: str) -> Canonical:
        """``text`` with every call this format recognises written as a hermes block."""
        out = self._canonical(text)
        self.stats["accepted"] += out.accepted
        self.stats["rejected"] += out.rejected
        return out

    def _canonical(self, text: str) -> Canonical:
        raise NotImplementedError

    def check_turn_end(self, turn_end: str) -> None:
        """Raise ``ValueError`` naming ``data.turn_end`` if turns cannot end that way here."""
        if turn_end not in self.turn_ends:
            raise ValueError(
                f"data.turn_end={turn_end!r} cannot be used with {type(self).__name__}: its "
                f"calls carry no </tool_call> tag to stop at; use one of {list(self.turn_ends)}"
            )


def _as_hermes(text: str) -> Canonical:
    parsed = parse_tool_calls(text)
    valid = parsed.n_valid_blocks
    return Canonical(text, accepted=valid, rejected=parsed.denominator - valid)


class HermesFormat(ToolCallFormat):
    """The paper's format, ``<tool_call>{json}</tool_call>``: the text is already canonical.

    Counts valid blocks as accepted and invalid blocks plus unmatched tags as rejected.
    """

    def _canonical(self, text: str) -> Canonical:
        return _as_hermes(text)


#: Where a bare JSON call may start: an object whose first key is "name", or a list of them.
_CALL_START = re.compile(r'\[\s*\{\s*"name"\s*:|\{\s*"name"\s*:')
_FENCE = re.compile(r"```(?:json)?[ \t]*\n?|\n?```")


def is_call(value: object) -> bool:
    items = value if isinstance(value, list) else [value]
    return bool(items) and all(isinstance(v, dict) and "name" in v for v in items)


class JSONFormat(ToolCallFormat):
    """Bare JSON calls (see the module docstring), e.g. ``{"name": "f", "parameters": {}}``.

    Args:
        markers: strings a model may write right before a call (removed from the canonical
            text), e.g. ``"<|python_tag|>"``.
        fences: also read calls inside Markdown code fences (the fence is removed).

    Text that already holds a ``<tool_call>`` tag is read as hermes, unchanged. Turns end
    at the end-of-turn token only (``data.turn_end: eos``).
    """

    turn_ends = ("eos",)

    def __init__(self, markers: list[str] | None = None, fences: bool = True) -> None:
        super().__init__()
        self.markers = list(markers if markers is not None else ["<|python_tag|>"])
        self.fences = fences

    def _canonical(self, text: str) -> Canonical:
        if TOOL_CALL_OPEN in text or TOOL_CALL_CLOSE in text:
            return _as_hermes(text)
        body = text
        for marker in self.markers:
            body = body.replace(marker, "")
        if self.fences and "```" in body:
            body = _FENCE.sub("\n", body)
        decoder = json.JSONDecoder()
        out: list[str] = []
        accepted = rejected = 0
        pos = 0
        while True:
            m = _CALL_START.search(body, pos)
            if m is None:
                out.append(body[pos:])
                break
            out.append(body[pos : m.start()])
            try:
                value, end = decoder.raw_decode(body, m.start())
            except Exception:  # a call that does not decode: one invalid block to the end
                value, end = None, len(body)
            raw = body[m.start() : end]
            if value is None or not is_call(value):
                rejected += 1
            else:
                accepted += 1
            out.append(f"{TOOL_CALL_OPEN}\n{raw.strip()}\n{TOOL_CALL_CLOSE}")
            pos = end
        if not accepted and not rejected:
            return Canonical(text)
        return Canonical("".join(out).strip(), accepted, rejected)
