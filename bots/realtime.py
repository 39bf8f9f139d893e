"""Realtime fan-out: group names, frame shapes and the notify_* helpers (CONTRACT §12).

The channel layer is lossy transport, not the store: every frame here describes something that is
already persisted, and clients resync over REST (``?after_seq=``) after a reconnect.
"""

from typing import Any

import structlog
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer

from bots.models import Message

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
        "created_at": message.created_at.isoformat().replace("+00:00", "Z"),
    }
    if message.error_code:
        payload["error"] = {"code": message.error_code, "message": message.error_message}
    return payload


def send_frame(session_id: int, frame: dict[str, Any]) -> None:
    layer = get_channel_layer()
    if layer is None:
        return
    try:
        async_to_sync(layer.group_send)(
            session_group(session_id), {"type": FRAME_EVENT, "frame": frame}
        )
    except Exception:  # the layer is best-effort; the database already holds the truth
        log.warning("realtime_send_failed", session_id=session_id, frame_type=frame.get("type"))


def notify_message_created(message: Message) -> None:
    send_frame(message.session_id, {"type": "message.created", "message": message_payload(message)})


def notify_message_delta(message: Message, delta: str) -> None:
    send_frame(
        message.session_id, {"type": "message.delta", "message_id": message.pk, "delta": delta}
    )


def notify_message_completed(message: Message) -> None:
    send_frame(
        message.session_id, {"type": "message.completed", "message": message_payload(message)}
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
