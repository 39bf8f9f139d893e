"""The chat's frames (docs/api.md): a message's public shape and the ``notify_*`` helpers of
the turn, plus "this reply is finished" for REST waiters in other processes.

Groups and the send path are the platform's (``chat_platform.realtime``); this module only says
what a message frame holds.
"""

import contextlib
import time
from collections.abc import Callable
from typing import Any

import redis
import structlog
from django.conf import settings

from bots.models import Message
from chat_platform import realtime as transport
from chat_platform.errors import QuotaExceeded
from chat_platform.isotime import iso_utc
from connections import usage

log = structlog.get_logger(__name__)


def message_speaker(message: Message) -> dict[str, Any] | None:
    """The bot that spoke an assistant message, ``{id, slug, name}`` (docs/rooms.md); None for
    the user's messages, notices, and a bot since deleted. Read from what is loaded: the
    message's own bot, else its session's when it is the same bot (the one-bot case)."""
    if message.role != Message.Role.ASSISTANT or message.bot_id is None:
        return None
    bot = message._state.fields_cache.get("bot")
    if bot is None:
        session = message._state.fields_cache.get("session")
        cached = session._state.fields_cache.get("bot") if session is not None else None
        bot = cached if cached is not None and cached.pk == message.bot_id else message.bot
    return {"id": bot.pk, "slug": bot.slug, "name": bot.name}


def message_payload(message: Message, *, compacted: bool = False) -> dict[str, Any]:
    """The one public shape of a message (REST and websocket). ``compacted``: whether a summary
    of the seat it is shown to covers it, as the caller read it from the seat's coverage
    (``compaction.queries.seat_compacted_ids``, docs/rooms.md); a message just written or
    changed is covered by none."""
    payload: dict[str, Any] = {
        "id": message.pk,
        "seq": message.seq,
        "role": message.role,
        "kind": message.kind,
        "content": message.content,
        "status": message.status,
        "token_count": message.token_count,
        "pinned": message.pinned,
        "compacted": compacted,
        "created_at": iso_utc(message.created_at),
        "finish_reason": message.finish_reason,
        "bot": message_speaker(message),
    }
    # Recall steps in the transcript: what was asked (assistant) and which tool answered (tool).
    if message.tool_calls:
        payload["tool_calls"] = message.tool_calls
    if message.tool_name:
        payload["tool_name"] = message.tool_name
    if message.tool_call_id:
        payload["tool_call_id"] = message.tool_call_id
    # An MCP tool's result (docs/tools.md): its name as the model called it, and its ok flag.
    if message.tool_ok is not None:
        payload["name"] = message.tool_name
        payload["ok"] = message.tool_ok
    if message.error_code:
        payload["error"] = message_error(message)
    return payload


def message_error(message: Message) -> dict[str, Any]:
    """A failed reply's error as clients get it, in the API's error shape (``code``,
    ``message``, ``details``); a daily limit's details say what ran out and when it resets, so
    the chat can say so in words (docs/connections.md)."""
    details: dict[str, Any] = {}
    if message.error_code == QuotaExceeded.code:
        details = usage.refusal_details(message.error_message, at=message.updated_at)
    return {"code": message.error_code, "message": message.error_message, "details": details}


def notify_message_created(message: Message) -> None:
    transport.send_frame(
        message.session_id, {"type": "message.created", "message": message_payload(message)}
    )


def notify_exchange_created(messages: list[Message], *, wait: bool = False) -> None:
    """``message.created`` for a new exchange (the user's message, its reply), in order; by
    default sent without waiting (see ``send_frames``)."""
    transport.send_frames(
        messages[0].session_id,
        [{"type": "message.created", "message": message_payload(m)} for m in messages],
        wait=wait,
    )


def notify_message_delta(
    message: Message, delta: str, *, bot: dict[str, Any] | None = None, offset: int | None = None
) -> None:
    """``bot``: in a room, the speaking bot (``room_frame_bot``); a one-bot chat's frame has
    none. ``offset``: where ``delta`` starts in the reply's streamed text (UTF-16 units)."""
    frame: dict[str, Any] = {"type": "message.delta", "message_id": message.pk, "delta": delta}
    if offset is not None:
        frame["offset"] = offset
    if bot is not None:
        frame["bot"] = bot
    transport.send_frame(message.session_id, frame)


def room_frame_bot(session: Any) -> dict[str, Any] | None:
    """What a frame about one bot's doing carries in a room (docs/rooms.md: frames carry ``bot``
    where they concern one): ``{id, slug, name}`` of ``session``'s bot (a seat's: its own);
    None in a one-bot chat, whose frames are as they always were. Read from what is loaded."""
    if not session.is_room:
        return None
    bot = session.bot
    return {"id": bot.pk, "slug": bot.slug, "name": bot.name}


def notify_message_completed(message: Message, *, wait: bool = True) -> None:
    transport.send_frames(
        message.session_id,
        [{"type": "message.completed", "message": message_payload(message)}],
        wait=wait,
    )


def notify_message_failed(message: Message) -> None:
    transport.send_frame(
        message.session_id,
        {
            "type": "message.failed",
            "message_id": message.pk,
            "error": message_error(message),
            # The stored reply (status failed or interrupted, partial text kept) for clients
            # that render it without a resync.
            "message": message_payload(message),
        },
    )


# --- "this reply is finished", for waiters in other processes (REST ``wait: true``) ----------


def reply_finished_channel(message_id: int) -> str:
    return f"chat-platform:reply-finished:{message_id}"


def publish_reply_finished(message_id: int) -> None:
    """Wake whoever waits on this reply (best effort: waiters re-check the database anyway)."""
    if not settings.REDIS_URL:
        return
    try:
        transport.redis_client().publish(reply_finished_channel(message_id), b"1")
    except Exception:
        log.warning("reply_finished_publish_failed", message_id=message_id)


def wait_reply_finished(
    message_id: int, *, is_finished: Callable[[], bool], timeout: float
) -> None:
    """Block until ``is_finished()`` or ``timeout``: woken by ``publish_reply_finished``, not by
    polling. The database stays the truth: it is checked after subscribing (so a finish that
    lands in between is not missed) and again at least every few seconds in case a wake-up was
    lost. Without Redis (embedded mode) it falls back to a short poll; so does a wait whose
    Redis stops answering (the reply, stored, goes on in its worker: the waiter must not answer
    that nothing was done)."""
    deadline = time.monotonic() + timeout
    if not settings.REDIS_URL:
        _poll(is_finished, deadline, 0.1)
        return
    pubsub = transport.redis_client().pubsub()
    try:
        pubsub.subscribe(reply_finished_channel(message_id))
        # The subscription's confirmation first: from then on no finish can be missed, so one
        # check covers the time before it (a check before it needed a second one after it).
        pubsub.get_message(timeout=min(timeout, WAIT_RECHECK_SECONDS))
        while not is_finished():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            pubsub.get_message(timeout=min(remaining, WAIT_RECHECK_SECONDS))
    except redis.RedisError:
        log.warning("reply_wait_polls", message_id=message_id, exc_info=True)
        _poll(is_finished, deadline, WAIT_POLL_SECONDS)
    finally:
        with contextlib.suppress(redis.RedisError):
            pubsub.close()


def _poll(is_finished: Callable[[], bool], deadline: float, every: float) -> None:
    while not is_finished() and time.monotonic() < deadline:
        time.sleep(every)


WAIT_RECHECK_SECONDS = 5.0
# How often a wait whose Redis went away reads the reply instead.
WAIT_POLL_SECONDS = 0.5
