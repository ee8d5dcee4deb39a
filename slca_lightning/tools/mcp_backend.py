"""MCPBackend: tool calls executed on a real MCP server with the official ``mcp`` SDK.

One persistent ``mcp.Client`` session lives on a background thread running its own event
loop; :meth:`MCPBackend.execute` is thread-safe (the simulator calls it from its worker
threads) and submits each call to that loop with a per-call timeout. Transports: stdio
(``command`` + ``args``, ``env``, ``cwd``: the SDK spawns the server) or streamable HTTP
(``url``). :meth:`MCPBackend.tool_schemas` reads the server's tools (``tools/list``) into
the OpenAI function form tasks use, with the server's ``outputSchema`` kept as
``output_schema`` so SGLS validates observations against it.

Errors raise, so SGLS retries and counts them: :class:`MCPToolError` for a result with
``isError``, :class:`MCPTimeout` past ``timeout_s``, :class:`MCPTransportError` when the
session cannot be opened or breaks (the next call opens a fresh session).

Results are returned as the server sent them (plain, non-JSON text included: SGLS rejects
it only when the tool declares an output schema), but bounded: an observation longer than
``max_result_chars`` is cut to that length, ending with a ``[truncated ...]`` note, and
counted in ``mcp_truncated``. The cap bounds what reaches the policy and the caches, not
the memory the SDK uses to receive the message.
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import contextlib
import os
import sys
import threading
from typing import Any

from slca_lightning.tools.base import ToolBackend, to_observation
from slca_lightning.types import Task, ToolCall

__all__ = ["MCPBackend", "MCPBackendError", "MCPTimeout", "MCPToolError", "MCPTransportError"]


class MCPBackendError(RuntimeError):
    """A tool call the MCP server did not answer successfully (base of the errors below)."""


class MCPToolError(MCPBackendError):
    """The server ran the tool and returned a result flagged ``isError``."""


class MCPTimeout(MCPBackendError):
    """No result within ``timeout_s``."""


class MCPTransportError(MCPBackendError):
    """The session could not be opened, or broke during the call."""


class MCPBackend(ToolBackend):
    """Executes validated calls on an MCP server (see the module docstring).

    Args:
        command: the stdio server's executable (e.g. ``python``); or give ``url``.
        args: its arguments (e.g. ``["-m", "slca_lightning.tools.suite_mcp_server"]``).
        env: extra environment variables for the server process.
        cwd: its working directory.
        url: a streamable-HTTP endpoint (e.g. ``http://127.0.0.1:8765/mcp``).
        timeout_s: per-call bound.
        connect_timeout_s: bound on opening the session.
        mode: the SDK's ``mode`` (``"auto"`` probes ``server/discover``; ``"legacy"`` for
            servers that only know ``initialize``).
        strip_arguments: argument names hidden from :meth:`tool_schemas` (e.g. τ²'s
            ``state_key``).
        fixed_arguments: added to every call (and hidden from the schemas).
        task_argument: an argument set to the task id on every call (hidden too), so a
            stateful server keeps one state per task (τ²: ``state_key``).
        result_path: keys to follow inside ``structuredContent`` (τ²:
            ``["tau2_tool_message", "content"]``); the output schema is then dropped.
        stderr_path: file for the stdio server's stderr (None: this process's stderr).
        max_result_chars: cap on an observation's length (the default matches
            ``OpenAIBackend.max_reply_chars``); a longer result is truncated (see the module
            docstring). None: no cap.

    :attr:`stats`: ``mcp_calls``, ``mcp_tool_errors``, ``mcp_timeouts``,
    ``mcp_transport_errors``, ``mcp_truncated`` (results cut to ``max_result_chars``),
    ``mcp_sessions`` (sessions opened).
    """

    def __init__(
        self,
        command: str | None = None,
        args: list[str] | None = None,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        url: str | None = None,
        timeout_s: float = 30.0,
        connect_timeout_s: float = 60.0,
        mode: str = "auto",
        strip_arguments: list[str] | None = None,
        fixed_arguments: dict[str, Any] | None = None,
        task_argument: str | None = None,
        result_path: list[str] | None = None,
        stderr_path: str | None = None,
        max_result_chars: int | None = 200_000,
    ) -> None:
        if (command is None) == (url is None):
            raise ValueError("MCPBackend needs exactly one of command (stdio) or url (HTTP)")
        self.command, self.args, self.env, self.cwd = command, list(args or []), env, cwd
        self.url = url
        self.timeout_s, self.connect_timeout_s = float(timeout_s), float(connect_timeout_s)
        self.mode = mode
        self.fixed_arguments = dict(fixed_arguments or {})
        self.task_argument = task_argument
        hidden = set(strip_arguments or ()) | set(self.fixed_arguments)
        self.hidden_arguments = hidden | ({task_argument} if task_argument else set())
        self.result_path = list(result_path or [])
        self.stderr_path = stderr_path
        if max_result_chars is not None and max_result_chars < _MIN_RESULT_CHARS:
            raise ValueError(
                f"MCPBackend max_result_chars must be ≥ {_MIN_RESULT_CHARS} (room for the "
                f"truncation note) or None, got {max_result_chars}"
            )
        self.max_result_chars = max_result_chars
        self.stats = dict.fromkeys(
            ("mcp_calls", "mcp_tool_errors", "mcp_timeouts", "mcp_transport_errors"), 0
        )
        self.stats["mcp_truncated"] = 0
        self.stats["mcp_sessions"] = 0
        self._lock = threading.RLock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._client: Any = None
        self._serving: cf.Future | None = None
        self._closing: asyncio.Event | None = None

    def describe(self) -> str:
        """The server, for error messages."""
        return self.url or " ".join([str(self.command), *self.args])

    def _bump(self, key: str) -> None:
        with self._lock:
            self.stats[key] += 1

    # ------------------------------------------------------------------ session

    def _transport(self) -> Any:
        if self.url is not None:
            return self.url
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=self.command, args=self.args, env=self.env, cwd=self.cwd
        )
        if self.stderr_path is not None:
            errlog = open(self.stderr_path, "a")  # noqa: SIM115 (lives as long as the server)
        else:
            errlog = sys.stderr if _has_fileno(sys.stderr) else open(os.devnull, "w")  # noqa: SIM115
        return stdio_client(params, errlog=errlog)

    async def _serve(self, ready: threading.Event) -> None:
        from mcp import Client

        self._closing = asyncio.Event()
        try:
            async with Client(
                self._transport(), mode=self.mode, read_timeout_seconds=self.timeout_s
            ) as client:
                self._client = client
                ready.set()
                await self._closing.wait()
        finally:
            self._client = None
            ready.set()

    def _session(self) -> tuple[asyncio.AbstractEventLoop, Any]:
        """The loop and the connected client, opening a session if none is alive."""
        with self._lock:
            if self._loop is None:
                self._loop = asyncio.new_event_loop()
                self._thread = threading.Thread(
                    target=self._loop.run_forever, name="mcp-backend", daemon=True
                )
                self._thread.start()
            if self._serving is not None and not self._serving.done() and self._client:
                return self._loop, self._client
            ready = threading.Event()
            self._serving = asyncio.run_coroutine_threadsafe(self._serve(ready), self._loop)
            self.stats["mcp_sessions"] += 1
            if not ready.wait(self.connect_timeout_s) or self._client is None:
                self._serving.cancel()
                reason = "timed out" if not self._serving.done() else _failure(self._serving)
                self.stats["mcp_transport_errors"] += 1
                raise MCPTransportError(
                    f"cannot open an MCP session to {self.describe()}: {reason}"
                )
            return self._loop, self._client

    def _run(self, make: Any, what: str) -> Any:
        """Run ``make(client)`` (a coroutine) on the session's loop, bounded by timeout_s."""
        loop, client = self._session()
        future = asyncio.run_coroutine_threadsafe(make(client), loop)
        try:
            return future.result(self.timeout_s + 1.0)
        except cf.TimeoutError:
            future.cancel()
            self._bump("mcp_timeouts")
            raise MCPTimeout(
                f"{what} on {self.describe()}: no result in {self.timeout_s} s"
            ) from None
        except MCPBackendError:
            raise
        except Exception as exc:
            name = type(exc).__name__
            if "Timeout" in name or "timed out" in str(exc).lower():
                self._bump("mcp_timeouts")
                raise MCPTimeout(
                    f"{what} on {self.describe()}: no result in {self.timeout_s} s ({name}: {exc})"
                ) from exc
            if self._serving is not None and self._serving.done():
                self._bump("mcp_transport_errors")
                raise MCPTransportError(f"{what} on {self.describe()}: {name}: {exc}") from exc
            raise MCPBackendError(f"{what} on {self.describe()}: {name}: {exc}") from exc

    def close(self) -> None:
        """End the session (and the stdio server process) and stop the loop thread."""
        with self._lock:
            loop, serving, self._loop = self._loop, self._serving, None
            thread, self._thread, self._serving = self._thread, None, None
        if loop is None:
            return
        if serving is not None and not serving.done() and self._closing is not None:
            loop.call_soon_threadsafe(self._closing.set)
            with contextlib.suppress(Exception):  # a session that failed to close is gone
                serving.result(10.0)
        loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(5.0)
        loop.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()

    # ------------------------------------------------------------------ tools

    def tool_schemas(self) -> list[dict[str, Any]]:
        """The server's tools in OpenAI function form (hidden arguments removed)."""

        async def list_all(client: Any) -> list[Any]:
            tools, cursor = [], None
            for _ in range(100):
                page = await client.list_tools(cursor=cursor)
                tools += list(page.tools)
                cursor = page.next_cursor
                if cursor is None:
                    break
            return tools

        out = []
        for tool in self._run(list_all, "tools/list"):
            function: dict[str, Any] = {
                "name": tool.name,
                "description": tool.description or "",
                "parameters": self._public_schema(tool.input_schema),
            }
            if tool.output_schema and not self.result_path:
                function["output_schema"] = tool.output_schema
            out.append({"type": "function", "function": function})
        return out

    def _public_schema(self, schema: dict[str, Any] | None) -> dict[str, Any]:
        schema = dict(schema or {"type": "object", "properties": {}})
        if isinstance(schema.get("properties"), dict):
            schema["properties"] = {
                k: v for k, v in schema["properties"].items() if k not in self.hidden_arguments
            }
        if isinstance(schema.get("required"), list):
            schema["required"] = [r for r in schema["required"] if r not in self.hidden_arguments]
        return schema

    def execute(self, call: ToolCall, schema: dict[str, Any] | None, task: Task) -> str:
        """Call the tool on the server; the observation is its structured content as
        compact JSON (followed along ``result_path``), else its text content joined, cut
        to ``max_result_chars`` (see the module docstring)."""
        arguments = dict(call.arguments) if isinstance(call.arguments, dict) else {}
        arguments.update(self.fixed_arguments)
        if self.task_argument:
            arguments[self.task_argument] = str(task.task_id)
        self._bump("mcp_calls")
        result = self._run(
            lambda client: client.call_tool(
                call.name, arguments, read_timeout_seconds=self.timeout_s
            ),
            f"tools/call {call.name!r}",
        )
        texts = [getattr(block, "text", "") for block in result.content or []]
        text = "\n".join(t for t in texts if t)
        if result.is_error:
            self._bump("mcp_tool_errors")
            raise MCPToolError(f"tool {call.name!r} on {self.describe()} failed: {text[:2000]}")
        value = result.structured_content
        for key in self.result_path if value is not None else ():
            if not isinstance(value, dict) or key not in value:
                raise MCPBackendError(
                    f"tool {call.name!r}: structuredContent has no {key!r} on result_path "
                    f"{self.result_path}"
                )
            value = value[key]
        return self._bounded(text if value is None else to_observation(value))

    def _bounded(self, observation: str) -> str:
        """``observation`` cut to ``max_result_chars`` (a note included), counted."""
        cap = self.max_result_chars
        if cap is None or len(observation) <= cap:
            return observation
        self._bump("mcp_truncated")
        note = f"\n[truncated: the result had {len(observation)} chars; showing the first "
        note += "{}]"
        keep = cap - len(note.format(cap))
        return observation[:keep] + note.format(keep)


_MIN_RESULT_CHARS = 128


def _has_fileno(stream: Any) -> bool:
    try:
        stream.fileno()
    except Exception:
        return False
    return True


def _failure(future: cf.Future) -> str:
    exc = future.exception() if not future.cancelled() else None
    if exc is None:
        return "the session ended"
    inner = getattr(exc, "exceptions", None)  # an anyio ExceptionGroup: show the first cause
    while inner:
        exc = inner[0]
        inner = getattr(exc, "exceptions", None)
    return f"{type(exc).__name__}: {exc}"
