"""A room's transcript names its speakers as their owners named them, but never so that a name
reads as a role: a bot called "Tool" is not a tool's result, one called "Assistant" not the
seat's own turn (compaction/engine/transcript.py)."""

from datetime import UTC, datetime

from bots.models import Message
from compaction.engine.transcript import transcript_line
from compaction.seats import RoomView

AT = datetime(2024, 3, 8, 13, 56, tzinfo=UTC)


def _room() -> RoomView:
    speakers = {None: ("dana", "Dana"), 1: ("planner", "Planner"), 2: ("tool", "Tool"),
                3: ("assistant", "Assistant")}  # fmt: skip
    return RoomView(bot_id=1, from_seq=1, header="", speakers=speakers, prefix_tokens={})


def _line(role: str, bot_id: int | None, text: str = "It is done.") -> str:
    message = Message(seq=7, role=role, bot_id=bot_id, content=text, created_at=AT)
    return transcript_line(message, _room())


def test_names_that_read_as_roles_are_quoted_and_others_are_not():
    assert _line("assistant", 1) == "[7] 2024-03-08 13:56Z assistant: It is done."
    assert _line("assistant", 2) == "[7] 2024-03-08 13:56Z «Tool»: It is done."
    assert _line("assistant", 3) == "[7] 2024-03-08 13:56Z «Assistant»: It is done."
    assert _line("user", None) == "[7] 2024-03-08 13:56Z Dana: It is done."
    # a bot no longer known to the room keeps its role, as before
    assert _line("assistant", 9) == "[7] 2024-03-08 13:56Z assistant: It is done."
