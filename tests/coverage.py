"""What a seat's summaries cover, for tests (docs/rooms.md "A seat's bounded read"): the one store
is compaction's ``SummaryCoverage`` rows and the seat's ``SeatState`` totals; no column of a
message says it.

``messages_covered`` reads a chat's messages with ``compacted_by_id`` annotated, the summary of
the seat's bot that covers each (None: none), so a test asks "which summary covers this" in one
place. ``cover`` writes coverage the way a compaction pass commits it, for tests that arrange a
compacted history without running one."""

from django.db.models import Count, QuerySet, Sum

from bots.models import ChatSession, Message
from bots.transitions import session_context_recount
from compaction.engine.coverage import seats_count
from compaction.models import SummaryCoverage
from compaction.seats import seat_covered, seat_covering, seat_read


def messages_covered(session: ChatSession, *, bot_id: int | None = None) -> QuerySet[Message]:
    """The session's messages, each with ``compacted_by_id``: the summary of the seat of
    ``bot_id`` (default: the session's bot) that covers it."""
    covering = seat_covering(bot_id or session.bot_id)
    return Message.objects.filter(session=session).annotate(compacted_by_id=covering)


def message_covering(message: Message, *, bot_id: int | None = None) -> int | None:
    """The summary of the seat (default: the message's chat's bot) that covers ``message``."""
    bot_id = bot_id or ChatSession.objects.values_list("bot_id", flat=True).get(
        pk=message.session_id
    )
    return (
        SummaryCoverage.objects.filter(bot_id=bot_id, message_id=message.pk)
        .values_list("summary_id", flat=True)
        .first()
    )


def cover(messages: QuerySet[Message], summary_id: int, *, bot_id: int | None = None) -> int:
    """``summary_id`` covers ``messages`` (one chat's) for the seat of ``bot_id`` (default: the
    chat's bot), the seats counted from their rows as a branch's are (``seats_count``: totals
    and covered floor); how many it covers."""
    rows = list(messages.values_list("pk", "session_id", "token_count"))
    if not rows:
        return 0
    session_id = rows[0][1]
    bot_id = bot_id or ChatSession.objects.values_list("bot_id", flat=True).get(pk=session_id)
    SummaryCoverage.objects.filter(bot_id=bot_id, message_id__in=[r[0] for r in rows]).delete()
    SummaryCoverage.objects.bulk_create(
        SummaryCoverage(summary_id=summary_id, bot_id=bot_id, message_id=pk) for pk, _, _ in rows
    )
    seats_count(target=ChatSession.objects.get(pk=session_id))
    return len(rows)


def in_context_totals(session: ChatSession) -> tuple[int, int]:
    """What the running totals say the seat of the session's bot holds in context: the
    session's (every message in context) less what its summaries cover."""
    session.refresh_from_db()
    seat = seat_read(session)
    return (
        session.context_tokens - seat.covered_tokens,
        session.context_messages - seat.covered_messages,
    )


def in_context_recount(session: ChatSession) -> tuple[int, int]:
    """The same, counted from the messages and the seat's coverage rows (the session's running
    totals recounted first, as ``session_context_recount`` repairs them)."""
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    totals = (
        Message.objects.filter(Message.in_context_q(), session=session)
        .exclude(seat_covered(session.bot_id))
        .aggregate(tokens=Sum("token_count"), messages=Count("id"))
    )
    return totals["tokens"] or 0, totals["messages"]
