"""A room's search results as one seat sees them (docs/rooms.md): each hit named by the
searching bot's own snapshot, and the speakers named as its transcript names them."""

from dataclasses import replace

from bots.models import ChatSession
from bots.queries import participants_of, room_user_name
from chat_platform.transcript import speaker_label
from memory import search
from memory.models import MemoryRecord


def seat_snapshots(
    session: ChatSession, ranked: list[tuple[float, object]], live_before: int | None
) -> list[tuple[float, object]]:
    """In a room a message is indexed with the first snapshot that held it, whichever bot's
    compaction wrote it: each hit is named by the seat's own snapshot that holds it verbatim
    (the narrowest), or by none — the seat has it in its own history, live, and it is a hit
    only where live ones are (below ``live_before``; docs/rooms.md). It named another bot's
    snapshot, which this bot cannot read."""
    own = sorted(
        MemoryRecord.objects.filter(
            session_id=session.pk,
            kind=MemoryRecord.Kind.SNAPSHOT,
            indexed=True,
            bot_id=session.bot_id,
        ).values_list("pk", "first_seq", "last_seq"),
        key=lambda r: (r[2] - r[1], r[0]),
    )

    def holder(seq: int) -> int | None:
        return next((pk for pk, first, last in own if first <= seq <= last), None)

    kept: list[tuple[float, object]] = []
    for score, item in ranked:
        if isinstance(item, search.MessageScore):
            item = replace(item, record_id=holder(item.seq))
            if item.record_id is None and not (live_before and item.seq < live_before):
                continue
        kept.append((score, item))
    return kept


def room_labels(session: ChatSession) -> dict[int | None, str]:
    """A room's speakers as the seat of ``session``'s bot names them in its transcripts
    (``compaction/engine/transcript.py``): the user and each bot by name (``None``: the user),
    quoted when a name reads as a role; the seat's own turns stay ``assistant``. Without it,
    every bot's turn in a search result read ``assistant``, and a bot took another's words for
    its own."""
    labels: dict[int | None, str] = {None: speaker_label(room_user_name(session))}
    for participant in participants_of(session=session, include_removed=True):
        labels[participant.bot_id] = speaker_label(participant.bot.name)
    return labels
