"""The transcript the summariser reads: one dated line per message, as the seat's bot saw it."""

from bots.models import Message
from chat_platform.transcript import line
from compaction.seats import RoomView


def transcript_line(message: Message, room: RoomView | None = None) -> str:
    """One transcript line; in a room, as the bot whose seat it is saw it: its own turns as
    ``assistant``, everyone else's under their name (``room.speakers``)."""
    if message.role == Message.Role.TOOL:
        speaker = f"tool ({message.tool_name})" if message.tool_name else "tool"
    elif room is not None and message.role in (Message.Role.USER, Message.Role.ASSISTANT):
        own = message.role == Message.Role.ASSISTANT and message.bot_id == room.bot_id
        key = None if message.role == Message.Role.USER else message.bot_id
        speaker = "assistant" if own else room.speakers.get(key, ("", message.role))[1]
    else:
        speaker = message.role
    text = message.content.strip()
    if message.role == Message.Role.ASSISTANT and message.tool_calls and not text:
        names = ", ".join(c.get("function", {}).get("name", "?") for c in message.tool_calls)
        text = f"(used {names})"
    return line(message.seq, message.created_at, speaker, text)
