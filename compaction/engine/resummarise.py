"""Re-summarise a span with a focus (docs/context-records.md): the compaction runs again over the
same messages, from the span's snapshot (the exact transcript the first summariser read), with the
user's focus added to the prompt (docs/compaction.md). The quality gates apply as to any compaction:
a rejected result changes nothing and the old summary stays active. An accepted one takes the old
one's place — same span, same level, same parents (so undoing it gives back what the old one
would have) — and the old one is superseded, kept for the audit (``superseded_by``).

In a room it runs from the summary's own bot's seat (``summary_seat``): that bot's compaction
model, that bot's snapshot (the room as it saw it, with speaker labels), its lease; the new
summary is that bot's and takes over its coverage rows."""

from functools import partial

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from bots.models import ChatSession
from chat_platform.errors import CompactionBusy, ValidationFailed
from compaction.engine.common import (
    Conflict,
    Plan,
    session_fresh,
    summary_seat,
)
from compaction.engine.coverage import coverage_move
from compaction.engine.events import event_write
from compaction.engine.passes import (
    enveloped,
    record_success,
    summarise,
    summary_create,
)
from compaction.engine.summariser import summariser_ready
from compaction.engine.undo import summary_snapshot
from compaction.lock import single_flight
from compaction.measure import context_measure
from compaction.models import CompactionEvent, Summary
from compaction.results import RunResult
from compaction.seats import seat_key
from memory.models import MemoryRecord

TRIGGER = "resummarise"


def summary_resummarise(*, summary: Summary, focus: str) -> RunResult:
    """Re-summarise ``summary`` (the caller checked access and the focus). A caller that finds
    a compaction running waits for it (<= 60 s), like ``/compact``; then ``compaction_busy``."""
    session = summary_seat(summary.session, summary.bot_id)
    wait = settings.COMPACTION_WAIT_SECONDS
    summariser_ready(session.bot)
    with single_flight(session.pk, wait=wait, bot_id=seat_key(session)) as flight:
        if not flight.acquired:
            raise CompactionBusy()
        summary = Summary.objects.select_related("session__bot").get(pk=summary.pk)
        if summary.status != Summary.Status.ACTIVE:
            raise ValidationFailed(
                "Only an active summary can be re-summarised.",
                details={"summary": [f"Summary {summary.pk} is {summary.status}, not active."]},
            )
        snapshot = summary_snapshot(summary, room=session.is_room)
        if snapshot is None:
            raise ValidationFailed(
                "The snapshot of this summary's messages is gone: it cannot be re-summarised.",
                details={"summary": [f"Summary {summary.pk} has no snapshot."]},
            )
        session = session_fresh(session)
        plan = Plan(trigger=TRIGGER, target=0, focus=focus, min_tokens=0)
        return enveloped(session, plan, partial(_resummarise, session, summary, snapshot, plan))


def _resummarise(
    session: ChatSession, old: Summary, snapshot: MemoryRecord, plan: Plan
) -> RunResult:
    tokens_before = context_measure(session=session).pressure
    parents = list(old.parents.order_by("first_seq"))
    # What the summary stands for, as the gates count it: its source messages, or for a fused
    # summary the parent summaries it was made from (as fusion counted them).
    replaced = sum(p.token_count for p in parents) if parents else old.source_tokens
    accepted, failure = summarise(
        session,
        plan,
        transcript=snapshot.body,
        replaced_tokens=replaced,
        first_seq=old.first_seq,
        last_seq=old.last_seq,
        tokens_before=tokens_before,
        source_tokens=replaced,
        snapshot=snapshot,
    )
    if failure is not None:
        return failure
    assert accepted is not None
    try:
        with transaction.atomic():
            superseded = Summary.objects.filter(pk=old.pk, status=Summary.Status.ACTIVE).update(
                status=Summary.Status.SUPERSEDED, superseded_at=timezone.now()
            )
            if superseded != 1:
                raise Conflict()
            new = summary_create(
                session,
                plan,
                accepted,
                first_seq=old.first_seq,
                last_seq=old.last_seq,
                source_tokens=old.source_tokens,
                level=old.level,
            )
            if parents:
                new.parents.set(parents)
            Summary.objects.filter(pk=old.pk).update(superseded_by=new)
            coverage_move(from_summary_ids=[old.pk], to_summary_id=new.pk)
            tokens_after, event = record_success(
                session,
                TRIGGER,
                "focus" if plan.focus else "",
                accepted,
                new,
                tokens_before=tokens_before,
                source_tokens=replaced,
            )
    except Conflict:
        event = event_write(
            session,
            trigger=TRIGGER,
            outcome=CompactionEvent.Outcome.FAILED,
            reason="conflict",
            error="The summary changed while it was being re-summarised.",
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            model=accepted["model"],
            snapshot=snapshot,
        )
        return RunResult("failed", "conflict", tokens_before, tokens_before, None, event)
    return RunResult("compacted", event.reason, tokens_before, tokens_after, new, event)
