"""Undone summaries that are held (docs/context-records.md): no pass or fusion takes their span
until the user releases it or pressure reaches the hard threshold."""

from django.db import transaction

from bots.models import ChatSession
from compaction.engine.events import event_write
from compaction.models import CompactionEvent, Summary
from compaction.seats import seat_key, seat_summaries


def held_spans(session: ChatSession) -> list[tuple[int, int]]:
    """The spans of undone summaries still held: no pass or fusion takes them
    (docs/context-records.md)."""
    return list(
        seat_summaries(session, seat_key(session))
        .filter(status=Summary.Status.REVERTED, held=True)
        .values_list("first_seq", "last_seq")
    )


HOLD_RELEASED_AT_HARD = "hold_released_at_hard"


def holds_release_at_hard(session: ChatSession, *, pressure: int) -> int:
    """Under hard pressure (caller holds the lease): every held span of the session may be
    compacted again. Reported as one event per released summary; how many were released."""
    held = list(
        seat_summaries(session, seat_key(session)).filter(status=Summary.Status.REVERTED, held=True)
    )
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
