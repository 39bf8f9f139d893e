"""Expand a span for one reply (docs/context-records.md): "Use the full text next turn" on a marker
or a snapshot. The request only records which span; the one pipeline applies it when it builds the
next reply's context (``compaction.measure``: ``expand_for``; ``compaction.pipeline``:
``_expansion_settle``), counting the span's messages whole, inside B, instead of the summaries
within it.

In a room the expansion is one seat's (docs/rooms.md): ``session`` is the session from that
bot's seat, the span is what that bot's own summaries cover of what it was shown, and only that
bot's next reply carries it. It is stored per (session, bot) under the seat's snapshot name
(``snapshot_<f>_<l>_b<bot>``): the measure of that seat, and no other, reads it by its bot,
and only that seat's replies claim or delete it."""

from dataclasses import dataclass

from django.db import transaction

from bots.models import ChatSession
from chat_platform.errors import ValidationFailed
from compaction.engine.common import session_fresh
from compaction.engine.events import event_write
from compaction.measure import context_measure, expanded_span
from compaction.models import CompactionEvent, ContextExpansion, Summary
from compaction.seats import seat_key
from memory.models import MemoryRecord
from memory.services import snapshot_name


@dataclass
class ExpandResult:
    record: str
    first_seq: int
    last_seq: int
    messages: int
    tokens: int
    replaces: list[int]
    tokens_before: int
    tokens_after: int
    event: CompactionEvent


def session_expand(*, session: ChatSession, record: MemoryRecord) -> ExpandResult:
    """Set (or replace) the seat's pending expansion to ``record``'s span (the caller checked
    access: a snapshot readable from the session): the row of ``session.bot``, whose next reply
    carries it. Refused, setting nothing, when nothing in the span is compacted, or when the
    span would not fit the budget with the fixed part."""
    if record.kind != MemoryRecord.Kind.SNAPSHOT or record.first_seq is None:
        raise ValidationFailed(
            "Only a compacted span (a snapshot or a summary) can be expanded.",
            details={"record": [f"{record.name} is not a snapshot."]},
        )
    assert record.last_seq is not None
    first_seq, last_seq = record.first_seq, record.last_seq
    session = session_fresh(session)
    measure = context_measure(session=session)
    entries, replaced = expanded_span(session, first_seq, last_seq, measure.seat, measure.room)
    if not entries:
        raise ValidationFailed(
            f"Messages {first_seq}–{last_seq} are not compacted: they are in the context already.",
            details={"record": [f"Nothing of {record.name} is compacted."]},
        )
    tokens = sum(e.tokens for e in entries)
    replaced_tokens = sum(s.tokens for s in measure.summaries if s.id in replaced)
    fixed = measure.fixed_tokens - replaced_tokens + tokens
    budget = measure.budget.budget
    if fixed > budget:
        raise ValidationFailed(
            f"Messages {first_seq}–{last_seq} take {tokens:,} tokens: with the system prompt, "
            f"pins and summaries that is {fixed:,}, more than the budget of {budget:,}. "
            "Nothing was set.",
            details={
                "record": [f"{record.name} does not fit in the context."],
                "expanded_tokens": tokens,
                "required_tokens": fixed,
                "budget_tokens": budget,
            },
        )
    tokens_after = measure.pressure - replaced_tokens + tokens
    name = snapshot_name(first_seq, last_seq, seat_key(session)) if session.is_room else record.name
    with transaction.atomic():
        # The seat's own row (docs/rooms.md): replacing this bot's pending expansion leaves
        # every other bot's in the room as it is.
        ContextExpansion.objects.update_or_create(
            session=session,
            bot_id=session.bot_id,
            defaults={
                "record": name,
                "first_seq": first_seq,
                "last_seq": last_seq,
                "reply": None,
            },
        )
        event = event_write(
            session,
            trigger="expand",
            outcome=CompactionEvent.Outcome.EXPANDED,
            reason="next_reply",
            tokens_before=measure.pressure,
            tokens_after=tokens_after,
            source_tokens=tokens,
            summary_tokens=replaced_tokens,
            snapshot=record,
            summary=Summary.objects.filter(pk__in=replaced).order_by("first_seq").first(),
        )
    return ExpandResult(
        record=name,
        first_seq=first_seq,
        last_seq=last_seq,
        messages=len(entries),
        tokens=tokens,
        replaces=sorted(replaced),
        tokens_before=measure.pressure,
        tokens_after=tokens_after,
        event=event,
    )
