"""Loopback servers that tests and benchmarks start: a misbehaving OpenAI-compatible chat
server and the built-in suite's MCP server over HTTP.

:class:`ChatStandIn` is a standard-library ``ThreadingHTTPServer`` (Nagle off, a deep
accept queue, HTTP/1.1 keep-alive) answering ``POST /v1/chat/completions`` in one of
:data:`MODES`; the mode and the fixed latency can be changed while it runs. The real
OpenAI-compatible server is vLLM (``tests/vllm/``); this stand-in exists to produce the
failures a real server produces only by accident.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = [
    "MODES",
    "ChatStandIn",
    "ChatStandInProcess",
    "ChildServer",
    "MCPHTTPServer",
    "free_port",
]

#: ``ok``: a valid chat completion; ``close``: read the request, close without answering;
#: ``non_json``: HTTP 200 with an HTML body; ``huge``: HTTP 200 with a multi-MB body;
#: ``hang``: never answer (until ``hang_s`` or stop); ``error500``: HTTP 500 JSON error.
MODES = ("ok", "close", "non_json", "huge", "hang", "error500")


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _completion(text: str, model: str) -> bytes:
    body = {
        "id": "chatcmpl-standin",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    return json.dumps(body).encode()


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 512
    stand_in: ChatStandIn


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _send(self, status: int, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path.rstrip("/") in ("/health", "/v1/models"):
            self._send(200, b'{"object": "list", "data": []}')
        else:
            self._send(404, b'{"error": "not found"}')

    def do_POST(self) -> None:
        stand_in = self.server.stand_in  # type: ignore[attr-defined]
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, b'{"error": "not found"}')
            return
        try:
            request = json.loads(raw)
        except ValueError:
            self._send(400, b'{"error": "request is not JSON"}')
            return
        stand_in._count(request)
        if stand_in.delay_s > 0:
            time.sleep(stand_in.delay_s)
        mode = stand_in.mode
        try:
            if mode == "ok":
                text = stand_in.answer(request)
                self._send(200, _completion(text, str(request.get("model", "stand-in"))))
            elif mode == "close":
                self.close_connection = True
                self.connection.shutdown(socket.SHUT_RDWR)
            elif mode == "non_json":
                self._send(200, b"<html><body>502 Bad Gateway</body></html>")
            elif mode == "huge":
                self._huge(stand_in.huge_bytes)
            elif mode == "hang":
                stand_in._stopping.wait(stand_in.hang_s)
                self.close_connection = True
            else:
                self._send(500, b'{"error": {"message": "internal error", "code": 500}}')
        except (BrokenPipeError, ConnectionResetError, OSError):
            self.close_connection = True  # the client gave up: expected for huge / hang

    def _huge(self, size: int) -> None:
        head = b'{"id": "x", "object": "chat.completion", "choices": [{"index": 0, '
        head += b'"message": {"role": "assistant", "content": "'
        tail = b'"}, "finish_reason": "stop"}], "created": 0, "model": "m"}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(head) + size + len(tail)))
        self.end_headers()
        self.wfile.write(head)
        chunk = b"a" * 65_536
        for _ in range(size // len(chunk)):
            self.wfile.write(chunk)
        self.wfile.write(b"a" * (size % len(chunk)) + tail)


class ChatStandIn:
    """A loopback OpenAI-compatible chat server whose behaviour is chosen by ``mode``.

    Args:
        mode: one of :data:`MODES` (changeable while running: set :attr:`mode`).
        reply: the answer in mode ``ok``: a function ``messages -> text``, or a
            :class:`~slca_lightning.chat_backends.ChatBackend` (e.g. ``EngineChatBackend`` over
            the tiny model); None echoes the last message's content.
        delay_s: fixed latency before every answer (benchmarks).
        huge_bytes: body size in mode ``huge``.
        hang_s: how long mode ``hang`` keeps a request open (stop() ends it sooner).

    :attr:`requests` counts chat requests received, :attr:`last_request` is the latest JSON
    body; :attr:`url` is the ``/v1`` root.
    """

    def __init__(
        self,
        mode: str = "ok",
        reply: Callable[[list[dict[str, Any]]], str] | Any = None,
        delay_s: float = 0.0,
        huge_bytes: int = 8_000_000,
        hang_s: float = 60.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"ChatStandIn mode must be one of {MODES}, got {mode!r}")
        self.mode, self.reply, self.delay_s = mode, reply, delay_s
        self.huge_bytes, self.hang_s = int(huge_bytes), float(hang_s)
        self.requests = 0
        self.last_request: Any = None
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def _count(self, request: Any = None) -> None:
        with self._lock:
            self.requests += 1
            self.last_request = request

    def answer(self, request: dict[str, Any]) -> str:
        """The reply text for one chat request in mode ``ok``."""
        messages = request.get("messages") or []
        if self.reply is None:
            return str(messages[-1].get("content", "")) if messages else ""
        if hasattr(self.reply, "chat"):
            return self.reply.chat(
                messages,
                temperature=float(request.get("temperature") or 0.0),
                max_tokens=request.get("max_tokens"),
                seed=request.get("seed"),
            )
        return self.reply(messages)

    @property
    def url(self) -> str:
        """The API root (``http://127.0.0.1:<port>/v1``)."""
        if self._server is None:
            raise RuntimeError("ChatStandIn is not running: call start()")
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def start(self) -> ChatStandIn:
        """Bind a free loopback port and serve on a background thread."""
        self._stopping.clear()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.stand_in = self
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; hung requests are released."""
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> ChatStandIn:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class ChildServer:
    """A loopback server in a child process (so it does not share the caller's interpreter
    lock): spawns ``module`` with ``--port <free port>`` plus ``args`` and waits until the
    port accepts connections. :attr:`port` is set by :meth:`start`.

    Args:
        module: the ``python -m`` module to run, or a ``.py`` file path.
        args: its extra arguments.
        ready_timeout_s: how long to wait for the port.
    """

    def __init__(self, module: str, args: list[str], ready_timeout_s: float = 60.0) -> None:
        self.module, self.args, self.ready_timeout_s = module, list(args), ready_timeout_s
        self.port = 0
        self.proc: subprocess.Popen | None = None
        self._log: Any = None

    def start(self) -> ChildServer:
        """Spawn the server and wait until its port accepts connections."""
        self.port = free_port()
        # a module without package imports runs as a file: no `import slca_lightning` (torch)
        run = [self.module] if self.module.endswith(".py") else ["-m", self.module]
        cmd = [sys.executable, *run, "--port", str(self.port), *self.args]
        self._log = tempfile.TemporaryFile()  # noqa: SIM115 (a pipe nobody reads could block)
        self.proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=self._log, env=dict(os.environ)
        )
        deadline = time.monotonic() + self.ready_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self._log.seek(0)
                err = self._log.read().decode(errors="replace")
                code = self.proc.returncode
                raise RuntimeError(f"{self.module} exited ({code}): {err[-2000:]}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return self
            except OSError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(
            f"{self.module} not ready on port {self.port} in {self.ready_timeout_s} s"
        )

    def stop(self) -> None:
        """Terminate the child process."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        self.proc = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> ChildServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class MCPHTTPServer(ChildServer):
    """The built-in suite's MCP server (``slca_lightning.tools.suite_mcp_server``) in a child
    process on streamable HTTP; :attr:`url` is its ``/mcp`` endpoint.

    Args:
        tools: subset of tool names (None: all).
        delay_ms: fixed latency per call.
        bad_tools: also serve ``plain_text`` and ``huge_text`` (non-JSON and huge results).
    """

    def __init__(
        self, tools: list[str] | None = None, delay_ms: float = 0.0, bad_tools: bool = False
    ) -> None:
        args = ["--http", "--delay-ms", str(delay_ms)] + (["--bad-tools"] if bad_tools else [])
        super().__init__(
            "slca_lightning.tools.suite_mcp_server",
            args + (["--tools", ",".join(tools)] if tools else []),
        )

    @property
    def url(self) -> str:
        """The streamable-HTTP endpoint."""
        return f"http://127.0.0.1:{self.port}/mcp"


class ChatStandInProcess(ChildServer):
    """A :class:`ChatStandIn` in a child process (this file run as a script);
    :attr:`url` is its ``/v1`` root.

    Args:
        mode: one of :data:`MODES`.
        delay_ms: fixed latency per request.
        reply: ``"echo"`` (the last message) or ``"tool"`` (a fixed ``<tool_response>``).
    """

    def __init__(self, mode: str = "ok", delay_ms: float = 0.0, reply: str = "tool") -> None:
        args = ["--mode", mode, "--delay-ms", str(delay_ms), "--reply", reply]
        super().__init__(os.path.abspath(__file__), args)

    @property
    def url(self) -> str:
        """The API root."""
        return f"http://127.0.0.1:{self.port}/v1"


def _fixed_tool_reply(messages: list[dict[str, Any]]) -> str:
    return '<tool_response>{"ok": true}</tool_response>'


def main(argv: list[str] | None = None) -> None:
    """Run a :class:`ChatStandIn` in the foreground (benchmarks run it in a child process,
    so the server does not share the client's interpreter lock)."""
    import argparse

    parser = argparse.ArgumentParser(description="Loopback OpenAI-compatible stand-in server.")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--mode", choices=MODES, default="ok")
    parser.add_argument("--delay-ms", type=float, default=0.0)
    parser.add_argument("--reply", choices=("echo", "tool"), default="echo")
    ns = parser.parse_args(argv)
    reply = _fixed_tool_reply if ns.reply == "tool" else None
    stand_in = ChatStandIn(ns.mode, reply=reply, delay_s=ns.delay_ms / 1000.0)
    server = _Server(("127.0.0.1", ns.port), _Handler)
    server.stand_in = stand_in
    server.serve_forever()


if __name__ == "__main__":
    main()
