"""The short road to OpenAI-compatible servers for streamed chat turns.

A bot whose model is ``openai/<name>`` with its own ``api_base`` (vLLM, llama.cpp, Ollama's
``/v1``, LM Studio, a gateway of the operator's) speaks plain OpenAI chat completions: one POST,
server-sent events back. litellm's streaming wrapper costs about six times the CPU of reading
those events directly (93 ms against 15 ms for a 50-chunk answer here, ``bench/turn_overhead.py``
prints the gateway's cost beside the direct call), and a turn's chunks are read on the worker's
hot path. So the gateway streams these calls itself, over one pooled ``httpx.Client`` per
process, and leaves everything else to litellm: other providers, OpenAI's own API (whose models
need litellm's parameter mapping), built-in models and non-streamed calls.

Chunks come back as the dicts the server sent; the gateway's loop reads them exactly as it reads
litellm's objects. Failures are ``ProviderHTTPError`` (an HTTP status, with the provider's own
message) or httpx's transport errors and timeouts, which the gateway classifies like litellm's.
``LLM_DIRECT_OPENAI_COMPATIBLE=false`` sends these calls through litellm too.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import httpx
from httpx_sse._decoders import SSEDecoder  # see SSEStream for why not EventSource

from chat_platform.llm import sse_body
from chat_platform.llm.retries import retry_after_seconds

OPENAI_PREFIX = "openai/"
# OpenAI's own API: litellm maps parameters per model family (o-series, reasoning models).
_LITELLM_HOSTS = frozenset({"api.openai.com"})


class ProviderHTTPError(Exception):
    """The provider answered with an HTTP error status (or an error event mid-stream)."""

    def __init__(
        self, status_code: int | None, message: str, retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retry_after = retry_after  # seconds the answer asked to wait (``Retry-After``)


class ProviderProtocolError(Exception):
    """The provider's stream could not be read as OpenAI chat-completion chunks."""


def is_direct(model: str, api_base: str, *, enabled: bool = True) -> bool:
    """Is this call streamed by this module (else by litellm)?"""
    if not (enabled and api_base and model.startswith(OPENAI_PREFIX)):
        return False
    return (urlsplit(api_base).hostname or "").lower() not in _LITELLM_HOSTS


_client: httpx.Client | None = None
_client_pid = 0
_client_lock = threading.Lock()


def _http() -> httpx.Client:
    """One connection pool per process (a forked child builds its own)."""
    global _client, _client_pid
    with _client_lock:
        if _client is None or _client_pid != os.getpid():
            _client = httpx.Client(
                # Redirects are not followed: the provider policy approved this address only.
                follow_redirects=False,
                limits=httpx.Limits(max_connections=None, max_keepalive_connections=64),
            )
            _client_pid = os.getpid()
        return _client


def open_stream(kwargs: dict[str, Any]) -> SSEStream:
    """POST the call the gateway built (``request.call_kwargs``) and return its chunks once the
    server has answered 200; an error status raises ``ProviderHTTPError`` with the provider's
    message."""
    body: dict[str, Any] = {
        "model": kwargs["model"][len(OPENAI_PREFIX) :],
        "messages": kwargs["messages"],
        "temperature": kwargs["temperature"],
        "max_tokens": kwargs["max_tokens"],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if kwargs.get("tools"):
        body["tools"] = kwargs["tools"]
    if kwargs.get("stop"):
        body["stop"] = kwargs["stop"]
    # Exactly the key the gateway chose (the bot's variable, or the placeholder local servers
    # accept): never the server's own OPENAI_API_KEY.
    key = kwargs.get("api_key")
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    url = kwargs["api_base"].rstrip("/") + "/chat/completions"
    client = _http()
    request = client.build_request(
        "POST", url, json=body, headers=headers, timeout=httpx.Timeout(kwargs["timeout"])
    )
    response = client.send(request, stream=True)
    if not response.is_success:
        try:
            message = _error_message(response, _read_capped(response))
        finally:
            response.close()
        raise ProviderHTTPError(
            response.status_code, message, retry_after_seconds(response.headers)
        )
    return SSEStream(response)


# An error's body is read for its message only (the first line, cut to 160 characters): a server
# that answers an error with an endless or huge body must not fill the worker's memory.
ERROR_BODY_MAX_BYTES = 64 * 1024


def _read_capped(response: httpx.Response) -> bytes:
    body = bytearray()
    for part in response.iter_bytes():
        body += part
        if len(body) >= ERROR_BODY_MAX_BYTES:
            break
    return bytes(body[:ERROR_BODY_MAX_BYTES])


def _error_message(response: httpx.Response, body: bytes) -> str:
    if response.is_redirect:
        # Never where it pointed: this text reaches the user (docs/security.md).
        return "redirected, not followed"
    text = body.decode(response.encoding or "utf-8", errors="replace").strip()
    try:
        payload = json.loads(body)
    except ValueError:
        return text or response.reason_phrase
    error = payload.get("error") if isinstance(payload, dict) else None
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    if isinstance(error, str):
        return error
    return text or response.reason_phrase


class SSEStream:
    """The chunks (dicts) of one streamed chat completion, read as server-sent events.

    The SSE rules (comments, ``event:``/``id:`` fields, an event's data over several lines, the
    optional space after the colon) are httpx-sse's ``SSEDecoder``, fed with the body's lines
    (``sse_body``: read off the connection itself, not through httpx's iterators). Its
    ``EventSource.iter_sse`` is not used: it refuses a response whose Content-Type is not
    ``text/event-stream`` and drops a last event that the server ended without its blank line,
    and OpenAI-compatible servers do both (this road has always read them)."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.done = False  # the server's "[DONE]" arrived: the stream ended whole

    def __iter__(self) -> Iterator[dict[str, Any]]:
        decoder = SSEDecoder()
        parts = sse_body.body_parts(self.response)
        lines = sse_body.lines(parts, self.response.encoding or "utf-8")
        # "": the end of the body ends a last event that had no blank line after it.
        for line in itertools.chain(lines, ("",)):
            event = decoder.decode(line)
            if event is None or not event.data:
                continue
            if event.data == "[DONE]":
                self.done = True
                for _ in parts:  # read to the end: the connection goes back to the pool
                    pass
                return
            yield _chunk(event.data)

    def close(self) -> None:
        self.response.close()


def _chunk(payload: str) -> dict[str, Any]:
    try:
        chunk = json.loads(payload)
    except ValueError:
        raise ProviderProtocolError("the provider sent an event that is not JSON") from None
    if not isinstance(chunk, dict):
        raise ProviderProtocolError("the provider sent an event that is not a JSON object")
    error = chunk.get("error")
    if error and not chunk.get("choices"):
        message = error.get("message") if isinstance(error, dict) else str(error)
        code = error.get("code") if isinstance(error, dict) else None
        raise ProviderHTTPError(code if isinstance(code, int) else None, str(message or error))
    return chunk
