"""One compaction pass: range from stored counts -> snapshot -> summariser -> gates -> one
transaction that creates the summary, claims exactly the chosen messages and lowers the totals."""

import math
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from typing import Any

import structlog
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Sum

from bots import transitions
from bots.models import ChatSession, Message
from chat_platform import realtime
from chat_platform.dbconn import connection_release
from chat_platform.errors import QuotaExceeded
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.engine.common import (
    DEFAULT_SUMMARY_RATIO,
    EVERYTHING,
    RANGE_PAGE_SIZE,
    Conflict,
    Plan,
    current_turn_seq,
    session_fresh,
    session_kind_held,
)
from compaction.engine.events import event_write, room_frame, unchanged
from compaction.engine.holds import held_spans
from compaction.engine.summariser import (
    INPUT_SHARE_PERCENT,
    MAX_SUMMARY_TOKENS,
    compaction_model_config,
    prompt_messages,
    request_tokens,
    summariser_window,
)
from compaction.engine.transcript import transcript_line
from compaction.measure import RoomView, context_measure, seat_filter, seat_key
from compaction.models import CompactionEvent, SeatState, Summary, SummaryCoverage
from compaction.quality import retention_score, summary_gate
from compaction.ranges import RangeRow, range_select
from compaction.results import RunResult
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
    except QuotaExceeded:
        raise  # not a failed attempt: nothing was tried (the caller refuses or skips)
    except Exception as exc:
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


def range_rows(
    session: ChatSession,
    *,
    before_seq: int | None,
    want_tokens: int,
    room: RoomView | None = None,
) -> list[RangeRow]:
    """Uncompacted in-context rows, oldest first, in keyset pages until enough are in hand; in a
    room, those the bot was shown and its own summaries do not cover yet (``RoomView.where``).

    The spans of undone summaries that are still held are left out, as if not there: the scan
    goes on past them (a held span is not taken again until it is released)."""
    rows: list[RangeRow] = []
    queryset = Message.objects.filter(Message.in_context_q(), session=session).order_by("seq")
    if room is not None:
        queryset = queryset.filter(room.where())
    for first, last in held_spans(session):
        queryset = queryset.exclude(seq__gte=first, seq__lte=last)
    if before_seq is not None:
        queryset = queryset.filter(seq__lt=before_seq)
    queryset = queryset.values_list(
        "pk", "seq", "token_count", "role", "status", "pinned", "tool_call_id", "tool_calls"
    )
    cursor = 0
    taken = 0
    extra_pages = 1  # one page past the need, so a tool call at the cut can take its results
    while True:
        page = list(queryset.filter(seq__gt=cursor)[:RANGE_PAGE_SIZE])
        for pk, seq, tokens, role, status, pinned, tool_call_id, tool_calls in page:
            rows.append(
                RangeRow(
                    id=pk,
                    seq=seq,
                    tokens=tokens,
                    role=role,
                    status=status,
                    pinned=pinned,
                    tool_call_id=tool_call_id or None,
                    tool_call_ids=tuple(c.get("id", "") for c in tool_calls or ()),
                )
            )
            taken += tokens
        if len(page) < RANGE_PAGE_SIZE:
            return rows
        cursor = page[-1][1]
        if taken >= want_tokens:
            if extra_pages == 0:
                return rows
            extra_pages -= 1


def range_choose(
    session: ChatSession, plan: Plan, tokens_to_free: int, *, room: RoomView | None
) -> tuple[list[RangeRow], str]:
    """The range (from stored counts) and its transcript, whose request as sent fits in 85 % of
    the summariser's window: speaker labels cost more than the stored per-message overhead, so
    an over-long transcript shrinks the range by its overflow and is measured again.

    ``room``: the seat's view, as the pass's measure read it (None in a one-bot session)."""
    config = compaction_model_config(session.bot, model=plan.model)
    limit = summariser_window(session.bot, config) * INPUT_SHARE_PERCENT // 100
    cap = max(0, limit - request_tokens("", plan.focus, config.model))
    current_turn = current_turn_seq(session)
    rows = range_rows(
        session, before_seq=current_turn, want_tokens=min(tokens_to_free, cap), room=room
    )
    loaded: dict[int, Message] = {}
    for _ in range(8):
        selection = range_select(
            rows_oldest_first=rows,
            current_turn_seq=current_turn,
            tokens_to_free=tokens_to_free,
            min_tokens=plan.min_tokens,
            max_tokens=cap,
        )
        if not selection:
            return [], ""
        wanted = [row.id for row in selection if row.id not in loaded]
        loaded.update(
            (m.pk, m) for m in Message.objects.filter(pk__in=wanted).select_related("bot")
        )
        transcript = "\n".join(transcript_line(loaded[row.id], room) for row in selection)
        sent = request_tokens(transcript, plan.focus, config.model)
        if sent <= limit:
            return selection, transcript
        # Shrink in proportion to the overflow, 5 % beyond it: labels and time stamps can make
        # short messages cost several times their stored count, so subtracting the overflow
        # (tokens as sent) from a cap in stored tokens could leave nothing, or less than nothing.
        stored = sum(row.tokens for row in selection)
        cap = min(cap - 1, stored * limit * 19 // (sent * 20))
        if cap <= 0:
            return [], ""
    return [], ""


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
) -> tuple[dict[str, Any] | None, RunResult | None]:
    """Snapshot, call the summariser and gate its answer: (accepted summary fields, or failure).

    ``snapshot``: the span's existing snapshot, whose body is ``transcript`` (a re-summary
    reads it again; it is neither rewritten nor taken out of the index).

    The call is charged to the session's user (and the API key of the scope) before anything
    is written: a limit it does not fit raises ``QuotaExceeded``, no snapshot, no event, no call
    (docs/connections.md "Daily token limits")."""
    config = compaction_model_config(session.bot, model=plan.model)
    max_tokens = min(MAX_SUMMARY_TOKENS, max(1, summariser_window(session.bot, config) // 10))
    with usage.quota_charge(
        user_id=session.user_id,
        sends=request_tokens(transcript, plan.focus, config.model),
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
            if not isinstance(exc, gateway.ModelCallFailed):
                log.exception("compaction_summariser_crashed", session_id=session.pk)
            event = event_write(
                session,
                trigger=plan.trigger,
                outcome=CompactionEvent.Outcome.FAILED,
                reason="summariser_error",
                error=str(exc)[:2000],
                duration_ms=int((time.monotonic() - started) * 1000),
                **common,
            )
            return None, RunResult(
                "failed", "summariser_error", tokens_before, tokens_before, None, event
            )
    gate = summary_gate(
        text=completion.text,
        finish_reason=completion.finish_reason,
        replaced_tokens=replaced_tokens,
        count=lambda text: count_tokens(text, model=config.model),
    )
    duration_ms = int((time.monotonic() - started) * 1000)
    if gate.ok:
        # What counts is what the summary will cost in the context: its labelled block, by the
        # counter every stored count uses. A summary no cheaper than its source is rejected.
        block = Summary(first_seq=first_seq, last_seq=last_seq, text=gate.text).block
        if count_message_tokens(block, model=bot.model) >= replaced_tokens:
            gate = replace(gate, ok=False, reason="not_shorter")
    if not gate.ok:
        event = event_write(
            session,
            trigger=plan.trigger,
            outcome=CompactionEvent.Outcome.REJECTED,
            reason=gate.reason,
            error=completion.text[:2000],
            duration_ms=duration_ms,
            **common,
        )
        return None, RunResult("rejected", gate.reason, tokens_before, tokens_before, None, event)
    retention, missing = retention_score(transcript, gate.text)
    return {
        "text": gate.text,
        "model": config.model,
        "retention": retention,
        "missing_facts": missing,
        "snapshot": snapshot,
        "duration_ms": duration_ms,
    }, None


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
) -> tuple[int, CompactionEvent]:
    """Inside the committing transaction: index the snapshot, measure, write the event."""
    memory_services.snapshot_mark_indexed(snapshot=accepted["snapshot"])
    tokens_after = context_measure(session=session_fresh(session)).pressure
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


def source_tokens_to_take(session: ChatSession, excess: int) -> int:
    """Source tokens to take so that pressure lands on the target *after* the new summary.

    The summary comes back into the context, so freeing exactly the excess would leave pressure
    above the target and cost a second, tiny pass. The session's last compression ratio (summary
    / source; 25 % before the first) predicts how much comes back.
    """
    if excess <= 0:
        return 0
    last = (
        CompactionEvent.objects.filter(
            session=session, outcome=CompactionEvent.Outcome.COMPACTED, source_tokens__gt=0
        )
        .filter(**seat_filter(session))
        .exclude(trigger="fusion")
        .order_by("-id")
        .values_list("summary_tokens", "source_tokens")
        .first()
    )
    ratio = last[0] / last[1] if last else DEFAULT_SUMMARY_RATIO
    ratio = min(max(ratio, 0.05), 0.9)
    return math.ceil(excess / (1 - ratio))


class NotLower(Exception):
    """``/compact`` would not lower the context: the summary, with its snapshot joining the
    memory index, costs as much as the messages it replaces (a short chat)."""

    def __init__(self, tokens_after: int) -> None:
        super().__init__(tokens_after)
        self.tokens_after = tokens_after


def run_pass(session: ChatSession, plan: Plan, *, record_noop: bool = True) -> RunResult:
    """One compaction of the oldest history toward ``plan.target`` (caller holds the lease).

    ``record_noop=False``: a follow-up pass that finds nothing left ends quietly (no event).
    """
    measure = context_measure(session=session)
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

    selection, transcript = range_choose(session, plan, tokens_to_free, room=measure.room)
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
    )
    if failure is not None:
        return failure
    assert accepted is not None
    try:
        with transaction.atomic():
            session_kind_held(session)  # a bot joined meanwhile -> conflict
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
            if session.is_room:
                seat_cover(session, summary, ids, tokens=source_tokens)
            else:
                claimed = transitions.messages_compact(message_ids=ids, summary_id=summary.pk)
                if claimed != len(ids):
                    raise Conflict()
                transitions.session_context_remove(
                    session_id=session.pk, tokens=source_tokens, messages=len(ids)
                )
            tokens_after, event = record_success(
                session,
                plan.trigger,
                "",
                accepted,
                summary,
                tokens_before=tokens_before,
                source_tokens=source_tokens,
            )
            if plan.trigger == "manual" and tokens_after >= tokens_before:
                raise NotLower(tokens_after)  # rolls the summary back: nothing changes
    except NotLower as exc:
        event = event_write(
            session,
            trigger=plan.trigger,
            outcome=CompactionEvent.Outcome.REJECTED,
            reason="not_lower",
            error=f"The context would be {exc.tokens_after:,} tokens, from {tokens_before:,}.",
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            source_tokens=source_tokens,
            model=accepted["model"],
            snapshot=accepted["snapshot"],
        )
        return RunResult("rejected", "not_lower", tokens_before, exc.tokens_after, None, event)
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


def seat_cover(session: ChatSession, summary: Summary, ids: list[int], *, tokens: int) -> None:
    """In a room (caller's transaction): the bot's summary covers exactly these messages, for
    this bot alone (``SummaryCoverage``), and the bot's own totals drop by what it replaced.
    The same conditions as ``transitions.messages_compact``: a message pinned, changed or
    covered for this bot meanwhile is a conflict.

    One statement writes the coverage of those of ``ids`` still complete and unpinned
    (``INSERT … SELECT``): fewer rows than ids is a conflict, and so is a message this bot
    covers already, which the unique (bot, message) pair refuses — no read of the bot's whole
    coverage per pass. The seat's row exists after its first turn: one UPDATE moves its totals."""
    bot_id = session.bot_id
    try:
        with transaction.atomic():
            written = coverage_insert(summary_id=summary.pk, bot_id=bot_id, message_ids=ids)
    except IntegrityError as exc:
        raise Conflict() from exc
    if written != len(ids):
        raise Conflict()
    moved = {
        "covered_tokens": F("covered_tokens") + tokens,
        "covered_messages": F("covered_messages") + len(ids),
    }
    if not SeatState.objects.filter(session_id=session.pk, bot_id=bot_id).update(**moved):
        SeatState.objects.get_or_create(session_id=session.pk, bot_id=bot_id)
        SeatState.objects.filter(session_id=session.pk, bot_id=bot_id).update(**moved)


def coverage_insert(*, summary_id: int, bot_id: int, message_ids: list[int]) -> int:
    """``SummaryCoverage`` rows (summary, bot, message) for those of ``message_ids`` that are
    complete and unpinned, in one ``INSERT … SELECT``; how many were written."""
    claimable = Message.objects.filter(
        pk__in=message_ids, status=Message.Status.COMPLETE, pinned=False
    ).order_by()
    source_sql, source_params = claimable.values("id").query.sql_with_params()
    quote = connection.ops.quote_name
    meta = SummaryCoverage._meta
    columns = ", ".join(quote(meta.get_field(f).column) for f in ("summary", "bot", "message"))
    with connection.cursor() as cursor:
        # Identifiers from the models, the rows from Django's own compiled SQL; values are
        # parameters.
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({columns}) "  # noqa: S608
            f"SELECT CAST(%s AS BIGINT), CAST(%s AS BIGINT), claimable.{quote('id')} "
            f"FROM ({source_sql}) claimable",
            [summary_id, bot_id, *source_params],
        )
        return cursor.rowcount


# --- coverage, one code path for both kinds of session ------------------------------------------
# A one-bot session records coverage on its messages (``Message.compacted_by_id``, through
# ``bots.transitions``); a room records it per bot (``SummaryCoverage``) with the seat's own
# totals (``SeatState``). Fusion, re-summary and undo move coverage through these, so each keeps
# one path whatever the session is.


def coverage_move(session: ChatSession, *, from_summary_ids: list[int], to_summary_id: int) -> None:
    """Fusion, re-summary: what ``from_summary_ids`` covered is covered by ``to_summary_id``
    (caller's transaction). The totals do not move: the same messages stay covered."""
    if session.is_room:
        SummaryCoverage.objects.filter(summary_id__in=from_summary_ids).update(
            summary_id=to_summary_id
        )
    else:
        transitions.messages_compaction_move(
            from_summary_ids=from_summary_ids, to_summary_id=to_summary_id
        )


def coverage_restore(
    session: ChatSession, *, from_summary_id: int, to_summary_id: int, first_seq: int, last_seq: int
) -> None:
    """Undo of a fusion: the fused summary's coverage in one parent's span is that parent's
    again (the reverse of ``coverage_move``; caller's transaction)."""
    if session.is_room:
        SummaryCoverage.objects.filter(
            summary_id=from_summary_id, message__seq__gte=first_seq, message__seq__lte=last_seq
        ).update(summary_id=to_summary_id)
    else:
        transitions.messages_compaction_restore(
            from_summary_id=from_summary_id,
            to_summary_id=to_summary_id,
            first_seq=first_seq,
            last_seq=last_seq,
        )


def coverage_release(session: ChatSession, *, summary_id: int) -> tuple[int, int]:
    """Undo: what ``summary_id`` covers is no longer covered and comes back into the context —
    in a room, into its bot's context only: its coverage rows go and its seat's totals drop by
    exactly what they held (the reverse of ``seat_cover``); other bots' seats are untouched.
    Returns the (tokens, messages) that came back. Caller's transaction."""
    if not session.is_room:
        return transitions.messages_uncompact(summary_id=summary_id)
    rows = SummaryCoverage.objects.filter(summary_id=summary_id)
    held = rows.aggregate(tokens=Sum("message__token_count"), messages=Count("id"))
    tokens, messages = held["tokens"] or 0, held["messages"]
    rows.delete()
    if messages:
        SeatState.objects.filter(session_id=session.pk, bot_id=session.bot_id).update(
            covered_tokens=F("covered_tokens") - tokens,
            covered_messages=F("covered_messages") - messages,
        )
    return tokens, messages
