"""The hermes-style system prompt that lists tools inside ``<tools></tools>``.

It reproduces the Toucan RL rows byte for byte: the tool schemas are written one per line
as ``json.dumps(schema, ensure_ascii=False)`` (what the chat template's ``tojson`` gives),
between a fixed header and the ``<tool_call>`` format instructions.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["render_hermes_system_prompt"]

_HEADER = (
    "You have access to the following tools:\n\n\n\n# Tools\n\n"
    "You may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
)
_FOOTER = (
    "\n</tools>\n\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>\n\n'
    "Use them when appropriate to help answer the user's questions."
)


def render_hermes_system_prompt(tools: list[dict[str, Any]], system: str | None = None) -> str:
    """The system prompt listing ``tools`` exactly as the Toucan rows do.

    Args:
        tools: OpenAI function schemas, in the order to show them.
        system: optional text put before the tool preamble (followed by a blank line).
    """
    body = "\n".join(json.dumps(tool, ensure_ascii=False) for tool in tools)
    text = _HEADER + body + _FOOTER
    return f"{system}\n\n{text}" if system else text
