"""One compaction pass: range from stored counts -> snapshot -> summariser -> gates -> one
transaction that creates the summary, claims exactly the chosen messages and lowers the totals."""

import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import structlog
from django.db import transaction

from bots.models import ChatSession
from chat_platform import realtime
from chat_platform.dbconn import connection_release
from chat_platform.errors import QuotaExceeded
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.engine.common import (
    EVERYTHING,
    Conflict,
    Plan,
    SessionGone,
    session_exists,
    session_fresh,
)
from compaction.engine.coverage import seat_cover
from compaction.engine.events import event_write, room_frame, unchanged
from compaction.engine.range_choice import Room, pass_room, range_choose, source_tokens_to_take
from compaction.engine.summariser import (
    MAX_SUMMARY_TOKENS,
    compaction_model_config,
    prompt_messages,
    request_tokens,
    summariser_window,
)
from compaction.facts import retention_score
from compaction.measure import context_measure
from compaction.models import CompactionEvent, Summary, SummaryCoverage
from compaction.quality import GateResult, summary_gate
from compaction.results import RunResult
from compaction.seats import seat_key
from connections import usage
from memory import services as memory_services
from memory.models import MemoryRecord

log = structlog.get_logger("compaction.engine")


def enveloped(session: ChatSession, plan: Plan, attempt: Callable[[], RunResult]) -> RunResult:
    """Run one attempt (a pass, a fusion, the fallback) so that *any* error it raises ends as a
    failed attempt on record: its transaction is rolled back, a ``CompactionEvent`` says so,
    and the caller arms cool-down/back-off as for any failure. A bug in a pass must not leave
    a session retrying its summariser after every turn, or fail the turn that needed room."""
    try:
        return attempt()
    except (QuotaExceeded, SessionGone):
        raise  # not a failed attempt: nothing was tried, or there is nothing left to compact
    except Exception as exc:
        if not session_exists(session.pk):  # deleted meanwhile: its rows went with it
            log.info("compaction_session_gone", session_id=session.pk, trigger=plan.trigger)
            raise SessionGone() from exc
        log.exception("compaction_attempt_crashed", session_id=session.pk, trigger=plan.trigger)
        pressure = context_measure(session=session_fresh(session)).pressure
        event = event_write(
            session,
            trigger=plan.trigger,
            outcome=CompactionEvent.Outcome.FAILED,
            reason="internal_error",
            error=(str(exc) or type(exc).__name__)[:2000],
            tokens_before=pressure,
            tokens_after=pressure,
        )
        return RunResult("failed", "internal_error", pressure, pressure, None, event)


# builtin/extractive's budget, as a share of the tokens the summary replaces (``summarise``).
EXTRACTIVE_MODEL = "builtin/extractive"
EXTRACTIVE_SHARE_PERCENT = 50


def _summary_max_tokens(
    session: ChatSession,
    config: gateway.ModelConfig,
    replaced_tokens: int,
    *,
    room: Room | None,
    span: tuple[int, int],
) -> int:
    """The summary's output budget: a tenth of the summariser's window, at most
    ``MAX_SUMMARY_TOKENS``. builtin/extractive keeps what fits its budget, and its labelled
    lines ("[12] 2024-03-08 13:57Z user:") outweigh short messages' stored counts: it gets at
    most a share of the tokens it replaces, or a chat of short facts got summaries no shorter
    than their source (not_shorter, pass after pass; docs/models.md). Within a pass's ``room``
    (``Room.aim``), its label over ``span`` off."""
    max_tokens = min(MAX_SUMMARY_TOKENS, max(1, summariser_window(session.bot, config) // 10))
    if config.model == EXTRACTIVE_MODEL:
        max_tokens = min(max_tokens, max(1, replaced_tokens * EXTRACTIVE_SHARE_PERCENT // 100))
    if room is not None:
        label = count_message_tokens(Summary(first_seq=span[0], last_seq=span[1]).block)
        max_tokens = min(max_tokens, max(1, room.aim - label))
    return max_tokens


def summarise(
    session: ChatSession,
    plan: Plan,
    *,
    transcript: str,
    replaced_tokens: int,
    first_seq: int,
    last_seq: int,
    tokens_before: int,
    source_tokens: int,
    snapshot: MemoryRecord | None = None,
    sends: int | None = None,  # request_tokens of this request, when the caller counted it
    room: Room | None = None,
) -> tuple[dict[str, Any] | None, RunResult | None]:
    """Snapshot, call the summariser and gate its answer: (accepted summary fields, or failure).

    ``snapshot``: the span's existing snapshot, whose body is ``transcript`` (a re-summary
    reads it again; it is neither rewritten nor taken out of the index).

    The call is charged to the session's user (and the API key of the scope) before anything
    is written: a limit it does not fit raises ``QuotaExceeded``, no snapshot, no event, no call
    (docs/connections.md "Daily token limits").

    ``room``: where the summary must fit (a pass's, ``pass_room``); None: anywhere (a fusion
    replaces what it summarises, and must be shorter than it)."""
    config = compaction_model_config(session.bot, model=plan.model, chat_model=session.chat_model)
    max_tokens = _summary_max_tokens(
        session, config, replaced_tokens, room=room, span=(first_seq, last_seq)
    )
    with usage.quota_charge(
        user_id=session.user_id,
        sends=request_tokens(transcript, plan.focus, config.model) if sends is None else sends,
        output=max_tokens,
        purpose="summary",
    ) as meter:
        bot = session.bot
        if snapshot is None:
            snapshot = memory_services.snapshot_write(
                session=session,
                first_seq=first_seq,
                last_seq=last_seq,
                body=transcript,
                seat_bot_id=seat_key(session),
            )
        # On commit, like every frame: a caller's transaction may still roll the snapshot back.
        started_frame = room_frame(session, {"type": "compaction.started", "trigger": plan.trigger})
        transaction.on_commit(partial(realtime.send_frame, session.pk, started_frame))
        started = time.monotonic()
        common = {
            "tokens_before": tokens_before,
            "tokens_after": tokens_before,
            "source_tokens": source_tokens,
            "model": config.model,
            "snapshot": snapshot,
        }
        # No database connection is held while the summariser thinks (docs/security.md).
        connection_release()
        try:
            completion = gateway.complete(
                config, prompt_messages(transcript, plan.focus), max_tokens=max_tokens
            )
            meter.add(completion.prompt_tokens + completion.completion_tokens)
        except Exception as exc:  # whatever the summariser raised: a failed attempt, on record
            return None, _summariser_failed(session, plan, exc, started=started, common=common)
    gate = summary_gate(
        text=completion.text,
        finish_reason=completion.finish_reason,
        replaced_tokens=replaced_tokens,
        count=lambda text: count_tokens(text, model=config.model),
    )
    duration_ms = int((time.monotonic() - started) * 1000)
    if gate.ok:
        limit = None if room is None else room.limit
        gate = _cheaper_than_source(
            gate, span=(first_seq, last_seq), model=bot.model, source=replaced_tokens, limit=limit
        )
    if not gate.ok:
        return None, _rejected(session, plan, gate, completion.text, duration_ms, common)
    return _accepted(gate, transcript, model=config.model, snapshot=snapshot, ms=duration_ms), None


def _accepted(
    gate: GateResult, transcript: str, *, model: str, snapshot: MemoryRecord, ms: int
) -> dict[str, Any]:
    """An accepted summary's fields, with what it retains of its transcript."""
    retention, missing = retention_score(transcript, gate.text)
    return {
        "text": gate.text,
        "model": model,
        "retention": retention,
        "missing_facts": missing,
        "snapshot": snapshot,
        "duration_ms": ms,
    }


def _summariser_failed(
    session: ChatSession, plan: Plan, exc: Exception, *, started: float, common: dict[str, Any]
) -> RunResult:
    """Whatever the summariser raised, as a failed attempt on record."""
    if not isinstance(exc, gateway.ModelCallFailed):
        log.exception("compaction_summariser_crashed", session_id=session.pk)
    # The reply it ran for was stopped (``gateway.stop_on``): not the summariser's failure.
    reason = "stopped" if gateway.stop_requested() else "summariser_error"
    event = event_write(
        session,
        trigger=plan.trigger,
        outcome=CompactionEvent.Outcome.FAILED,
        reason=reason,
        error=str(exc)[:2000],
        duration_ms=int((time.monotonic() - started) * 1000),
        **common,
    )
    tokens_before = common["tokens_before"]
    return RunResult("failed", reason, tokens_before, tokens_before, None, event)


def _rejected(
    session: ChatSession,
    plan: Plan,
    gate: GateResult,
    answer: str,
    duration_ms: int,
    common: dict[str, Any],
) -> RunResult:
    """A summary the gates refused, on record with the answer as its error."""
    event = event_write(
        session,
        trigger=plan.trigger,
        outcome=CompactionEvent.Outcome.REJECTED,
        reason=gate.reason,
        error=answer[:2000],
        duration_ms=duration_ms,
        **common,
    )
    tokens_before = common["tokens_before"]
    return RunResult("rejected", gate.reason, tokens_before, tokens_before, None, event)


def _cheaper_than_source(
    gate: GateResult, *, span: tuple[int, int], model: str, source: int, limit: int | None = None
) -> GateResult:
    """What counts is what the summary will cost in the context: its labelled block, by the
    counter every stored count uses. A summary no cheaper than its source is rejected, and one
    over ``limit`` (``Room.limit``) as ``over_budget``."""
    block = Summary(first_seq=span[0], last_seq=span[1], text=gate.text).block
    tokens = count_message_tokens(block, model=model)
    if tokens >= source:
        return replace(gate, ok=False, reason="not_shorter")
    if limit is not None and tokens > limit:
        return replace(gate, ok=False, reason="over_budget")
    return gate


def summary_create(
    session: ChatSession,
    plan: Plan,
    accepted: dict[str, Any],
    *,
    first_seq: int,
    last_seq: int,
    source_tokens: int,
    level: int,
) -> Summary:
    summary = Summary(
        session=session,
        bot=session.bot,
        level=level,
        text=accepted["text"],
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=source_tokens,
        model=accepted["model"],
        trigger=plan.trigger,
        retention=accepted["retention"],
        missing_facts=accepted["missing_facts"],
        focus=plan.focus[:500],
        token_count=0,
    )
    summary.token_count = count_message_tokens(summary.block, model=session.bot.model)
    summary.save()
    return summary


def record_success(
    session: ChatSession,
    trigger: str,
    reason: str,
    accepted: dict[str, Any],
    summary: Summary,
    *,
    tokens_before: int,
    source_tokens: int,
    must_lower: bool = False,
) -> tuple[int, CompactionEvent]:
    """Inside the committing transaction: index the snapshot, measure, write the event.
    ``must_lower`` (``/compact`` in chat): a context no smaller than before raises ``NotLower``
    before anything is recorded (the caller's transaction rolls the summary and claim back)."""
    # What the summary covers, as a subquery of its coverage rows (written before this): the
    # messages its snapshot holds, not the others of its span (pinned, interrupted, held).
    covered = SummaryCoverage.objects.filter(summary_id=summary.pk).values("message_id")
    memory_services.snapshot_mark_indexed(snapshot=accepted["snapshot"], covered=covered)
    tokens_after = context_measure(session=session_fresh(session)).pressure
    if must_lower and tokens_after >= tokens_before:
        raise NotLower(tokens_after)
    event = event_write(
        session,
        trigger=trigger,
        outcome=CompactionEvent.Outcome.COMPACTED,
        reason=reason,
        tokens_before=tokens_before,
        tokens_after=tokens_after,
        source_tokens=source_tokens,
        summary_tokens=summary.token_count,
        model=accepted["model"],
        duration_ms=accepted["duration_ms"],
        snapshot=accepted["snapshot"],
        summary=summary,
    )
    return tokens_after, event


def run_pass(session: ChatSession, plan: Plan, *, record_noop: bool = True) -> RunResult:
    """One compaction of the oldest history toward ``plan.target`` (caller holds the lease).

    ``record_noop=False``: a follow-up pass that finds nothing left ends quietly (no event).
    """
    measure = plan.measured or context_measure(session=session)
    tokens_before = measure.pressure
    excess = tokens_before - plan.target
    tokens_to_free = (
        EVERYTHING if plan.trigger == "manual" else source_tokens_to_take(session, excess)
    )
    noop = CompactionEvent.Outcome.NOOP
    if tokens_to_free <= 0:
        return unchanged(
            session,
            trigger=plan.trigger,
            outcome=noop,
            reason="below_target",
            pressure=tokens_before,
        )

    selection, transcript, sends = range_choose(
        session, plan, tokens_to_free, seat=measure.seat, room=measure.room
    )
    if not selection and not record_noop:
        return RunResult("noop", "nothing_to_compact", tokens_before, tokens_before)
    if not selection:
        return unchanged(
            session,
            trigger=plan.trigger,
            outcome=noop,
            reason="nothing_to_compact",
            pressure=tokens_before,
        )

    ids = [row.id for row in selection]
    source_tokens = sum(row.tokens for row in selection)
    first_seq, last_seq = selection[0].seq, selection[-1].seq
    accepted, failure = summarise(
        session,
        plan,
        transcript=transcript,
        replaced_tokens=source_tokens,
        first_seq=first_seq,
        last_seq=last_seq,
        tokens_before=tokens_before,
        source_tokens=source_tokens,
        sends=sends,
        room=pass_room(measure, plan, selection),
    )
    if failure is not None:
        return failure
    assert accepted is not None
    return _pass_commit(
        session,
        plan,
        accepted,
        ids,
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=source_tokens,
        tokens_before=tokens_before,
        seen_from=measure.room.from_seq if measure.room is not None else 1,
    )


class NotLower(Exception):
    """The context measured with the summary in place is no smaller than before it."""

    def __init__(self, tokens_after: int) -> None:
        super().__init__(tokens_after)
        self.tokens_after = tokens_after


def _not_lower(
    session: ChatSession,
    plan: Plan,
    accepted: dict[str, Any],
    *,
    tokens_before: int,
    would_be: int,
    source_tokens: int,
) -> RunResult:
    """A summary shorter than its messages can still leave the context no smaller (its block's
    label, the snapshot's line in the memory index): nothing is kept, the attempt is on record
    as rejected (``not_lower``), and the notice says so (docs/compaction.md "/compact")."""
    event = event_write(
        session,
        trigger=plan.trigger,
        outcome=CompactionEvent.Outcome.REJECTED,
        reason="not_lower",
        error=(
            f"With the summary in place the context would be {would_be:,} tokens, not less "
            f"than the {tokens_before:,} it is."
        ),
        tokens_before=tokens_before,
        tokens_after=tokens_before,
        source_tokens=source_tokens,
        model=accepted["model"],
        duration_ms=accepted["duration_ms"],
        snapshot=accepted["snapshot"],
    )
    return RunResult(
        "rejected", "not_lower", tokens_before, tokens_before, None, event, would_be=would_be
    )


def _pass_commit(
    session: ChatSession,
    plan: Plan,
    accepted: dict[str, Any],
    ids: list[int],
    *,
    first_seq: int,
    last_seq: int,
    source_tokens: int,
    tokens_before: int,
    seen_from: int,
) -> RunResult:
    """One transaction: the summary, the conditional claim of exactly ``ids``, the totals
    lowered, the event; a message that changed meanwhile ends it as a conflict. ``seen_from``:
    in a room, the first seq the seat is shown (``RoomView.from_seq``)."""
    try:
        with transaction.atomic():
            summary = summary_create(
                session,
                plan,
                accepted,
                first_seq=first_seq,
                last_seq=last_seq,
                source_tokens=source_tokens,
                level=1,
            )
            # Conditional claim: a message pinned, compacted or changed meanwhile -> conflict.
            seat_cover(session, summary, ids, tokens=source_tokens, seen_from=seen_from)
            tokens_after, event = record_success(
                session,
                plan.trigger,
                "",
                accepted,
                summary,
                tokens_before=tokens_before,
                source_tokens=source_tokens,
                must_lower=plan.must_lower,
            )
    except NotLower as grown:
        return _not_lower(
            session,
            plan,
            accepted,
            tokens_before=tokens_before,
            would_be=grown.tokens_after,
            source_tokens=source_tokens,
        )
    except Conflict:
        event = event_write(
            session,
            trigger=plan.trigger,
            outcome=CompactionEvent.Outcome.FAILED,
            reason="conflict",
            error="The messages changed while they were being summarised.",
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            source_tokens=source_tokens,
            model=accepted["model"],
            snapshot=accepted["snapshot"],
        )
        return RunResult("failed", "conflict", tokens_before, tokens_before, None, event)
    return RunResult("compacted", "", tokens_before, tokens_after, summary, event)
