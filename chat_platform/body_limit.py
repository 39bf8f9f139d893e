"""Request bodies are bounded before they are read (docs/security.md, "Request bodies").

Django's ASGI handler copies a request's whole body to a temporary file before any middleware
or view runs, so the views' own size checks came after the copy: anyone, signed in or not,
could make a web process spool 40 MB (or, sent chunked, any size) to disk. ``BodyLimit`` wraps
the HTTP application: a request whose ``Content-Length`` is over its path's limit is answered
``413 payload_too_large`` without reading a byte of it, and one sent without a length is counted
as it arrives and cut off at the limit (the application hears the client leave, and the answer
is the same 413).

The limits: an import (``IMPORT_MAX_BYTES``), an attachment (``ATTACHMENT_MAX_BYTES``), and
anything else ``DATA_UPLOAD_MAX_MEMORY_SIZE`` (what Django reads of a body that is not a file),
each with ``ENVELOPE_BYTES`` more for the form's fields and boundaries.
"""

from __future__ import annotations

import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

ENVELOPE_BYTES = 64 * 1024
# (method, path) -> the setting that bounds its body; first match wins.
_LIMITS: tuple[tuple[str, re.Pattern[str], str], ...] = (
    ("POST", re.compile(r"^/api/v1/import/$"), "IMPORT_MAX_BYTES"),
    ("POST", re.compile(r"^/api/v1/sessions/\d+/attachments/$"), "ATTACHMENT_MAX_BYTES"),
)
DEFAULT_SETTING = "DATA_UPLOAD_MAX_MEMORY_SIZE"

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def body_limit(method: str, path: str) -> int:
    """The most bytes a request's body may hold, envelope included."""
    name = next((s for m, p, s in _LIMITS if m == method and p.match(path)), DEFAULT_SETTING)
    return int(getattr(settings, name)) + ENVELOPE_BYTES


def _declared_length(scope: Scope) -> int | None:
    for name, value in scope.get("headers") or ():
        if name.lower() == b"content-length":
            text = value.decode("latin-1").strip()
            return int(text) if text.isdigit() else None
    return None


def _refusal(path: str, limit: int) -> bytes:
    message = f"The request is larger than {limit:,} bytes."
    if path.startswith("/v1/"):  # the OpenAI-compatible API's own error shape
        error: dict[str, Any] = {
            "message": message,
            "type": "invalid_request_error",
            "code": "payload_too_large",
            "param": None,
        }
    else:
        error = {"code": "payload_too_large", "message": message, "details": {"max_bytes": limit}}
    return json.dumps({"error": error}).encode()


async def _refuse(send: Send, path: str, limit: int) -> None:
    body = _refusal(path, limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: the HTTP application never reads past its path's body limit."""

    def __init__(self, app: Callable[[Scope, Receive, Send], Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope.get("path", "")
        limit = body_limit(scope.get("method", "GET"), path)
        declared = _declared_length(scope)
        if declared is not None and declared > limit:
            await _refuse(send, path, limit)
            return
        received, over, started = 0, False, False

        async def counted() -> Message:
            nonlocal received, over
            if over:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body") or b"")
                if received > limit:
                    over = True
                    return {"type": "http.disconnect"}
            return message

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        await self.app(scope, counted, watched)
        if over and not started:
            await _refuse(send, path, limit)
