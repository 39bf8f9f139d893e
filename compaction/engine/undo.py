"""Reversible compaction (docs/context-records.md): undo a summary, release the hold on what was
undone.

In a room each action is the summary's own bot's (docs/rooms.md): it runs from that bot's seat
(``summary_seat``) under that seat's lease, against that bot's hard threshold, and moves that
bot's coverage (``SummaryCoverage``) and totals (``SeatState``) only; other bots' summaries,
coverage and totals are untouched.

Undo puts back exactly what the summary replaced: a summary of messages gives its messages back
to the context (the running totals take them back in); a fused summary gives back its parents,
active again, with their messages pointing at them as before the fusion. The summary row and its
snapshot stay (the audit and recall keep them); the summary's status becomes ``reverted``.

The undone span is *held*: no pass takes its messages and no fusion takes its summaries again
(``held_spans``), so the next soft compaction does not undo the undo. The user releases the hold,
or the hard path drops every hold of the session when pressure reaches H (and says so: an event
with outcome ``released``, reason ``hold_released_at_hard``).
"""

from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from bots.models import ChatSession
from chat_platform.errors import CompactionBusy, QuotaExceeded, ValidationFailed
from compaction.engine.common import session_fresh, summary_seat
from compaction.engine.coverage import coverage_release, coverage_restore
from compaction.engine.events import event_write
from compaction.engine.runs import manual_passes
from compaction.engine.summariser import summariser_ready
from compaction.lock import single_flight
from compaction.measure import context_measure, session_budget
from compaction.models import CompactionEvent, Summary
from compaction.results import RunResult
from compaction.seats import seat_key
from memory import services as memory_services
from memory.models import MemoryRecord

HOLD_RELEASED_BY_USER = "released_by_user"


@dataclass
class RevertResult:
    summary: Summary
    tokens_before: int
    tokens_after: int
    event: CompactionEvent
    # What came back: messages (a summary of messages) or parent summaries (a fused summary).
    restored_messages: int = 0
    restored_tokens: int = 0
    parents: list[Summary] = field(default_factory=list)
    # With ``compact_rest``: the compaction of everything else, after the undo.
    compaction: RunResult | None = None


class _OverHard(Exception):
    def __init__(self, tokens_after: int) -> None:
        super().__init__(tokens_after)
        self.tokens_after = tokens_after


def summary_snapshot(summary: Summary, *, room: bool = False) -> MemoryRecord | None:
    """The snapshot of the summary's span. In a room (``room``), the one its bot wrote from its
    seat (``snapshot_<f>_<l>_b<bot>``), else the one it wrote before the chat became a room."""
    plain = memory_services.snapshot_name(summary.first_seq, summary.last_seq)
    snapshots = MemoryRecord.objects.filter(
        session_id=summary.session_id, kind=MemoryRecord.Kind.SNAPSHOT
    )
    if not room:
        return snapshots.filter(name=plain).first()
    seat = memory_services.snapshot_name(summary.first_seq, summary.last_seq, summary.bot_id)
    found = {r.name: r for r in snapshots.filter(name__in=[seat, plain], bot_id=summary.bot_id)}
    return found.get(seat) or found.get(plain)


def check_revertible(summary: Summary) -> None:
    if summary.status == Summary.Status.REVERTED:
        raise ValidationFailed(
            "This compaction was already undone.",
            details={"summary": [f"Summary {summary.pk} is already reverted."]},
        )
    if summary.status != Summary.Status.ACTIVE:
        raise ValidationFailed(
            "This summary was replaced by a later one (a fusion or a re-summary): undo that one.",
            details={"summary": [f"Summary {summary.pk} is {summary.status}, not active."]},
        )


def summary_revert(*, summary: Summary, compact_rest: bool = False) -> RevertResult:
    """Undo ``summary`` (the caller checked access). Refused, changing nothing, when a
    compaction of the session is running (``compaction_busy``), when the summary is not active,
    and — unless ``compact_rest`` — when the restored context would reach the hard threshold.

    ``compact_rest``: undo even then, and compact everything else that is compactable (the
    restored span is held, so it stays), under the same lease."""
    session = summary_seat(summary.session, summary.bot_id)
    if compact_rest:
        summariser_ready(session.bot)
    with single_flight(session.pk, wait=0, bot_id=seat_key(session)) as flight:
        if not flight.acquired:
            raise CompactionBusy(
                "A compaction of this chat is running; nothing was changed. Try again shortly."
            )
        summary = Summary.objects.select_related("session__bot").get(pk=summary.pk)
        check_revertible(summary)
        session = session_fresh(session)
        hard = session_budget(session).hard
        tokens_before = context_measure(session=session).pressure
        try:
            with transaction.atomic():
                result = _revert_commit(session, summary, tokens_before=tokens_before)
                if result.tokens_after >= hard and not compact_rest:
                    raise _OverHard(result.tokens_after)
        except _OverHard as over:
            raise ValidationFailed(
                f"Undoing this compaction would bring the context to {over.tokens_after:,} "
                f"tokens, at or over the hard threshold of {hard:,}; nothing was changed. "
                "Undo and compact the rest instead (compact_rest: true).",
                details={
                    "tokens_after": over.tokens_after,
                    "hard": hard,
                    "compact_rest": [
                        "Undo and compact the rest: restore this span and compact everything "
                        "else that can be compacted."
                    ],
                },
            ) from None
        if compact_rest:
            try:
                result.compaction = manual_passes(session_fresh(session))
            except QuotaExceeded:  # the undo stands; the rest waits for a limit with room
                pressure = context_measure(session=session_fresh(session)).pressure
                result.compaction = RunResult("skipped", "quota_exceeded", pressure, pressure)
            result.tokens_after = context_measure(session=session_fresh(session)).pressure
        return result


def _revert_commit(session: ChatSession, summary: Summary, *, tokens_before: int) -> RevertResult:
    """Inside the caller's transaction: the summary becomes reverted and held, what it replaced
    comes back (to ``session``'s seat: the summary's bot's), the event is written."""
    claimed = Summary.objects.filter(pk=summary.pk, status=Summary.Status.ACTIVE).update(
        status=Summary.Status.REVERTED, reverted_at=timezone.now(), held=True
    )
    if claimed != 1:
        raise ValidationFailed(
            "This compaction was already undone.",
            details={"summary": [f"Summary {summary.pk} is no longer active."]},
        )
    parents = list(summary.parents.order_by("first_seq"))
    tokens = messages = 0
    if parents:
        for parent in parents:
            coverage_restore(
                from_summary_id=summary.pk,
                to_summary_id=parent.pk,
                first_seq=parent.first_seq,
                last_seq=parent.last_seq,
            )
        Summary.objects.filter(pk__in=[p.pk for p in parents]).update(
            status=Summary.Status.ACTIVE, superseded_at=None
        )
    # A fused summary covers nothing outside its parents' spans; whatever else it covers (none
    # in practice) comes back as messages rather than staying covered by a reverted summary.
    tokens, messages = coverage_release(session, summary_id=summary.pk)
    session = session_fresh(session)
    tokens_after = context_measure(session=session).pressure
    summary.refresh_from_db()
    event = event_write(
        session,
        trigger="revert",
        outcome=CompactionEvent.Outcome.REVERTED,
        reason="fusion_parents" if parents else "",
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        source_tokens=tokens,
        summary_tokens=summary.token_count,
        model=summary.model,
        snapshot=summary_snapshot(summary, room=session.is_room),
        summary=summary,
    )
    for parent in parents:
        parent.refresh_from_db()
    return RevertResult(
        summary=summary,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        event=event,
        restored_messages=messages,
        restored_tokens=tokens,
        parents=parents,
    )


def summary_release(*, summary: Summary) -> CompactionEvent:
    """The user lets automatic compaction take an undone span again."""
    if summary.status != Summary.Status.REVERTED or not summary.held:
        raise ValidationFailed(
            "Only an undone compaction that is still held can be released.",
            details={"summary": [f"Summary {summary.pk} is {summary.status}, not held."]},
        )
    with transaction.atomic():
        released = Summary.objects.filter(
            pk=summary.pk, status=Summary.Status.REVERTED, held=True
        ).update(held=False)
        if released != 1:
            raise ValidationFailed(
                "This compaction was already released.",
                details={"summary": [f"Summary {summary.pk} is not held."]},
            )
        session = summary_seat(summary.session, summary.bot_id)
        pressure = context_measure(session=session).pressure
        summary.held = False
        return event_write(
            session,
            trigger="revert",
            outcome=CompactionEvent.Outcome.RELEASED,
            reason=HOLD_RELEASED_BY_USER,
            tokens_before=pressure,
            tokens_after=pressure,
            summary=summary,
        )
