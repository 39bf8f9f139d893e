"""Undone summaries that are held (docs/context-records.md): no pass or fusion takes their span
until the user releases it or pressure reaches the hard threshold."""

from django.db import transaction
from django.db.models import QuerySet

from bots.models import ChatSession
from chat_platform.compiled import CompiledValues, instances_from, model_fields
from compaction.engine.events import event_write
from compaction.models import CompactionEvent, Summary
from compaction.seats import seat_key, seat_summaries


def _seat_summaries_query(
    session_id: int, status: str, bot_id: int | None = None, *, held: bool, by_seq: bool
) -> QuerySet:
    """``seat_summaries`` of one status (``held``: held ones only; ``by_seq``: in seq order), as
    whole rows (``instances_from``)."""
    summaries = seat_summaries(session_id, bot_id).filter(status=status)
    if held:
        summaries = summaries.filter(held=True)
    if by_seq:
        summaries = summaries.order_by("first_seq")
    return summaries.values_list(*model_fields(Summary))


# Every hard compaction reads the held spans, every pass or fusion the active summaries: compiled
# once per process, a room's seat (with ``bot_id``) apart (docs/performance.md, "The tool task,
# eighth pass").
_SEAT_SUMMARIES = CompiledValues(
    _seat_summaries_query, shape=("held", "by_seq"), name="seat_summaries"
)


def summaries_of_seat(
    session: ChatSession, status: str, *, held: bool = False, by_seq: bool = False
) -> list[Summary]:
    """``seat_summaries(session, seat_key(session)).filter(status=status)`` (and ``held=True``
    with ``held``; ordered by ``first_seq`` with ``by_seq``), as instances."""
    key = seat_key(session)
    rows = _SEAT_SUMMARIES.rows(
        session_id=session.pk,
        status=status,
        held=held,
        by_seq=by_seq,
        **({} if key is None else {"bot_id": key}),
    )
    return [instances_from(row, Summary)[0] for row in rows]


def held_spans(session: ChatSession) -> list[tuple[int, int]]:
    """The spans of undone summaries still held: no pass or fusion takes them
    (docs/context-records.md)."""
    return [
        (s.first_seq, s.last_seq)
        for s in summaries_of_seat(session, Summary.Status.REVERTED, held=True)
    ]


HOLD_RELEASED_AT_HARD = "hold_released_at_hard"


def holds_release_at_hard(session: ChatSession, *, pressure: int) -> int:
    """Under hard pressure (caller holds the lease): every held span of the session may be
    compacted again. Reported as one event per released summary; how many were released."""
    held = summaries_of_seat(session, Summary.Status.REVERTED, held=True)
    if not held:
        return 0
    with transaction.atomic():
        Summary.objects.filter(pk__in=[s.pk for s in held]).update(held=False)
        for summary in held:
            summary.held = False
            event_write(
                session,
                trigger="hard",
                outcome=CompactionEvent.Outcome.RELEASED,
                reason=HOLD_RELEASED_AT_HARD,
                tokens_before=pressure,
                tokens_after=pressure,
                summary=summary,
            )
    return len(held)


def in_spans(seq: int, spans: list[tuple[int, int]]) -> bool:
    return any(first <= seq <= last for first, last in spans)
