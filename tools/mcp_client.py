"""The one road to MCP servers: the official ``mcp`` SDK's client, under our outbound rules.

No protocol code of our own: ``mcp.client.Client`` over ``streamable_http_client`` (default) or
``sse_client`` (older servers) does the talking. What this module adds is the policy around it
(docs/tools.md, "Security"):

* **One origin.** Every request goes to the scheme, host and port staff gave as the server's URL
  (any address, loopback and private included: staff chose it). A request anywhere else — an SSE
  server whose ``endpoint`` event names another host, a token endpoint — is refused before it
  is sent.
* **No redirect is followed**, not even one the SDK would follow within the origin: a 3xx answer
  fails the call with a reason naming the status, never the location.
* **Bounded.** Each listing or call runs under its own deadline (``anyio.fail_after``); a server
  that is down or slow costs at most that, and its failure is a ``ToolServerError`` whose text
  is fit for a user or a model (never a header value: the SDK's errors are reduced to a reason).
* **No ambient proxy or credentials** (``trust_env=False``).

``tools_list`` is synchronous (the web tier's threads) and runs its own event loop, in a helper
thread when the calling thread already has one. A reply's calls run on the sessions it keeps
open (``tools.mcp_sessions``).
"""

from __future__ import annotations

import concurrent.futures
import json
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

import anyio
import httpx2
import structlog

from chat_platform.textcheck import json_made_storable, text_made_storable

if TYPE_CHECKING:
    # The SDK costs 1.3 s to import: every Django process imports this module (the tool admin
    # and services), only a tool round or a listing needs the SDK, so it is imported there.
    from mcp.client import Client

log = structlog.get_logger(__name__)

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
# How often a running round looks at its stop flag.
STOP_POLL_SECONDS = 0.25

T = TypeVar("T")


class ToolServerError(Exception):
    """A listing or a call that could not be made; ``str()`` is the reason, fit to show."""


@dataclass(frozen=True)
class Endpoint:
    name: str
    url: str
    transport: str = "streamable-http"
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CallOutcome:
    ok: bool
    text: str
    seconds: float = 0.0


def _origin(url: httpx2.URL) -> tuple[str, str, int | None]:
    return (url.scheme, url.host, url.port)


# The most one answer of a tool server may carry (a call's result, a listing, a stream of
# notifications): a 30 MB result was read and parsed whole before any check (457 MB of the
# worker's memory, 6 s; audit). Past it the answer is cut off and the call fails.
RESPONSE_MAX_BYTES = 8 * 1024 * 1024


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that ends in an error past ``RESPONSE_MAX_BYTES``."""

    def __init__(self, stream: Any, name: str) -> None:
        self.stream, self.name = stream, name

    async def __aiter__(self) -> Any:
        seen = 0
        async for chunk in self.stream:
            seen += len(chunk)
            if seen > RESPONSE_MAX_BYTES:
                # The SDK reports the cut as a closed connection; the log says why.
                log.warning(
                    "tool_server_answer_too_large", server=self.name, limit=RESPONSE_MAX_BYTES
                )
                raise ToolServerError(
                    f"the tool server {self.name} sent more than {RESPONSE_MAX_BYTES:,} bytes "
                    "in one answer"
                )
            yield chunk

    async def aclose(self) -> None:
        await self.stream.aclose()


class _CappedTransport(httpx2.AsyncHTTPTransport):
    def __init__(self, name: str) -> None:
        super().__init__(trust_env=False)
        self.name = name

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        response = await super().handle_async_request(request)
        response.stream = _CappedStream(response.stream, self.name)
        return response


def _http_client(
    endpoint: Endpoint, timeout: float | None, *, capped: bool = True
) -> httpx2.AsyncClient:
    """``capped``: each answer within ``RESPONSE_MAX_BYTES`` (streamable HTTP, where each request
    has its own; not the SSE transport, whose one stream carries every answer of a session)."""
    allowed = _origin(httpx2.URL(endpoint.url))

    async def on_request(request: httpx2.Request) -> None:
        if _origin(request.url) != allowed:
            raise ToolServerError(
                f"the tool server {endpoint.name} sent the client to another address; refused"
            )

    async def on_response(response: httpx2.Response) -> None:
        if response.status_code in _REDIRECTS:
            log.warning(
                "tool_server_redirect_refused",
                server=endpoint.name,
                status=response.status_code,
                location=response.headers.get("location", ""),
            )
            raise ToolServerError(
                f"the tool server {endpoint.name} answered with a redirect "
                f"(HTTP {response.status_code}), not followed"
            )

    return httpx2.AsyncClient(
        headers=dict(endpoint.headers),
        timeout=httpx2.Timeout(timeout),
        follow_redirects=False,
        trust_env=False,
        event_hooks={"request": [on_request], "response": [on_response]},
        transport=_CappedTransport(endpoint.name) if capped else None,
    )


def mcp_client(
    endpoint: Endpoint, timeout: float | None
) -> tuple[Client, httpx2.AsyncClient | None]:
    """The SDK's client for ``endpoint`` under the outbound rules, and the HTTP client it uses
    when the caller must close it (streamable HTTP; the SSE transport closes its own).
    ``timeout`` bounds each of its requests and HTTP reads for the client's whole life; ``None``
    for a client whose every use has a deadline of its own (a reply's sessions:
    ``tools.mcp_sessions``)."""
    from mcp.client import Client
    from mcp.client.sse import sse_client
    from mcp.client.streamable_http import streamable_http_client

    if endpoint.transport == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _http_client(endpoint, limit, capped=False)

        limit = timeout
        transport: Any = sse_client(endpoint.url, httpx_client_factory=factory)
        return Client(transport, cache=None, read_timeout_seconds=timeout), None
    http = _http_client(endpoint, timeout)
    transport = streamable_http_client(endpoint.url, http_client=http)
    return Client(transport, cache=None, read_timeout_seconds=timeout), http


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def failure_reason(exc: BaseException, *, endpoint: Endpoint, timeout: float) -> str:
    """What went wrong, in words fit for a user or a model (never a header or a key)."""
    from mcp.shared.exceptions import MCPError

    leaf = _leaf(exc)
    if isinstance(leaf, ToolServerError):
        return str(leaf)
    if isinstance(leaf, TimeoutError):
        return f"the tool server {endpoint.name} did not answer within {timeout:g} s"
    if isinstance(leaf, httpx2.HTTPStatusError):
        return f"the tool server {endpoint.name} answered HTTP {leaf.response.status_code}"
    if isinstance(leaf, httpx2.TimeoutException):
        return f"the tool server {endpoint.name} did not answer within {timeout:g} s"
    if isinstance(leaf, httpx2.TransportError):
        return f"the tool server {endpoint.name} cannot be reached"
    if isinstance(leaf, MCPError):
        # The server's own words, stored as a refresh error or a call's result.
        return text_made_storable(f"the tool server {endpoint.name} refused: {leaf.message}")[:500]
    return f"the tool server {endpoint.name} failed ({type(leaf).__name__})"


def _run(factory: Callable[[], Awaitable[T]]) -> T:
    """Run a coroutine to its end on a loop of its own (a helper thread if this one has one)."""
    try:
        import asyncio

        asyncio.get_running_loop()
    except RuntimeError:
        return anyio.run(factory)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(anyio.run, factory).result()


def tools_list(endpoint: Endpoint, *, timeout: float) -> list[dict[str, Any]]:
    """The server's tools as ``{name, description, input_schema}``; ``ToolServerError`` when the
    list cannot be read within ``timeout`` seconds."""

    async def fetch() -> list[dict[str, Any]]:
        with anyio.fail_after(timeout):
            client, http = mcp_client(endpoint, timeout)
            async with AsyncExitStack() as stack:
                if http is not None:
                    await stack.enter_async_context(http)
                await stack.enter_async_context(client)
                found: list[dict[str, Any]] = []
                cursor: str | None = None
                for _ in range(20):  # pages
                    page = await client.list_tools(cursor=cursor)
                    found.extend(
                        json_made_storable(
                            {
                                "name": tool.name,
                                "description": tool.description or "",
                                "input_schema": tool.input_schema or {"type": "object"},
                            }
                        )
                        for tool in page.tools
                    )
                    cursor = page.next_cursor
                    if not cursor:
                        break
                return found

    try:
        return _run(fetch)
    except Exception as exc:
        reason = failure_reason(exc, endpoint=endpoint, timeout=timeout)
        log.info("tool_server_list_failed", server=endpoint.name, reason=reason)
        raise ToolServerError(reason) from None


def result_text(result: Any) -> str:
    """A call result as text: its text parts, a placeholder for anything else, else the
    structured content as JSON; made storable (a server's text is stored as a message)."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '') or 'binary'}]")
        elif kind == "resource_link":
            parts.append(f"[resource: {getattr(block, 'uri', '')}]")
        elif kind == "resource":
            resource = getattr(block, "resource", None)
            parts.append(getattr(resource, "text", None) or f"[resource: {kind}]")
    if not parts and result.structured_content is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    return text_made_storable("\n".join(parts))


@dataclass(frozen=True)
class Call:
    endpoint: Endpoint
    tool: str
    arguments: dict[str, Any]


STOPPED = "stopped by the user"
