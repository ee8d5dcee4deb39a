"""What the environment side of the agent loop writes back: the calls a turn asks for, error
observations for what cannot run, and tool responses cut to their token cap.
"""

from __future__ import annotations

from typing import Any

from slca_lightning.calls.parsing import parse_tool_calls
from slca_lightning.calls.sanitize import clean_call, clean_text, preview
from slca_lightning.types import ToolCall, ToolResult

__all__ = ["MAX_CHARS_PER_TOKEN", "TOO_MANY_CALLS", "middle_cut", "not_executed", "turn_calls"]


#: A token is assumed to span at most this many characters when an observation is first
#: cut by characters (so a megabyte observation is never tokenised whole).
MAX_CHARS_PER_TOKEN = 32


def middle_cut(tokenizer: Any, text: str, max_tokens: int) -> tuple[str, bool]:
    """Keep the first and last ``max_tokens // 2`` tokens of ``text``; True if cut.

    ``text`` is cleaned first (:func:`~slca_lightning.calls.sanitize.clean_text`: a lone
    surrogate makes fast tokenizers raise ``TypeError``), and when it is longer than
    ``2 × MAX_CHARS_PER_TOKEN × max_tokens`` characters its middle is first cut by
    characters (marked ``...[N characters truncated]...``), so the tokenizer's work is
    bounded by the cap, not by the observation.
    """
    text = clean_text(text)
    pre_cut = False
    if max_tokens > 0 and len(text) > 2 * MAX_CHARS_PER_TOKEN * max_tokens:
        keep = MAX_CHARS_PER_TOKEN * max_tokens
        dropped = len(text) - 2 * keep
        text = f"{text[:keep]}\n...[{dropped} characters truncated]...\n{text[-keep:]}"
        pre_cut = True
    ids = tokenizer.encode(text, add_special_tokens=False)
    if max_tokens <= 0 or len(ids) <= max_tokens:
        return text, pre_cut
    half = max_tokens // 2
    head = tokenizer.decode(ids[:half], skip_special_tokens=False)
    tail = tokenizer.decode(ids[len(ids) - half :], skip_special_tokens=False)
    return f"{head}\n...[{len(ids) - 2 * half} tokens truncated]...\n{tail}", True


#: ``error_kind`` of the one observation that answers every entry past a turn's cap.
TOO_MANY_CALLS = "too_many_calls"


def _invalid_result(reason: str, detail: str = "", not_executed: int = 0) -> ToolResult:
    """An error observation made by the loop itself; ``detail`` (model text) is cleaned
    and capped. The overflow observation (``reason="too_many_calls"``) carries the number
    of entries it answers as ``call.arguments["not_executed"]`` (see :func:`not_executed`)."""
    detail = clean_text(detail, 200)
    content = f"Error: invalid tool call ({reason}){': ' + detail if detail else ''}."
    args = {"not_executed": not_executed} if not_executed else {}
    return ToolResult(ToolCall(name="", arguments=args), content, is_error=True, error_kind=reason)


def not_executed(result: ToolResult) -> int:
    """How many entries of its turn ``result`` answers without running them: N for the
    turn's overflow observation (``too_many_calls``), else 0."""
    if result.error_kind != TOO_MANY_CALLS or not isinstance(result.call.arguments, dict):
        return 0
    return int(result.call.arguments.get("not_executed", 0))


def turn_calls(text: str, max_calls_per_turn: int) -> tuple[list[ToolCall | ToolResult], bool]:
    """Calls to execute (or ready error results) for one turn; False if no call tag.

    Every entry the model wrote counts toward ``max_calls_per_turn``, in order: a valid
    call, an invalid entry, a block that failed before its entries, an unmatched tag.
    The first ``max_calls_per_turn`` entries are answered one each (a valid call as a
    :func:`~slca_lightning.calls.sanitize.clean_call` copy: the simulator never sees a
    lone surrogate or a control character); all the others share one ``too_many_calls``
    observation that says how many were not executed, so a turn has at most
    ``max_calls_per_turn + 1`` observations however many entries its blocks hold.
    """
    parsed = parse_tool_calls(text)
    if parsed.n_open == 0:
        return [], False
    cap = max(0, int(max_calls_per_turn))
    items: list[ToolCall | ToolResult] = []
    seen = 0
    for block in parsed.blocks:
        if block.error and block.error != "invalid_entry":
            seen += 1
            if len(items) < cap:
                items.append(_invalid_result(block.error, block.text[:400].strip()))
            continue
        for entry in block.entries:
            seen += 1
            if len(items) >= cap:
                continue
            if entry.call is not None:
                items.append(clean_call(entry.call))
            else:
                items.append(_invalid_result(entry.error or "invalid", preview(entry.raw)))
    unmatched = parsed.denominator - len(parsed.blocks)
    seen += unmatched
    room = max(0, min(unmatched, cap - len(items)))
    items.extend(_invalid_result("unbalanced_tags") for _ in range(room))
    if seen > len(items):
        rest = seen - len(items)
        detail = f"{rest} more call(s) not executed: at most {cap} calls per turn"
        items.append(_invalid_result(TOO_MANY_CALLS, detail, not_executed=rest))
    return items, True
