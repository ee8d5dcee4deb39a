"""Tag-based segmenter: tool tokens are the ones inside ``<tool_call> … </tool_call>``.

A finer alternative to the paper's mask-run rule (METHOD §3, "a natural extension"). Each
assistant run is detokenised incrementally, so every sampled token gets the character span
it contributes to the run's text without re-tokenising anything. Characters inside a
``<tool_call>`` block (tags included; an unclosed block runs to the end of the turn) are
tool text, ``<think>``/``<thinking>`` blocks go where ``think`` says, everything else is
summary text. A token belongs to the tool segment when any character it produced is tool
text; a token that produced no character yet (part of a multi-byte character, a special
token decoded to nothing) takes the label of the character where it would start.
"""

from __future__ import annotations

from typing import Any, Literal

import torch

from slca_lightning.segmenters.base import Segmenter
from slca_lightning.types import RolloutBatch, Segments

_TOOL_TAGS = ("<tool_call>", "</tool_call>")
_THINK_TAGS = (("<think>", "</think>"), ("<thinking>", "</thinking>"))


def token_char_spans(tokenizer: Any, ids: list[int]) -> tuple[str, list[tuple[int, int]]]:
    """Detokenise ``ids`` incrementally and return the text with each token's char span.

    Uses the usual streaming trick: decode a short window ending at the token and keep only
    the new suffix, holding back while the window ends in an incomplete character (U+FFFD).

    Returns:
        ``(text, spans)``; ``spans[i] = (start, end)`` with ``text[start:end]`` the
        characters that token ``i`` completed (possibly empty).
    """
    text = ""
    spans: list[tuple[int, int]] = []
    prefix_offset = 0  # start of the decode window
    read_offset = 0  # tokens before this are already in `text`
    for i in range(len(ids)):
        prefix_text = tokenizer.decode(ids[prefix_offset:read_offset], skip_special_tokens=False)
        new_text = tokenizer.decode(ids[prefix_offset : i + 1], skip_special_tokens=False)
        if len(new_text) > len(prefix_text) and not new_text.endswith("\ufffd"):
            piece = new_text[len(prefix_text) :]
            spans.append((len(text), len(text) + len(piece)))
            text += piece
            prefix_offset, read_offset = read_offset, i + 1
        else:
            spans.append((len(text), len(text)))
    # Tokens held back at the end (an incomplete character) keep empty spans.
    return text, spans


def _label_chars(text: str, think: str) -> list[str]:
    """Label every character of one assistant turn "tool" or "summary"."""
    labels = ["summary"] * len(text)

    def mark(open_tag: str, close_tag: str, label: str) -> None:
        pos = 0
        while True:
            start = text.find(open_tag, pos)
            if start < 0:
                return
            close = text.find(close_tag, start + len(open_tag))
            end = len(text) if close < 0 else close + len(close_tag)
            for j in range(start, end):
                labels[j] = label
            pos = end

    for open_tag, close_tag in _THINK_TAGS:
        mark(open_tag, close_tag, think)
    mark(*_TOOL_TAGS, "tool")
    return labels


def _runs(row_mask: list[bool]) -> list[tuple[int, int]]:
    runs, start = [], None
    for t, m in enumerate([*row_mask, False]):
        if m and start is None:
            start = t
        elif not m and start is not None:
            runs.append((start, t))
            start = None
    return runs


class TagSegmenter(Segmenter):
    """Tokens inside ``<tool_call>…</tool_call>`` are tool tokens; the rest is summary.

    Args:
        tokenizer: the policy's tokenizer (anything with ``decode(ids,
            skip_special_tokens=False)``); connected late when built from a config.
        think: where ``<think>``/``<thinking>`` blocks go: ``"tool"`` (reasoning credited
            with the decisions it leads to) or ``"summary"``.
    """

    def __init__(self, tokenizer: Any = None, think: Literal["tool", "summary"] = "tool") -> None:
        if think not in ("tool", "summary"):
            raise ValueError(f"TagSegmenter.think must be 'tool' or 'summary', got {think!r}")
        self.tokenizer = tokenizer
        self.think = think

    def __call__(self, batch: RolloutBatch) -> Segments:
        if self.tokenizer is None:
            raise ValueError("TagSegmenter needs a tokenizer: pass tokenizer= or set .tokenizer")
        mask = batch.assistant_mask.bool()
        tool = torch.zeros_like(mask)
        ids = batch.input_ids.tolist()
        for b, row_mask in enumerate(mask.tolist()):
            for start, end in _runs(row_mask):
                text, spans = token_char_spans(self.tokenizer, ids[b][start:end])
                labels = _label_chars(text, self.think)
                for i, (cs, ce) in enumerate(spans):
                    if ce > cs:
                        is_tool = any(labels[j] == "tool" for j in range(cs, ce))
                    else:
                        is_tool = cs < len(labels) and labels[cs] == "tool"
                    if is_tool:
                        tool[b, start + i] = True
        summary = mask & ~tool
        return Segments(
            masks={"tool": tool, "summary": summary},
            present={"tool": tool.any(dim=1), "summary": summary.any(dim=1)},
        )
