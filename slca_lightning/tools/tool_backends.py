"""Tool backends: what produces the observation for a call that passed SGLS validation.

- :class:`LLMBackend`: METHOD §7's simulator: a frozen LLM role-plays the API server from
  the tool's schema and the call, and :func:`extract_tool_response` cleans its reply.
- :class:`PythonBackend`: runs real local functions (offline tools, τ² domains in-process).
- :class:`ScriptedBackend`: canned responses per tool name (tests and CPU runs).

Backends may raise; :class:`~slca_lightning.tools.simulator.SchemaGuidedSimulator` retries and
turns the exception into an error observation.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from slca_lightning.calls.parsing import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, strip_think
from slca_lightning.calls.sanitize import safe_str
from slca_lightning.calls.schema import canonical_arguments, tool_function
from slca_lightning.chat_backends.base import ChatBackend
from slca_lightning.tools.base import ToolBackend, ToolError, to_observation
from slca_lightning.types import Task, ToolCall

__all__ = [
    "DEFAULT_SIMULATOR_EXAMPLES",
    "LLMBackend",
    "PythonBackend",
    "ScriptedBackend",
    "extract_tool_response",
]

TOOL_RESPONSE_OPEN = "<tool_response>"
TOOL_RESPONSE_CLOSE = "</tool_response>"
_TAGS = (TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)

DEFAULT_SIMULATOR_EXAMPLES = (
    'get_weather({"city": "Paris"}) -> <tool_response>{"city": "Paris", "temperature_c": 17, '
    '"condition": "light rain"}</tool_response>',
    'search_products({"query": "usb-c cable", "limit": 2}) -> <tool_response>{"results": '
    '[{"id": "P-1042", "name": "USB-C cable 1 m", "price": 8.99}, {"id": "P-2210", '
    '"name": "USB-C cable 2 m", "price": 11.49}]}</tool_response>',
    'get_order({"order_id": "X"}) -> <tool_response>{"error": "order \'X\' not found"}'
    "</tool_response>",
)

_SYSTEM_PROMPT = """You are a backend API server, not an assistant. You receive one function \
call and return what the real API would return. Do not explain, chat, ask questions or \
call other tools. Output only the result as one JSON object inside tags, exactly: \
<tool_response>{{JSON}}</tool_response>
Make the result realistic, specific and consistent with the arguments{schema_clause}. \
If the call cannot succeed, return a JSON object with an "error" field.

Examples:
{examples}"""


def _unwrap(text: str, open_tag: str, close_tag: str) -> str | None:
    """Content of the last ``open…close`` block (or of a dangling one); None if no tag."""
    close = text.rfind(close_tag)
    if close != -1:
        open_ = text.rfind(open_tag, 0, close)
        return text[open_ + len(open_tag) : close] if open_ != -1 else text[:close]
    open_ = text.rfind(open_tag)
    return text[open_ + len(open_tag) :] if open_ != -1 else None


def extract_tool_response(text: str) -> str:
    """The observation inside an LLM simulator's reply (METHOD §7 post-processing).

    Complete ``<think>`` blocks are dropped; then the content of the last
    ``<tool_response>…</tool_response>`` is taken (a dangling open or close counts as a
    block's edge), or, when the model leaked a ``<tool_call>`` instead, that block's
    content, or else the whole text. Remaining dangling tags and a surrounding Markdown
    code fence are removed and whitespace stripped.

    Raises:
        ValueError: nothing is left (the simulator then retries).
    """
    text = strip_think(str(text))
    content = _unwrap(text, TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE)
    if content is None:
        content = _unwrap(text, TOOL_CALL_OPEN, TOOL_CALL_CLOSE)
    if content is None:
        content = text
    for tag in _TAGS:
        content = content.replace(tag, "")
    content = content.strip()
    if content.startswith("```") and content.endswith("```") and len(content) >= 6:
        content = content[3:-3]
        first, _, rest = content.partition("\n")
        content = rest if first.strip().isalpha() or not first.strip() else content
        content = content.strip()
    if not content:
        raise ValueError("the simulator's reply holds no tool response")
    return content


class LLMBackend(ToolBackend):
    """Asks a frozen LLM to role-play the tool's API server and returns its cleaned reply.

    The prompt (:meth:`build_messages`) tells the model it is a backend API, not an
    assistant, that it must answer only ``<tool_response>{JSON}</tool_response>``, shows a
    few one-line examples, the tool's JSON schema (left out when ``schema`` is None, as in
    the "w/o SGLS" ablation) and the call. A reply that parses as JSON is re-dumped
    compactly; other text is returned as cleaned.

    Args:
        chat: the LLM (paper: Qwen3-235B-A22B on vLLM).
        temperature: sampling temperature (paper: 0.6).
        max_tokens: cap on the reply.
        examples: one-line examples for the prompt; None uses
            :data:`DEFAULT_SIMULATOR_EXAMPLES`.
        seed: when set, each call is sampled with ``chat(seed=...)`` derived from (seed,
            tool, canonical arguments), so the same call gets the same sample on a backend
            that honours seeds (vLLM, OpenAI-compatible servers), in any task and any run.
    """

    def __init__(
        self,
        chat: ChatBackend,
        temperature: float = 0.6,
        max_tokens: int = 512,
        examples: list[str] | None = None,
        seed: int | None = None,
    ) -> None:
        self.chat = chat
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.examples = list(DEFAULT_SIMULATOR_EXAMPLES if examples is None else examples)
        self.seed = seed

    def build_messages(self, call: ToolCall, schema: dict[str, Any] | None) -> list[dict]:
        """The system and user messages for one call."""
        system = _SYSTEM_PROMPT.format(
            schema_clause=" and with the tool's schema" if schema is not None else "",
            examples="\n".join(self.examples),
        )
        call_json = json.dumps(
            {"name": call.name, "arguments": call.arguments}, ensure_ascii=False, default=str
        )
        parts = []
        if schema is not None:
            parts.append("Tool schema:\n" + json.dumps(tool_function(schema), ensure_ascii=False))
        parts.append("Function call:\n" + call_json)
        return [
            {"role": "system", "content": system},
            {"role": "user", "content": "\n\n".join(parts)},
        ]

    def call_seed(self, call: ToolCall, task: Task) -> int | None:
        """The sampling seed of ``call`` (None when ``seed`` is None; see the class)."""
        if self.seed is None:
            return None
        key = f"{self.seed}|{call.name}|{canonical_arguments(call.arguments)}"
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:4], "big") >> 1

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """Query the LLM and return the cleaned observation (raises on an empty reply)."""
        reply = self.chat.chat(
            self.build_messages(call, schema),
            temperature=self.temperature,
            max_tokens=self.max_tokens,
            seed=self.call_seed(call, task),
        )
        return self.postprocess(reply)

    @staticmethod
    def postprocess(reply: str) -> str:
        """The observation in a raw reply: :func:`extract_tool_response`, then compact
        JSON when it parses as an object or a list (raises ``ValueError`` when empty)."""
        content = extract_tool_response(reply)
        try:
            parsed = json.loads(content)
        except (ValueError, RecursionError):
            return content
        return to_observation(parsed) if isinstance(parsed, (dict, list)) else content


class PythonBackend(ToolBackend):
    """Runs the real local function of the tool's name with ``**arguments``; the
    observation is the JSON of its return value (compact, ``str`` for unencodable values).

    Args:
        functions: tool name → callable. An unknown name raises ``KeyError``. None (the
            config default) uses the built-in synthetic suite's functions.
    """

    def __init__(self, functions: dict[str, Callable[..., Any]] | None = None) -> None:
        if functions is None:
            from slca_lightning.data.suite import builtin_suite

            functions = builtin_suite().functions
        self.functions = dict(functions)

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """Call ``functions[call.name](**call.arguments)``; return the JSON of the result.

        An exception raised by the function (bad arguments: a deterministic answer, as a
        real API's 4xx) is re-raised as :class:`~slca_lightning.tools.base.ToolError`, so
        the simulator reports it at once instead of retrying it with back-off. So is a
        result that cannot be serialised (e.g. an integer past Python's 4,300-digit limit
        for ``str(int)``: ``power`` with a 900-digit base): the same call would fail the
        same way on every retry.
        """
        fn = self.functions[call.name]
        try:
            result = fn(**call.arguments)
            return json.dumps(result, ensure_ascii=False, separators=(",", ":"), default=str)
        except Exception as exc:
            raise ToolError(safe_str(exc)) from exc


class ScriptedBackend(ToolBackend):
    """Returns canned responses: ``responses[call.name]`` from a dict, or
    ``responses(call, task)`` from a function. Strings are returned as they are, anything
    else as compact JSON. Every executed call is appended to :attr:`calls`.

    Args:
        responses: tool name → response, or a function ``(call, task) -> response``.
        default: the response for names missing from the dict; None raises ``KeyError``.
    """

    def __init__(
        self,
        responses: dict[str, Any] | Callable[[ToolCall, Task], Any],
        default: Any = None,
    ) -> None:
        self.responses = responses
        self.default = default
        self.calls: list[ToolCall] = []

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """The canned response for ``call`` (see the class docstring)."""
        self.calls.append(call)
        if callable(self.responses):
            value = self.responses(call, task)
        elif call.name in self.responses:
            value = self.responses[call.name]
        elif self.default is None:
            raise KeyError(f"no scripted response for tool {call.name!r}")
        else:
            value = self.default
        try:  # a response that cannot be serialised is the tool's answer, not a fault
            return to_observation(value)
        except Exception as exc:
            raise ToolError(safe_str(exc)) from exc
