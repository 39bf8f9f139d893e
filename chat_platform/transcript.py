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
retention fact check) takes the stamp from ``STAMP`` here, so the format is defined once.
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


# The label at the start of a transcript line: "[12] 2024-03-08 13:56Z user: ",
# "[14] 2024-03-08 13:57Z tool (read_records): ", "[12] user: ".
LINE_LABEL = re.compile(
    rf"\[\d+\][ \t]*(?:{STAMP}[ \t]+)?[A-Za-z]+(?:[ \t]*\([^)\n]*\))?[ \t]*:[ \t]*"
)
