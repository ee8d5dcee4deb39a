"""Chat templates for tool use: the hermes ChatML template and the rule that installs it.

Task prompts carry their tool list themselves (a hermes preamble in the system message:
``data/tasks.py``, the synthetic suite, Toucan rows), so no template is ever asked to list
tools (``tools=`` stays unused by the agent loop and SFT, and tools are never listed twice).
What a template must do is render a ``{"role": "tool"}`` message in a way the model can
read. A template that knows the tool role (Qwen2.5, Llama 3.1, the built-in models) keeps
its own rendering. A ChatML template that does not (SmolLM2's renders any role as
``<|im_start|>{role}``, so a tool result would arrive under a role the model never saw) is
replaced by :data:`HERMES_CHATML_TEMPLATE`: a tool result becomes a user turn wrapped in
``<tool_response>`` tags, as Qwen2.5 and the hermes format render it. Anything else without
the tool role is left alone with a warning. The replaced template is saved with the
tokenizer, so an exported policy renders tools the same way in transformers and vLLM.
"""

from __future__ import annotations

import logging
from typing import Any

__all__ = ["HERMES_CHATML_TEMPLATE", "adapt_chat_template", "knows_tool_role"]

log = logging.getLogger(__name__)

#: ChatML with hermes tool rendering: a tool message is a user turn holding
#: ``<tool_response>\n{content}\n</tool_response>``; ``tools=`` (when given) is listed in a
#: system turn of its own.
HERMES_CHATML_TEMPLATE = (
    "{% if tools %}<|im_start|>system\n# Tools\n<tools>\n"
    "{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}\n</tools><|im_end|>\n{% endif %}"
    "{% for message in messages %}"
    "{% if message.role == 'tool' %}<|im_start|>user\n<tool_response>\n{{ message.content }}"
    "\n</tool_response><|im_end|>\n"
    "{% else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

_STAND_IN = "slcaunknownrole"


def knows_tool_role(tokenizer: Any) -> bool:
    """True when the chat template renders a ``tool`` message differently from a message of
    a role it has never heard of (it wraps it, maps the role, or refuses unknown roles)."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return False

    def render(role: str) -> str:
        messages = [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "u"},
            {"role": "assistant", "content": "a"},
            {"role": role, "content": "r"},
        ]
        return tokenizer.apply_chat_template(messages, tokenize=False)

    try:
        as_tool = render("tool")
    except Exception:  # refuses a tool message here: it has a tool format of its own
        return True
    try:
        as_unknown = render(_STAND_IN)
    except Exception:  # refuses unknown roles but took the tool one
        return True
    return as_unknown.replace(_STAND_IN, "tool") != as_tool


def adapt_chat_template(tokenizer: Any, where: str = "tokenizer") -> Any:
    """Install :data:`HERMES_CHATML_TEMPLATE` on a ChatML tokenizer that does not know the
    tool role (logged once with ``where``); any other tokenizer comes back unchanged."""
    if knows_tool_role(tokenizer):
        return tokenizer
    template = getattr(tokenizer, "chat_template", None) or ""
    if "<|im_start|>" in template:
        tokenizer.chat_template = HERMES_CHATML_TEMPLATE
        log.info(
            "%s: chat template has no tool role; using the hermes ChatML template (tool "
            "results as <tool_response> user turns)",
            where,
        )
    else:
        log.warning(
            "%s: chat template has no tool role and is not ChatML; tool results are rendered "
            "as the template renders an unknown role (set a chat template with tool support)",
            where,
        )
    return tokenizer
