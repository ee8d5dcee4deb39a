"""The chat-backend interface shared by every LLM the framework talks to.

The tool simulator (SGLS, METHOD §7), the summary judge (METHOD §4.2) and the RLTR
completeness verifier (METHOD §5) all need the same thing: send a list of chat messages,
get the assistant's text back. :class:`ChatBackend` is that one surface, so any of them can
run on any server. OpenAI-compatible, MCP and in-process engine backends come later; here
live the ABC and :class:`CallableBackend`, which wraps a plain Python function (tests and
rule-based stand-ins).
"""

from __future__ import annotations

import inspect
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

__all__ = ["CallableBackend", "ChatBackend", "chat_batch_tolerant"]


class ChatBackend(ABC):
    """Sends chat messages to a language model and returns its reply text.

    Messages use the OpenAI chat form: ``[{"role": "system" | "user" | "assistant",
    "content": str}, ...]``. Implementations may raise on transport or server errors;
    callers (judges, verifiers, simulators) catch, count and turn errors into a failed
    verdict or an error observation, never into a crashed rollout.
    """

    @abstractmethod
    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> str:
        """Return the assistant's reply to ``messages``.

        Args:
            messages: the conversation so far, OpenAI chat form.
            temperature: sampling temperature (0 = greedy, the judge's setting).
            max_tokens: cap on generated tokens; None lets the backend decide.
            seed: sampling seed, when the backend supports one.

        Returns:
            The reply text (content of the assistant message).
        """

    def chat_batch(self, requests: list[list[dict[str, Any]]], **kw: Any) -> list[str]:
        """Answer several independent conversations; one reply per request, in order.

        The default calls :meth:`chat` sequentially and lets the first exception
        propagate; subclasses backed by a server should run the requests concurrently.

        Args:
            requests: one message list per conversation.
            **kw: keyword arguments passed to every :meth:`chat` call
                (``temperature``, ``max_tokens``, ``seed``).

        Returns:
            The reply texts, ``len(requests)`` of them.
        """
        return [self.chat(messages, **kw) for messages in requests]


class CallableBackend(ChatBackend):
    """A :class:`ChatBackend` over any Python function ``fn(messages, **kw) -> str``.

    Used in tests (a function stands in for an LLM server) and for rule-based stand-ins.
    Keyword arguments are passed only if ``fn`` can take them: a function with ``**kw``
    receives ``temperature``, ``max_tokens`` and ``seed``; one that names some of them
    receives those; ``lambda messages: "..."`` receives none.

    Args:
        fn: the function that produces a reply from a message list.
    """

    def __init__(self, fn: Callable[..., str]) -> None:
        self.fn = fn
        self._accepts = _accepted_kwargs(fn)

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        temperature: float = 0.0,
        max_tokens: int | None = None,
        seed: int | None = None,
    ) -> str:
        """Call the wrapped function on ``messages`` (see the class docstring)."""
        kw = {"temperature": temperature, "max_tokens": max_tokens, "seed": seed}
        if self._accepts is not None:
            kw = {k: v for k, v in kw.items() if k in self._accepts}
        return self.fn(messages, **kw)


def _accepted_kwargs(fn: Callable[..., Any]) -> set[str] | None:
    """Names of keyword arguments ``fn`` accepts; None when it takes ``**kwargs``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: pass nothing extra
        return set()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params):
        return None
    return {
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    }


def chat_batch_tolerant(
    backend: ChatBackend, requests: list[list[dict[str, Any]]], **kw: Any
) -> list[str | None]:
    """One reply per request, None where that request failed; never raises.

    Tries ``backend.chat_batch`` first (a server answers concurrently); if the batch raises
    or returns the wrong number of replies, asks again one request at a time, so one bad
    request costs only its own reply. Judges and verifiers count the Nones as failures.
    """
    try:
        outputs: list[str | None] = list(backend.chat_batch(requests, **kw))
        if len(outputs) == len(requests):
            return outputs
    except Exception:
        pass
    outputs = []
    for messages in requests:
        try:
            outputs.append(backend.chat(messages, **kw))
        except Exception:
            outputs.append(None)
    return outputs
