"""The direct road: a streamed call to an OpenAI-compatible server is read by ``openai_compat``
instead of litellm's stream wrapper (see the package doc), and a built-in model's is made
in-process (``builtin_road``); and waking a thread that reads either HTTP road's socket."""

from __future__ import annotations

import contextlib
from typing import Any

from chat_platform.llm import openai_compat
from chat_platform.llm.gateway import builtin_road, lazy_litellm


def open_stream(kwargs: dict[str, Any], *, direct: bool) -> Any:
    if direct:
        return openai_compat.open_stream(kwargs)
    if builtin_road.is_builtin(kwargs["model"]):
        return builtin_road.BuiltinStream(kwargs)
    return lazy_litellm.get().completion(**kwargs)


def shutdown_socket(response: Any) -> None:
    """Wake a thread blocked reading this stream's socket.

    Closing an httpx response from another thread does not interrupt a ``recv`` already waiting
    on its socket (Linux), so a stop during a silent stretch would wait for the timeout.
    ``shutdown`` does interrupt it. Only HTTP streams have a socket; others are skipped.
    """
    import socket

    http_response = (
        response.response
        if isinstance(response, openai_compat.SSEStream)
        else getattr(getattr(response, "completion_stream", None), "response", None)
    )
    extensions = getattr(http_response, "extensions", None)
    network_stream = extensions.get("network_stream") if isinstance(extensions, dict) else None
    get_extra_info = getattr(network_stream, "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)
