"""How a compacted message reads in a transcript, and the pattern that reads its label back.

A line is ``[12] 2024-03-08 13:56Z user: text``: the message's seq, when it was said, its
speaker. The one transcript the summariser is given is also the snapshot's body, so the same
line is what ``read_records`` and ``search_records`` bring back, and "when" questions can be
answered from it. Summaries keep the date alone (``[12] 2024-03-08 user: …``).

Time zone: UTC. There is no per-user time-zone setting (``TIME_ZONE = "UTC"``, no user or bot
field), so times are UTC, and every line says so with ``Z`` rather than a header saying ``UTC``
once: a line travels alone (a search excerpt, a capped body, a summary line) and must still be
unambiguous without the head of its snapshot.

Every parser of these labels (builtin/extractive, builtin/recall, snapshot descriptions, the
retention fact check) takes the stamp from ``STAMP`` here, so the format is defined once; the
speaker roles a label may name (``ROLE``), a speaker's name used as a label (``NAME``) and the
section headers of a summary or a fusion's input (``summary_header``, ``raw_header`` and the
patterns that read them back) live here too, for builtin/extractive and the fact check alike.
"""

import re
from datetime import UTC, datetime

STAMP_FORMAT = "%Y-%m-%d %H:%MZ"
# What follows ``[seq]`` in a label: a date, with the time (as transcripts have it) or without
# (as summaries keep it). No capturing groups: it is embedded in other patterns.
STAMP = r"\d{4}-\d{2}-\d{2}(?:[ T]\d{2}:\d{2}Z?)?"
_TIME_OF_DAY = re.compile(r"(?<=\d{4}-\d{2}-\d{2})[ T]\d{2}:\d{2}Z?")


def stamp(moment: datetime) -> str:
    """``2024-03-08 13:56Z``: ``moment`` in UTC, to the minute."""
    return moment.astimezone(UTC).strftime(STAMP_FORMAT)


def line(seq: int, moment: datetime, speaker: str, text: str) -> str:
    """One transcript line: ``[12] 2024-03-08 13:56Z user: text``."""
    return f"[{seq}] {stamp(moment)} {speaker}: {text}"


def date_only(label: str) -> str:
    """``[12] 2024-03-08 13:56Z user`` -> ``[12] 2024-03-08 user``: a summary keeps the day."""
    return _TIME_OF_DAY.sub("", label, count=1)


# A room's line names its speaker as chosen ("[13] 2024-03-08 13:57Z Research Helper: …",
# "«Tool»": docs/rooms.md): any name of up to 60 characters without a colon, after the date, so
# that a message's own "[1] Step one: …" is not taken for one. Lazy: the label ends at the first
# colon after the name. No capturing groups: it is embedded in other patterns.
SPEAKER_NAME = r"[^\s:\[][^:\n]{0,59}?"
NAMED_SPEAKER = rf"{STAMP}[ \t]+{SPEAKER_NAME}"

# A room speaker's name is its owner's choice. One that reads as a transcript role ("Tool",
# "assistant", "System bot", "Ann tool") would have the summariser, the fact check or a model
# reading a search result take its turns for a tool's result or for the seat's own: such a name
# is quoted ("«Tool»").
_ROLE_LIKE = re.compile(
    r"^\s*(?:user|assistant|system|tool)\b|(?:^|[\s\]])tool(?:\s*\(|\s*$)", re.IGNORECASE
)


def speaker_label(name: str) -> str:
    """How a room's transcript lines label a person or another bot: its name, quoted when it
    reads as a role."""
    return f"«{name}»" if _ROLE_LIKE.search(name) else name


# The label at the start of a transcript line: "[12] 2024-03-08 13:56Z user: ",
# "[14] 2024-03-08 13:57Z tool (read_records): ", "[12] user: ", a room's named speaker.
LINE_LABEL = re.compile(
    rf"\[\d+\][ \t]*(?:(?:{STAMP}[ \t]+)?[A-Za-z]+(?:[ \t]*\([^)\n]*\))?|{NAMED_SPEAKER})"
    r"[ \t]*:[ \t]*"
)


# The roles a speaker label may name: the platform's own and the usual spellings of chat exports.
# No capturing groups: it is embedded in other patterns (match them case-insensitively).
ROLE = r"(?:user|assistant|system|tool|human|ai|bot)"
# A speaker's name used as a label ("Ravi: …", "Mary Ann Lee: …"): one to three capitalised words.
NAME = r"[A-Z][\w.'-]{0,30}(?: [A-Z][\w.'-]{0,30}){0,2}"

# The headers that open a summary's block ("[Summary of messages 1–40]") and, in a fusion's
# input, a parent's raw snapshot ("[Raw messages 1–40]").
SUMMARY_HEADING = "Summary of messages"
RAW_HEADING = "Raw messages"
# Either header, whole, for any range (no capturing groups, no anchors).
SUMMARY_SECTION = rf"\[{SUMMARY_HEADING} [^\]\n]*\]"
RAW_SECTION = rf"\[{RAW_HEADING} [^\]\n]*\]"
# Any bracketed header a block opens with (those two, a record's "[record snapshot_1_34]", …).
HEADER = r"\[[^\[\]\n]{1,160}\]"


def summary_header(first_seq: int, last_seq: int) -> str:
    """``[Summary of messages 1–40]``: the first line of a summary's block."""
    return f"[{SUMMARY_HEADING} {first_seq}–{last_seq}]"


def raw_header(first_seq: int, last_seq: int) -> str:
    """``[Raw messages 1–40]``: the line before a parent's snapshot in a fusion's input."""
    return f"[{RAW_HEADING} {first_seq}–{last_seq}]"
