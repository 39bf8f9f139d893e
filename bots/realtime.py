"""Realtime fan-out: group names, frame shapes and the notify_* helpers (CONTRACT §12).

The channel layer is lossy transport, not the store: every frame here describes something that is
already persisted, and clients resync over REST (``?after_seq=``) after a reconnect.
"""

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any

import structlog
from asgiref.sync import async_to_sync
from channels.layers import InMemoryChannelLayer, get_channel_layer
from django.conf import settings

from bots.models import Message
from chat_platform.isotime import iso_utc

log = structlog.get_logger(__name__)

# The consumer's handler for every frame is ``chat_frame`` (channels maps "chat.frame" to it).
FRAME_EVENT = "chat.frame"


def session_group(session_id: int) -> str:
    return f"chat-session-{session_id}"


def message_payload(message: Message) -> dict[str, Any]:
    """The one public shape of a message (REST and websocket)."""
    payload: dict[str, Any] = {
        "id": message.pk,
        "seq": message.seq,
        "role": message.role,
        "kind": message.kind,
        "content": message.content,
        "status": message.status,
        "token_count": message.token_count,
        "pinned": message.pinned,
        "compacted": getattr(message, "compacted_by_id", None) is not None,
        "created_at": iso_utc(message.created_at),
        "finish_reason": message.finish_reason,
    }
    # Recall steps in the transcript: what was asked (assistant) and which tool answered (tool).
    if message.tool_calls:
        payload["tool_calls"] = message.tool_calls
    if message.tool_name:
        payload["tool_name"] = message.tool_name
    if message.error_code:
        payload["error"] = {"code": message.error_code, "message": message.error_message}
    return payload


class _LayerLoop:
    """One event loop thread per process for sending to the Redis channel layer from sync code.

    ``async_to_sync`` would start an event loop (and a connection pool of channels-redis, which
    keeps one per loop) for every frame, and copy the calling thread's context into it and back;
    a turn sends a frame every 50 ms. Here the loop and its connections live as long as the
    process (a forked child starts its own).

    Sends that share an ``order`` key (a session) run one after another in the order they were
    handed over, whether their callers wait or not: two group sends in flight at once could
    otherwise reach Redis in either order."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0
        self._tails: dict[Any, asyncio.Task] = {}  # the last send per order key (loop thread)

    def run(self, coroutine: Any, *, timeout: float, order: Any = None) -> Any:
        return self._start(coroutine, order).result(timeout)

    def submit(
        self, coroutine: Any, *, on_error: Callable[[BaseException], None], order: Any = None
    ) -> None:
        """Start ``coroutine`` on the loop and return at once; ``on_error`` hears of a failure."""

        def done(future: Any) -> None:
            if not future.cancelled() and future.exception() is not None:
                on_error(future.exception())

        self._start(coroutine, order).add_done_callback(done)

    def _start(self, coroutine: Any, order: Any) -> Any:
        if order is not None:
            coroutine = self._after_previous(order, coroutine)
        return asyncio.run_coroutine_threadsafe(coroutine, self._running())

    async def _after_previous(self, order: Any, coroutine: Any) -> Any:
        # Tasks take their first step in the order they were handed to the loop, so the chain
        # follows the order of the calls.
        previous = self._tails.get(order)
        current = asyncio.current_task()
        assert current is not None
        self._tails[order] = current
        try:
            if previous is not None:
                with contextlib.suppress(BaseException):  # its failure is its caller's
                    await previous
            return await coroutine
        finally:
            if self._tails.get(order) is current:
                del self._tails[order]

    def _running(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid() or self._loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="channel-layer", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
                self._tails = {}
            return self._loop


_layer_loop = _LayerLoop()
SEND_TIMEOUT_SECONDS = 10.0


def send_frame(session_id: int, frame: dict[str, Any]) -> None:
    send_frames(session_id, [frame])


def send_frames(session_id: int, frames: list[dict[str, Any]], *, wait: bool = True) -> None:
    """Send frames, in order, to the session's sockets.

    ``wait=False`` returns before Redis has them: the send path uses it for its
    ``message.created`` frames so that handing the turn to a worker does not wait on their round
    trips. Frames for one session from one process leave in the order they were sent, waited
    for or not. Across processes there is no order: a worker's first delta comes after a
    worker picked the turn up, read the context and heard from the provider, long after; a
    client that sees a delta before its message anyway resyncs, as after any lost frame."""
    layer = get_channel_layer()
    if layer is None or not frames:
        return
    group = session_group(session_id)
    messages = [{"type": FRAME_EVENT, "frame": frame} for frame in frames]

    def failed(exc: BaseException | None = None) -> None:
        # The layer is best-effort: the database already holds the truth.
        for frame in frames:
            log.warning("realtime_send_failed", session_id=session_id, frame_type=frame.get("type"))

    async def send_all() -> None:
        for message in messages:
            await layer.group_send(group, message)

    try:
        if isinstance(layer, InMemoryChannelLayer):
            # Its queues belong to the server's event loop: async_to_sync sends on that loop.
            async_to_sync(send_all)()
        elif wait:
            _layer_loop.run(
                asyncio.wait_for(send_all(), SEND_TIMEOUT_SECONDS * len(messages)),
                timeout=2 * SEND_TIMEOUT_SECONDS * len(messages),
                order=session_id,
            )
        else:
            _layer_loop.submit(
                asyncio.wait_for(send_all(), SEND_TIMEOUT_SECONDS * len(messages)),
                on_error=failed,
                order=session_id,
            )
    except Exception:
        failed()


def notify_message_created(message: Message) -> None:
    send_frame(message.session_id, {"type": "message.created", "message": message_payload(message)})


def notify_exchange_created(messages: list[Message], *, wait: bool = False) -> None:
    """``message.created`` for a new exchange (the user's message, its reply), in order; by
    default sent without waiting (see ``send_frames``)."""
    send_frames(
        messages[0].session_id,
        [{"type": "message.created", "message": message_payload(m)} for m in messages],
        wait=wait,
    )


def notify_message_delta(message: Message, delta: str) -> None:
    send_frame(
        message.session_id, {"type": "message.delta", "message_id": message.pk, "delta": delta}
    )


def notify_message_completed(message: Message, *, wait: bool = True) -> None:
    send_frames(
        message.session_id,
        [{"type": "message.completed", "message": message_payload(message)}],
        wait=wait,
    )


def notify_message_failed(message: Message) -> None:
    send_frame(
        message.session_id,
        {
            "type": "message.failed",
            "message_id": message.pk,
            "error": {"code": message.error_code, "message": message.error_message},
            # The stored reply (status failed or interrupted, partial text kept) for clients
            # that render it without a resync.
            "message": message_payload(message),
        },
    )


def notify_context_updated(session_id: int, context: dict[str, Any]) -> None:
    send_frame(session_id, {"type": "context.updated", "context": context})


# --- "this reply is finished", for waiters in other processes (REST ``wait: true``) ----------


def reply_finished_channel(message_id: int) -> str:
    return f"chat-platform:reply-finished:{message_id}"


@lru_cache(maxsize=1)
def _redis() -> Any:
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)


def publish_reply_finished(message_id: int) -> None:
    """Wake whoever waits on this reply (best effort: waiters re-check the database anyway)."""
    if not settings.REDIS_URL:
        return
    try:
        _redis().publish(reply_finished_channel(message_id), b"1")
    except Exception:
        log.warning("reply_finished_publish_failed", message_id=message_id)


def wait_reply_finished(
    message_id: int, *, is_finished: Callable[[], bool], timeout: float
) -> None:
    """Block until ``is_finished()`` or ``timeout``: woken by ``publish_reply_finished``, not by
    polling. The database stays the truth: it is checked after subscribing (so a finish that
    lands in between is not missed) and again at least every few seconds in case a wake-up was
    lost. Without Redis (embedded mode) it falls back to a short poll."""
    deadline = time.monotonic() + timeout
    if not settings.REDIS_URL:
        while not is_finished() and time.monotonic() < deadline:
            time.sleep(0.1)
        return
    pubsub = _redis().pubsub(ignore_subscribe_messages=True)
    try:
        pubsub.subscribe(reply_finished_channel(message_id))
        while not is_finished():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            pubsub.get_message(timeout=min(remaining, WAIT_RECHECK_SECONDS))
    finally:
        pubsub.close()


WAIT_RECHECK_SECONDS = 5.0
