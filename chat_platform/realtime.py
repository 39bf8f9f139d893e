"""The frame transport (docs/api.md): the session group, the one send path to the channel layer,
and the process's one Redis client.

Every app publishes its frames through here (the chat turn, compaction's meter, memory's index),
so none of them imports another to reach a socket. The frame *shapes* belong to their owners:
``bots.realtime`` (messages), ``memory.realtime`` (records, recall); this module knows only
groups, the event name and how a frame reaches Redis.

The channel layer is lossy transport, not the store: every frame describes something that is
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

log = structlog.get_logger(__name__)

# The consumer's handler for every frame is ``chat_frame`` (channels maps "chat.frame" to it).
FRAME_EVENT = "chat.frame"


def session_group(session_id: int) -> str:
    return f"chat-session-{session_id}"


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
        self._pending: dict[Any, int] = {}  # sends handed over and not done, per order key

    def pending(self, order: Any) -> bool:
        """Whether a send of this order key was handed to the loop and is not done: a send that
        skips the loop (``send_frames``) must not overtake it."""
        return order in self._pending

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
        loop = self._running()
        if order is None:
            return asyncio.run_coroutine_threadsafe(coroutine, loop)
        with self._lock:
            self._pending[order] = self._pending.get(order, 0) + 1

        def done(_: Any) -> None:
            with self._lock:
                left = self._pending.pop(order, 1) - 1
                if left > 0:
                    self._pending[order] = left

        future = asyncio.run_coroutine_threadsafe(self._after_previous(order, coroutine), loop)
        future.add_done_callback(done)
        return future

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
                self._tails, self._pending = {}, {}
            return self._loop


_layer_loop = _LayerLoop()
SEND_TIMEOUT_SECONDS = 10.0

# The in-memory layer (embedded mode) keeps its queues on the event loop of the sockets and
# streams that listen (the ASGI server's one loop): a frame sent from any other thread, e.g. a
# turn on an in-process task thread (chat_platform/inprocess.py), must be handed to that loop.
_listeners_loop: asyncio.AbstractEventLoop | None = None


def frames_listen_here() -> None:
    """Called on the event loop of a listener (a websocket, a ``/v1`` stream) before it joins a
    group: frames of the in-memory layer are sent on this loop from then on."""
    global _listeners_loop
    _listeners_loop = asyncio.get_running_loop()


def _send_in_memory(send_all: Callable[[], Any], count: int) -> None:
    loop = _listeners_loop
    if loop is not None and loop.is_running():
        future = asyncio.run_coroutine_threadsafe(send_all(), loop)
        future.result(SEND_TIMEOUT_SECONDS * count)
    else:  # nobody listens on a loop yet: asgiref finds the caller's own (or makes one)
        async_to_sync(send_all)()


def send_frame(session_id: int, frame: dict[str, Any]) -> None:
    send_frames(session_id, [frame])


# Not relayed: a socket that gets it closes 4404, as a handshake to the deleted chat would be.
CHAT_DELETED = "chat.deleted"


def sockets_close_deleted(session_ids: list[int]) -> None:
    """The chats were deleted: their open sockets end (``bots.consumers``), best-effort."""
    for session_id in session_ids:
        send_frames(session_id, [{"type": CHAT_DELETED}], wait=False)


def frames_heard(session_id: int) -> bool:
    """Whether a frame for this chat can reach anyone: False only where that is known, with the
    in-memory layer (embedded mode) when no socket of this process listens to the chat. A frame
    that costs a query to build asks first (docs/performance.md, "The tool task")."""
    layer = get_channel_layer()
    if layer is None:
        return False
    return not isinstance(layer, InMemoryChannelLayer) or session_group(session_id) in layer.groups


def send_frames(session_id: int, frames: list[dict[str, Any]], *, wait: bool = True) -> None:
    """Send frames, in order, to the session's sockets.

    ``wait=False`` returns before Redis has them: the send path uses it for its
    ``message.created`` frames so that handing the turn to a worker does not wait on their round
    trips. Frames for one session from one process leave in the order they were sent, waited
    for or not. Across processes there is no order: a worker's first delta comes after a
    worker picked the turn up, read the context and heard from the provider, long after; a
    client that sees a delta before its message anyway resyncs, as after any lost frame."""
    if not frames or not frames_heard(session_id):
        # With the in-memory layer and nobody listening, the layer would drop the frames after
        # a trip to an event loop each (a long tool task sent ~8 frames a step).
        return
    layer = get_channel_layer()
    group = session_group(session_id)
    messages = [{"type": FRAME_EVENT, "frame": frame} for frame in frames]

    def failed(exc: BaseException | None = None) -> None:
        # The layer is best-effort: the database already holds the truth.
        _failures.note(session_id=session_id, frames=frames)

    async def send_all() -> None:
        send_many = getattr(layer, "group_send_many", None)
        if send_many is not None:  # the Redis layer: one round trip (docs/performance.md)
            await send_many(group, messages)
            return
        for message in messages:
            await layer.group_send(group, message)

    try:
        if isinstance(layer, InMemoryChannelLayer):
            _send_in_memory(send_all, len(messages))
        elif wait and _sent_now(layer, group, messages, order=session_id):
            pass
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


class _FailureLog:
    """``realtime_send_failed``, at most one line every ``EVERY_SECONDS`` per process, counting
    the frames it stands for: while Redis was down a turn's every delta logged a line of its
    own, ~40 a second, burying the outage's one useful line."""

    EVERY_SECONDS = 5.0

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.lock = threading.Lock()
        self.next_at = float("-inf")
        self.held = 0

    def note(self, *, session_id: int, frames: list[dict[str, Any]]) -> None:
        with self.lock:
            now = self.clock()
            self.held += len(frames)
            if now < self.next_at:
                return
            self.next_at = now + self.EVERY_SECONDS
            count, self.held = self.held, 0
        log.warning(
            "realtime_send_failed",
            session_id=session_id,
            frame_type=frames[0].get("type") if frames else None,
            frames=count,
            every_seconds=self.EVERY_SECONDS,
        )


_failures = _FailureLog(time.monotonic)


def _sent_now(layer: Any, group: str, messages: list[dict], *, order: Any) -> bool:
    """A waited send straight from this thread (``group_send_many_now``), unless one of the same
    chat is still on its way through the event loop: frames of a chat leave in order."""
    send_now = getattr(layer, "group_send_many_now", None)
    if send_now is None or _layer_loop.pending(order):
        return False
    return bool(send_now(group, messages))


def notify_context_updated(
    session_id: int, context: dict[str, Any], *, bot: dict[str, Any] | None = None
) -> None:
    """``bot``: in a room, the bot whose context it is (``{id, slug, name}``)."""
    frame: dict[str, Any] = {"type": "context.updated", "context": context}
    if bot is not None:
        frame["bot"] = bot
    send_frame(session_id, frame)


@lru_cache(maxsize=1)
def redis_client() -> Any:
    """The process's one Redis client (real mode): the reply-finished wake-ups and the compaction
    lease share its connection pool. Short timeouts: a Redis that does not answer is an outage,
    reported as one, never a hang."""
    import redis

    return redis.Redis.from_url(settings.REDIS_URL, socket_timeout=5, socket_connect_timeout=2)
