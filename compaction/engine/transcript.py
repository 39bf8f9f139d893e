"""The transcript the summariser reads: one dated line per message, as the seat's bot saw it."""

import json
from typing import Any

from bots.models import Message
from chat_platform.llm.recall_protocol import MEMORY_TOOLS
from chat_platform.transcript import line, speaker_label
from compaction.seats import RoomView

# The memory tools' requests stay "(used search_records)": what they asked for is a lookup,
# not a step of the task, and the summariser drops such lines (builtin/extractive's echoes).
ARGUMENTS_MAX_CHARS = 300


def _arguments_text(raw: object) -> str:
    """A call's arguments as ``key=value`` pairs (not JSON: call syntax left in a summary is
    rejected by the quality gate), cut to ``ARGUMENTS_MAX_CHARS``; "" when there are none."""
    try:
        value: Any = json.loads(raw) if isinstance(raw, str) else raw
    except ValueError:
        value = raw
    if isinstance(value, dict):
        text = ", ".join(
            f"{key}={item if isinstance(item, str) else json.dumps(item)}"
            for key, item in value.items()
        )
    else:
        text = "" if value in (None, "") else str(value)
    return text[:ARGUMENTS_MAX_CHARS]


def _call_text(call: dict[str, Any]) -> str:
    """One tool call: its name, and for the bot's own tools what it was asked (docs/tools.md,
    "Compaction inside a reply": a summary keeps what each step tried)."""
    function = call.get("function") or {}
    name = str(function.get("name", "?"))
    if name in MEMORY_TOOLS:
        return name
    arguments = _arguments_text(function.get("arguments"))
    return f"{name}: {arguments}" if arguments else name


def transcript_line(message: Message, room: RoomView | None = None) -> str:
    """One transcript line; in a room, as the bot whose seat it is saw it: its own turns as
    ``assistant``, everyone else's under their name (``room.speakers``)."""
    if message.role == Message.Role.TOOL:
        speaker = f"tool ({message.tool_name})" if message.tool_name else "tool"
    elif room is not None and message.role in (Message.Role.USER, Message.Role.ASSISTANT):
        own = message.role == Message.Role.ASSISTANT and message.bot_id == room.bot_id
        key = None if message.role == Message.Role.USER else message.bot_id
        known = room.speakers.get(key)
        speaker = "assistant" if own else speaker_label(known[1]) if known else message.role
    else:
        speaker = message.role
    text = message.content.strip()
    if message.role == Message.Role.ASSISTANT and message.tool_calls and not text:
        calls = [_call_text(c) for c in message.tool_calls]
        joiner = "; " if any(": " in c for c in calls) else ", "
        text = f"(used {joiner.join(calls)})"
    return line(message.seq, message.created_at, speaker, text)
