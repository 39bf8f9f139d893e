"""Tool frames (docs/api.md, docs/tools.md): ``tool.started`` and ``tool.finished``.

``message_id`` is the reply the call belongs to; ``name`` the function as the model called it.
Sent through the platform's transport (``chat_platform.realtime``), like every frame.
"""

from typing import Any

from chat_platform.realtime import send_frame


def notify_tool_started(
    *, session_id: int, message_id: int, call_id: str, name: str, arguments: str
) -> None:
    send_frame(
        session_id,
        {
            "type": "tool.started",
            "message_id": message_id,
            "call_id": call_id,
            "name": name,
            "arguments": arguments,
        },
    )


def notify_tool_finished(
    *, session_id: int, message_id: int, call_id: str, name: str, ok: bool, tokens: int
) -> None:
    frame: dict[str, Any] = {
        "type": "tool.finished",
        "message_id": message_id,
        "call_id": call_id,
        "name": name,
        "ok": ok,
        "tokens": tokens,
    }
    send_frame(session_id, frame)
