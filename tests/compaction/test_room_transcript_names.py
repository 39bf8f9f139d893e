"""A room's transcript names its speakers as their owners named them, but never so that a name
reads as a role: a bot called "Tool" is not a tool's result, one called "Assistant" not the
seat's own turn (compaction/engine/transcript.py)."""

from datetime import UTC, datetime

from bots.models import Message
from compaction.engine.transcript import transcript_line
from compaction.facts import extract_facts
from compaction.seats import RoomView
from memory.descriptions import distinctive_terms
from memory.search import with_line_label

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


# --- a room's named lines read as labels, not as what was said ---------------------------------

ROOM_LINES = [
    "[12] 2024-03-08 13:56Z assistant: I will look the flight up.",
    "[13] 2024-03-08 13:57Z Dana: I moved to Lisbon in May.",
    "[14] 2024-03-08 13:58Z tool (search_records): [record snapshot_1_9] flight BA2490",
    "[15] 2024-03-08 13:59Z Research Helper: The flight JL7079 leaves Lisbon at noon.",
    "[16] 2024-03-08 14:01Z «Tool»: Done.",
]


def test_a_rooms_speaker_labels_are_no_facts_of_its_transcript():
    """The fact check (a summary's retention, the admin's audit) reads what was said: a named
    line's date, time and speaker are its label, as a one-bot line's are; a line after a recall
    tool's result is no longer taken for part of that result (``SEQ_LABEL``)."""
    assert extract_facts("\n".join(ROOM_LINES)) == ["Lisbon", "JL7079"]


def test_a_rooms_named_line_keeps_its_label_in_a_search_excerpt():
    body = "\n".join(ROOM_LINES)
    excerpt = "JL7079 leaves Lisbon"
    assert with_line_label(body, excerpt) == (
        "[15] 2024-03-08 13:59Z Research Helper: The flight JL7079 leaves Lisbon at noon."
    )


def test_a_rooms_speaker_names_are_no_terms_of_a_snapshots_description():
    body = "\n".join(
        [*ROOM_LINES, "[17] 2024-03-08 14:02Z Research Helper: Lisbon again, the JL7079 gate."]
    )
    # (Before: ["Lisbon", "2024-03-08", "Research Helper", "14:02Z", "JL7079", "moved"].)
    assert distinctive_terms(body, []) == [
        "Lisbon",
        "flight JL7079",
        "moved",
        "leaves",
        "noon",
        "gate",
    ]
