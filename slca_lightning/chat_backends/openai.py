"""OpenAIBackend: any OpenAI-compatible chat endpoint (vLLM, a hosted provider) as a
:class:`~slca_lightning.chat_backends.base.ChatBackend` for the simulator and the judges.

The official ``openai`` client does the HTTP (its own retries are off: this class retries,
so every attempt is counted). Each request streams the raw body with a byte cap and a
wall-clock deadline, then validates it as a ``ChatCompletion``; so a server that closes
the connection, sends non-JSON, sends a huge body or hangs gives a bounded
:class:`ChatBackendError` naming the endpoint, the model and what went wrong. The
simulator turns that into a counted error observation, the judge into a counted failed
verdict.
"""

from __future__ import annotations

import concurrent.futures as cf
import json
import os
import threading
import time
from typing import Any

from slca_lightning.chat_backends.base import ChatBackend

__all__ = [
    "ChatBackendError",
    "ChatBadResponse",
    "ChatConnectionError",
    "ChatReplyTooLarge",
    "ChatServerError",
    "ChatTimeout",
    "OpenAIBackend",
]


_RETRY_STATUS = {408, 409, 429}


class ChatBackendError(RuntimeError):
    """A chat request that produced no usable reply (base of the errors below)."""


class ChatTimeout(ChatBackendError):
    """The server did not answer (or finish its body) within ``timeout_s``."""


class ChatConnectionError(ChatBackendError):
    """The connection failed or was closed before a full response arrived."""


class ChatServerError(ChatBackendError):
    """The server answered with an HTTP error status (``retryable`` for 408/409/429/5xx)."""

    def __init__(self, where: str, status: int, message: str) -> None:
        super().__init__(f"{where}: HTTP {status}: {message}")
        self.status_code = status
        self.retryable = status in _RETRY_STATUS or status >= 500


class ChatBadResponse(ChatBackendError):
    """The body is not a valid chat completion (non-JSON, wrong shape, no text)."""


class ChatReplyTooLarge(ChatBackendError):
    """The body or the reply text exceeds the configured cap."""


_STAT_KEYS = ("llm_calls", "llm_failures", "llm_retries", "llm_timeouts", "llm_latency_ms_sum")


class OpenAIBackend(ChatBackend):
    """Sends chats to an OpenAI-compatible ``/v1/chat/completions`` endpoint.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        api_key: the key; None reads the environment variable ``api_key_env``, else
            ``"EMPTY"`` (what local vLLM servers accept).
        api_key_env: name of the environment variable holding the key (None: none read).
        timeout_s: bound on one attempt: connect, each read, and the whole body.
        max_retries: extra attempts after a timeout, a dropped connection or a
            408/409/429/5xx status (a malformed or oversized body is not retried here).
        retry_backoff_s: sleep ``retry_backoff_s × 2**attempt`` (capped at 8 s) before a retry.
        max_in_flight: most requests open at once, over :meth:`chat_batch` and concurrent
            :meth:`chat` calls from other threads together.
        max_reply_chars: cap on the reply text; the body may hold at most
            ``4 × max_reply_chars + 64 KiB`` bytes.
        extra_body: extra JSON fields for every request (e.g. vLLM's ``top_k``).

    :attr:`stats` (cumulative): ``llm_calls`` (requests asked for), ``llm_failures``
    (requests that raised after their last attempt), ``llm_retries``, ``llm_timeouts``
    (attempts that timed out) and ``llm_latency_ms_sum``; :meth:`latencies` gives the
    per-request latencies (s) for percentiles.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 60.0,
        max_retries: int = 2,
        retry_backoff_s: float = 0.5,
        max_in_flight: int = 32,
        max_reply_chars: int = 200_000,
        extra_body: dict[str, Any] | None = None,
    ) -> None:
        if timeout_s is None or timeout_s <= 0:
            raise ValueError(f"OpenAIBackend timeout_s must be > 0 seconds, got {timeout_s!r}")
        self.base_url, self.model = base_url.rstrip("/"), model
        if api_key is None and api_key_env:
            api_key = os.environ.get(api_key_env)
        self._api_key = api_key or "EMPTY"
        self.timeout_s = float(timeout_s)
        self.max_retries = max(0, int(max_retries))
        self.retry_backoff_s = max(0.0, float(retry_backoff_s))
        self.max_in_flight = max(1, int(max_in_flight))
        self.max_reply_chars = int(max_reply_chars)
        self.max_body_bytes = 4 * self.max_reply_chars + 65_536
        self.extra_body = dict(extra_body or {})
        self.stats: dict[str, float] = dict.fromkeys(_STAT_KEYS, 0)
        self._latencies: list[float] = []
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_in_flight)
        self._client: Any = None
        self._pool: cf.ThreadPoolExecutor | None = None

    # ------------------------------------------------------------------ plumbing

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for key in ("_lock", "_slots", "_client", "_pool"):
            state.pop(key)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._slots = threading.BoundedSemaphore(self.max_in_flight)
        self._client, self._pool = None, None

    def _openai(self) -> Any:
        with self._lock:
            if self._client is None:
                import openai

                self._client = openai.OpenAI(
                    base_url=self.base_url,
                    api_key=self._api_key,
                    timeout=openai.Timeout(self.timeout_s, connect=min(self.timeout_s, 10.0)),
                    max_retries=0,
                )
            return self._client

    def _bump(self, key: str, value: float = 1) -> None:
        with self._lock:
            self.stats[key] += value

    def latencies(self) -> list[float]:
        """Latency (s) of every finished request so far (successful or not), in order."""
        with self._lock:
            return list(self._latencies)

    def close(self) -> None:
        """Close the HTTP client and the batch thread pool (they reopen on next use)."""
        with self._lock:
            client, pool, self._client, self._pool = self._client, self._pool, None, None
        if pool is not None:
            pool.shutdown(wait=False)
        if client is not None:
            client.close()

    def _where(self) -> str:
        return f"{self.base_url}/chat/completions (model {self.model!r})"

    # ------------------------------------------------------------------ requests

    def chat(self, messages, *, temperature=0.0, max_tokens=None, seed=None) -> str:
        """The reply text to ``messages``; raises a :class:`ChatBackendError` on failure."""
        self._bump("llm_calls")
        start = time.perf_counter()
        try:
            with self._slots:
                return self._with_retries(messages, temperature, max_tokens, seed)
        except Exception:
            self._bump("llm_failures")
            raise
        finally:
            elapsed = time.perf_counter() - start
            with self._lock:
                self._latencies.append(elapsed)
                self.stats["llm_latency_ms_sum"] += 1000.0 * elapsed

    def chat_batch(self, requests, **kw) -> list[str]:
        """All replies, with up to ``max_in_flight`` requests open at once (one rollout
        step's calls in one go). Every request runs to its end; then the first failure,
        if any, is raised."""
        if len(requests) <= 1:
            return [self.chat(m, **kw) for m in requests]
        with self._lock:
            if self._pool is None:
                self._pool = cf.ThreadPoolExecutor(self.max_in_flight, thread_name_prefix="oai")
            pool = self._pool
        futures = [pool.submit(self.chat, m, **kw) for m in requests]
        cf.wait(futures)
        return [f.result() for f in futures]

    def _with_retries(self, messages, temperature, max_tokens, seed) -> str:
        for attempt in range(self.max_retries + 1):
            try:
                return self._once(messages, temperature, max_tokens, seed)
            except (ChatTimeout, ChatConnectionError, ChatServerError) as exc:
                retryable = not isinstance(exc, ChatServerError) or exc.retryable
                if attempt == self.max_retries or not retryable:
                    raise
                self._bump("llm_retries")
                time.sleep(min(8.0, self.retry_backoff_s * 2**attempt))
        raise AssertionError("unreachable")

    def _once(self, messages, temperature, max_tokens, seed) -> str:
        import openai

        kw: dict[str, Any] = {"temperature": temperature}
        if max_tokens is not None:
            kw["max_tokens"] = int(max_tokens)
        if seed is not None:
            kw["seed"] = int(seed)
        if self.extra_body:
            kw["extra_body"] = self.extra_body
        deadline = time.monotonic() + self.timeout_s
        create = self._openai().chat.completions.with_streaming_response.create
        try:
            with create(model=self.model, messages=messages, **kw) as response:
                raw = self._read_capped(response, deadline)
        except ChatBackendError:
            raise
        except openai.APITimeoutError as exc:  # a subclass of APIConnectionError: first
            self._bump("llm_timeouts")
            raise ChatTimeout(f"{self._where()}: no answer within {self.timeout_s} s") from exc
        except openai.APIConnectionError as exc:
            raise ChatConnectionError(f"{self._where()}: connection failed: {exc}") from exc
        except openai.APIStatusError as exc:
            raise ChatServerError(self._where(), exc.status_code, exc.message) from exc
        except Exception as exc:  # httpx errors raised while streaming the body
            name = type(exc).__name__
            if "Timeout" in name:
                self._bump("llm_timeouts")
                raise ChatTimeout(f"{self._where()}: body not finished in time ({name})") from exc
            raise ChatConnectionError(f"{self._where()}: {name} while reading: {exc}") from exc
        return self._reply_text(raw)

    def _read_capped(self, response: Any, deadline: float) -> bytes:
        chunks, size = [], 0
        for chunk in response.iter_bytes():
            size += len(chunk)
            if size > self.max_body_bytes:
                raise ChatReplyTooLarge(
                    f"{self._where()}: body exceeds {self.max_body_bytes} bytes "
                    f"(max_reply_chars={self.max_reply_chars})"
                )
            if time.monotonic() > deadline:
                self._bump("llm_timeouts")
                raise ChatTimeout(f"{self._where()}: body not finished within {self.timeout_s} s")
            chunks.append(chunk)
        return b"".join(chunks)

    def _reply_text(self, raw: bytes) -> str:
        from openai.types.chat import ChatCompletion

        try:
            data = json.loads(raw)
        except (ValueError, RecursionError) as exc:
            head = raw[:80].decode("utf-8", "replace")
            raise ChatBadResponse(f"{self._where()}: body is not JSON ({exc}): {head!r}") from exc
        try:
            completion = ChatCompletion.model_validate(data)
        except Exception as exc:
            raise ChatBadResponse(f"{self._where()}: not a chat completion: {exc}") from exc
        if not completion.choices:
            raise ChatBadResponse(f"{self._where()}: completion has no choices")
        text = completion.choices[0].message.content
        if not isinstance(text, str):
            raise ChatBadResponse(f"{self._where()}: choices[0].message.content is not text")
        if len(text) > self.max_reply_chars:
            raise ChatReplyTooLarge(
                f"{self._where()}: reply has {len(text)} chars > max_reply_chars="
                f"{self.max_reply_chars}"
            )
        return text
