"""The audit of one summary: its source (the pre-compaction snapshot) beside what it kept.

A staff-only read used by the admin (``compaction/admin.py``). Fact extraction is the one in
``compaction/facts.py`` that scored the summary when it was made, so the page marks exactly the
facts the stored retention score counted as missing:

* a snapshot line with facts (names, numbers, dates, identifiers) of which none appears in the
  summary is **dropped**;
* a line with some of its facts missing is **partial**; the missing ones are highlighted;
* lines without facts (or whose facts all survived) are plain.

A room's audit (``room_audit``) sets each bot's summaries of the room side by side.
"""

from dataclasses import dataclass, field

from bots.models import ChatSession
from bots.queries import participants_of
from compaction.facts import extract_facts, retention_score
from compaction.models import CompactionEvent, Summary
from memory.models import MemoryRecord

# A snapshot is bounded by the summariser's input (85 % of its window); past this many lines the
# page shows the rest unmarked rather than spend seconds on a view.
MAX_MARKED_LINES = 5000


@dataclass(frozen=True)
class Segment:
    text: str
    missing: bool = False


@dataclass(frozen=True)
class SourceLine:
    number: int
    status: str  # "dropped" | "partial" | "kept" | "plain"
    segments: list[Segment]
    missing: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class SummaryAudit:
    summary: Summary
    snapshot: MemoryRecord | None
    events: list[CompactionEvent]
    lines: list[SourceLine]
    dropped_lines: int
    partial_lines: int
    missing_facts: list[str]

    @property
    def tokens_before(self) -> int | None:
        event = self.creating_event
        return event.tokens_before if event else None

    @property
    def tokens_after(self) -> int | None:
        event = self.creating_event
        return event.tokens_after if event else None

    @property
    def creating_event(self) -> CompactionEvent | None:
        for event in self.events:
            if event.outcome == CompactionEvent.Outcome.COMPACTED:
                return event
        return None


def _segments(line: str, missing: list[str]) -> list[Segment]:
    """``line`` cut so that each occurrence of a missing fact is its own highlighted segment."""
    spans: list[tuple[int, int]] = []
    lowered = line.lower()
    for fact in missing:
        needle = fact.lower()
        start = lowered.find(needle)
        while start != -1 and needle:
            end = start + len(needle)
            if not any(s < end and start < e for s, e in spans):
                spans.append((start, end))
            start = lowered.find(needle, end)
    spans.sort()
    segments: list[Segment] = []
    cursor = 0
    for start, end in spans:
        if start > cursor:
            segments.append(Segment(line[cursor:start]))
        segments.append(Segment(line[start:end], missing=True))
        cursor = end
    if cursor < len(line) or not segments:
        segments.append(Segment(line[cursor:]))
    return segments


def source_lines(source: str, summary_text: str) -> list[SourceLine]:
    lines: list[SourceLine] = []
    for number, line in enumerate(source.splitlines(), start=1):
        if number > MAX_MARKED_LINES or not extract_facts(line):
            lines.append(SourceLine(number, "plain", [Segment(line)]))
            continue
        score, missing = retention_score(line, summary_text)
        if not missing:
            status = "kept"
        elif score == 0:
            status = "dropped"
        else:
            status = "partial"
        lines.append(SourceLine(number, status, _segments(line, missing), missing))
    return lines


def summary_audit(*, summary: Summary) -> SummaryAudit:
    events = list(
        CompactionEvent.objects.filter(summary=summary)
        .select_related("snapshot")
        .order_by("created_at", "id")
    )
    snapshot = next((event.snapshot for event in events if event.snapshot_id), None)
    if snapshot is None:
        # Events may have been cleared; the snapshot is named after the range it holds.
        snapshot = MemoryRecord.objects.filter(
            session_id=summary.session_id,
            kind=MemoryRecord.Kind.SNAPSHOT,
            first_seq=summary.first_seq,
            last_seq=summary.last_seq,
        ).first()
    lines = source_lines(snapshot.body, summary.text) if snapshot else []
    return SummaryAudit(
        summary=summary,
        snapshot=snapshot,
        events=events,
        lines=lines,
        dropped_lines=sum(1 for line in lines if line.status == "dropped"),
        partial_lines=sum(1 for line in lines if line.status == "partial"),
        missing_facts=list(summary.missing_facts or []),
    )


# --- a room's summaries side by side ----------------------------------------------------------


@dataclass(frozen=True)
class RoomColumn:
    """One bot of the room (removed ones too: their summaries stay auditable)."""

    bot_id: int | None
    name: str
    slug: str
    removed: bool


@dataclass(frozen=True)
class RoomRow:
    """One stretch of the room (``first_seq``–``last_seq``): per column, the summaries that bot
    wrote of exactly that stretch (oldest first), empty where it wrote none."""

    first_seq: int
    last_seq: int
    cells: list[list[Summary]]


@dataclass(frozen=True)
class RoomAudit:
    session: ChatSession
    columns: list[RoomColumn]
    rows: list[RoomRow]
    summary_count: int


def room_audit(*, session_id: int) -> RoomAudit | None:
    """Each bot's summaries of one room, side by side: a column per participant in the order
    they joined (then any other bot a summary names, then summaries whose bot is gone), a row
    per summarised stretch in seq order. Every status is shown (active, superseded, reverted):
    the audit is of what each bot was given at any time, not only of what it holds now. None
    when there is no such session. Staff only (the admin): no owner check."""
    session = ChatSession.objects.select_related("bot", "user").filter(pk=session_id).first()
    if session is None:
        return None
    columns: list[RoomColumn] = []
    index: dict[int | None, int] = {}
    for participant in participants_of(session=session, include_removed=True):
        index[participant.bot_id] = len(columns)
        columns.append(
            RoomColumn(
                participant.bot_id,
                participant.bot.name,
                participant.bot.slug,
                participant.removed_at is not None,
            )
        )
    summaries = list(
        Summary.objects.filter(session=session)
        .select_related("bot")
        .order_by("first_seq", "last_seq", "created_at", "id")
    )
    for summary in summaries:
        if summary.bot_id in index:
            continue
        index[summary.bot_id] = len(columns)
        bot = summary.bot
        columns.append(
            RoomColumn(summary.bot_id, bot.name, bot.slug, True)
            if bot is not None
            else RoomColumn(None, "(bot deleted)", "", True)
        )
    rows: dict[tuple[int, int], RoomRow] = {}
    for summary in summaries:
        key = (summary.first_seq, summary.last_seq)
        if key not in rows:
            rows[key] = RoomRow(key[0], key[1], [[] for _ in columns])
        rows[key].cells[index[summary.bot_id]].append(summary)
    return RoomAudit(
        session=session, columns=columns, rows=list(rows.values()), summary_count=len(summaries)
    )
