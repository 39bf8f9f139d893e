"""A real MCP server for tests, built with the official SDK (``MCPServer``, mcp 2.x's FastMCP).

Started once per test session in a thread (uvicorn), serving the same tools over streamable
HTTP (``.url``, ``/mcp``) and SSE (``.sse_url``, ``/sse``). Tools:

- ``add(a, b)``: ``a + b``; ``echo(text)``: the text; ``clock()``: a fixed ISO time;
- ``boom()``: fails (the SDK reports ``is_error``); ``big(words)``: ``words`` numbered words;
- ``slow(seconds)``: waits, then answers "slept" (released early by ``server.release``);
- ``report(step, words)``: "Step <step> report: serial S<step*7919>." and filler words;
- ``note_save(key, value)`` / ``note_read(key)``: a small notes store;
- ``/redirect/mcp``: answers 307 to the real endpoint (a server that redirects).

``server.hold_cancels``: while set, a posted ``notifications/cancelled`` (the SDK's courtesy
cancel on the older protocols, SSE here) is held unanswered until ``server.release``;
``server.cancels_held`` counts them.

``server.seen_headers`` holds each HTTP request's headers (lower-cased names), newest last;
``server.sessions_opened()`` counts the sessions clients opened (streamable HTTP: each session
starts with ``server/discover``, or ``initialize`` on the older protocol).

    def test_x(mcp_server):
        ...  url=mcp_server.url ...
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator

import anyio
import pytest
import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from starlette.requests import Request
from starlette.responses import RedirectResponse

FIXED_TIME = "2026-01-02T03:04:05Z"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TestMCPServer:
    def __init__(self) -> None:
        self.port = _free_port()
        self.sse_port = _free_port()
        self.seen_headers: list[dict[str, str]] = []
        self.calls: list[tuple[str, dict]] = []
        self.release = threading.Event()
        self.hold_cancels = threading.Event()
        self.cancels_held = 0
        self.notes: dict[str, str] = {}
        self._servers: list[uvicorn.Server] = []
        self.app = self._build()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/mcp"

    @property
    def sse_url(self) -> str:
        return f"http://127.0.0.1:{self.sse_port}/sse"

    @property
    def redirect_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/redirect/mcp"

    def sessions_opened(self) -> int:
        opening = ("server/discover", "initialize")
        return sum(1 for h in self.seen_headers if h.get("mcp-method") in opening)

    def _build(self) -> MCPServer:
        server = MCPServer("test-tools")
        calls = self.calls

        @server.tool()
        def add(a: int, b: int) -> int:
            """Add two integers."""
            calls.append(("add", {"a": a, "b": b}))
            return a + b

        @server.tool()
        def echo(text: str) -> str:
            """Echo the text back."""
            calls.append(("echo", {"text": text}))
            return text

        @server.tool()
        def clock() -> str:
            """The current time (fixed in tests)."""
            calls.append(("clock", {}))
            return FIXED_TIME

        @server.tool()
        def boom() -> str:
            """Always fails."""
            calls.append(("boom", {}))
            raise ToolError("the boom tool exploded")

        @server.tool()
        def big(words: int) -> str:
            """Return that many numbered words."""
            calls.append(("big", {"words": words}))
            return " ".join(f"w{i}" for i in range(words))

        @server.tool()
        async def slow(seconds: float) -> str:
            """Wait, then answer."""
            calls.append(("slow", {"seconds": seconds}))
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline and not self.release.is_set():
                await anyio.sleep(0.02)
            return "slept"

        @server.tool()
        def report(step: int, words: int) -> str:
            """A step's report: its serial number, then that many filler words."""
            calls.append(("report", {"step": step, "words": words}))
            filler = " ".join(f"w{i}" for i in range(words))
            return f"Step {step} report: serial S{step * 7919}. {filler}"

        @server.tool()
        def note_save(key: str, value: str) -> str:
            """Save a note under a key."""
            self.notes[key] = value
            return f"saved {key}"

        @server.tool()
        def note_read(key: str) -> str:
            """Read the note saved under a key."""
            if key not in self.notes:
                raise ToolError(f"no note {key}")
            return self.notes[key]

        @server.custom_route("/redirect/mcp", methods=["GET", "POST", "DELETE"])
        async def redirect(request: Request) -> RedirectResponse:
            return RedirectResponse(f"http://127.0.0.1:{self.port}/mcp", status_code=307)

        return server

    def _recording(self, app):  # type: ignore[no-untyped-def]
        seen = self.seen_headers

        async def wrapped(scope, receive, send):  # type: ignore[no-untyped-def]
            if scope["type"] == "http":
                seen.append({k.decode().lower(): v.decode() for k, v in scope["headers"]})
            await app(scope, receive, send)

        return wrapped

    def _holding_cancels(self, app):  # type: ignore[no-untyped-def]
        async def wrapped(scope, receive, send):  # type: ignore[no-untyped-def]
            if (
                scope["type"] != "http"
                or scope["method"] != "POST"
                or not self.hold_cancels.is_set()
            ):
                await app(scope, receive, send)
                return
            chunks, more = [], True
            while more:
                message = await receive()
                chunks.append(message.get("body", b""))
                more = message.get("more_body", False)
            body = b"".join(chunks)
            if b"notifications/cancelled" in body:
                self.cancels_held += 1
                while not self.release.is_set():
                    await anyio.sleep(0.02)
            replay = [{"type": "http.request", "body": body, "more_body": False}]

            async def replayed():  # type: ignore[no-untyped-def]
                return replay.pop() if replay else await receive()

            await app(scope, replayed, send)

        return wrapped

    def start(self) -> TestMCPServer:
        self._servers = []
        self._threads: list[threading.Thread] = []
        apps = [
            (self._recording(self.app.streamable_http_app()), self.port),
            (self._recording(self._holding_cancels(self.app.sse_app())), self.sse_port),
        ]
        for app, port in apps:
            config = uvicorn.Config(
                app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"
            )
            server = uvicorn.Server(config)
            server.install_signal_handlers = lambda: None  # type: ignore[method-assign]
            thread = threading.Thread(target=server.run, daemon=True, name=f"mcp-{port}")
            thread.start()
            self._threads.append(thread)
            self._servers.append(server)
        deadline = time.monotonic() + 20
        while not all(s.started for s in self._servers):
            if time.monotonic() > deadline:
                raise RuntimeError("the test MCP server did not start")
            time.sleep(0.02)
        return self

    def stop(self, *, wait: bool = False) -> None:
        """Stop serving; ``wait``: until the ports refuse connections (``start`` serves again)."""
        for server in self._servers:
            server.should_exit = True
        for thread in self._threads if wait else []:
            thread.join(timeout=20)

    def reset(self) -> None:
        self.seen_headers.clear()
        self.calls.clear()
        self.notes.clear()
        self.release.clear()
        self.hold_cancels.clear()
        self.cancels_held = 0


_shared: TestMCPServer | None = None


@pytest.fixture(scope="session")
def mcp_server_session() -> Iterator[TestMCPServer]:
    global _shared
    if _shared is None:
        _shared = TestMCPServer().start()
    yield _shared


@pytest.fixture
def mcp_server(mcp_server_session: TestMCPServer) -> Iterator[TestMCPServer]:
    mcp_server_session.reset()
    yield mcp_server_session
    mcp_server_session.release.set()  # a slow call still running ends now
