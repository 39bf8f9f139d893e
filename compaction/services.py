"""Compaction as the interfaces see it: access-checked manual compaction and its notice text."""

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser

from bots.models import ChatSession
from bots.queries import (
    BOT_UNAVAILABLE,
    bot_usable_in,
    reply_running_over,
    session_get_for_use,
    session_get_for_user,
    session_seat_get,
)
from bots.transitions import reply_running_first
from chat_platform import realtime
from chat_platform.errors import CompactionBusy, NotFound, ValidationFailed
from chat_platform.heavy import heavy_request
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.engine import RunResult, compaction_manual, compaction_soft, seat_load
from compaction.engine.common import summary_seat
from compaction.engine.expansion import session_expand
from compaction.engine.holds import held_spans
from compaction.engine.resummarise import summary_resummarise
from compaction.engine.undo import (
    RevertResult,
    summary_release,
    summary_revert,
    summary_snapshot,
)
from compaction.measure import context_measure
from compaction.models import Summary
from compaction.payloads import event_payload, result_payload, summary_payload
from compaction.pipeline.report import context_bot, context_report
from compaction.queries import summary_get_for_user
from compaction.seats import seat_key
from connections import usage
from memory.models import MemoryRecord
from memory.queries import record_get_for_session
from memory.services import snapshot_name

REASON_TEXT = {
    "summariser_error": "the summariser did not answer",
    "stopped": "the reply it ran for was stopped",
    "empty": "the summary came back empty",
    "finish_reason": "the summary was cut off before it finished",
    "too_short": "the summary was too short to be useful",
    "not_shorter": "the summary was not shorter than the messages it would replace",
    "not_lower": "with the summary in place the context would not be smaller",
    "over_budget": "the summary would not fit beside what every call sends",
    "tool_syntax": "the summary contained tool-call syntax",
    "conflict": "the messages changed while they were being summarised",
    "busy": "another compaction of this session did not finish in time",
    "internal_error": "an internal error stopped it (see the server log)",
    "service_unavailable": "Redis, which guards compaction, is not answering; try again shortly",
    "quota_exceeded": "your daily token limit has no room for the summariser's input",
}


def session_compact(
    *,
    user: AbstractBaseUser,
    session_id: object,
    focus: str = "",
    bot_id: object = None,
    quota: Sequence[usage.Limit] = (),
) -> RunResult:
    """``POST /compact/``; in a room, of one bot's seat (``?bot=``, default: the default bot).
    ``quota``: the limits of the API key the request came through; with the user's, a spent
    one refuses (``quota_exceeded``) before any summariser call, and every call counts on them
    (docs/connections.md "Daily token limits")."""
    session = session_get_for_use(user=user, session_id=session_id)
    session = session_seat_get(user=user, session=session, bot_id=bot_id)
    if not bot_usable_in(session=session):
        raise NotFound(BOT_UNAVAILABLE)
    if not text_is_storable(focus):  # the focus is stored on the summary
        raise ValidationFailed(details={"focus": [UNSTORABLE_MESSAGE]})
    usage.payer_check(user_id=session.user_id, extra=quota)
    with heavy_request(user_id=user.pk, kind="compact"), usage.quota_scope(extra=quota):
        result = compaction_manual(session=session, focus=focus.strip())
    context_notify(session_id=session.pk, bot_id=seat_key(session))
    return result


def soft_compaction_yields(*, session_id: int, yielded: int) -> bool:
    """Whether a soft compaction taken from the queue should wait: a reply of the session is
    running or queued (in a room, the next bot of the round; anywhere, a message sent
    meanwhile) and it has yielded fewer than ``COMPACTION_SOFT_YIELD_MAX`` times. Soft
    compaction is not urgent (the hard threshold guards every turn), so it runs after the
    replies rather than beside them, where its CPU slowed them (``bench/rooms.py --stack``).
    (A task run eagerly, in tests, is not asked: the turn dispatches it after its hand-over,
    so the next reply has already run. Embedded mode's task threads are asked like a worker.)"""
    if yielded >= settings.COMPACTION_SOFT_YIELD_MAX:
        return False
    return reply_running_first(session_id=session_id) is not None


def session_compact_soft(*, session_id: int, bot_id: int | None = None) -> RunResult | None:
    """After a turn (the ``compaction`` queue): soft compaction, then the meter catches up."""
    result = compaction_soft(session_id=session_id, bot_id=bot_id)
    if result is not None and result.compacted:
        context_notify(session_id=session_id, bot_id=bot_id)
    return result


def _seat_usable(session: ChatSession) -> None:
    """An action that runs the seat's bot (its summariser) needs that bot usable in the chat,
    like ``/compact`` (a shared bot un-shared since it joined: its owner's model is not run)."""
    if not bot_usable_in(session=session):
        raise NotFound(BOT_UNAVAILABLE)


def refuse_inside_running_reply(
    *, session_id: int, first_seq: int | None, last_seq: int | None, action: str
) -> None:
    """A summary (or snapshot) made inside a reply that is still running covers that reply's own
    rounds, which its tool loop is using: undo, re-summarise and expand wait until the reply has
    ended (``409 compaction_busy``, ``details.message_id`` the reply; docs/tools.md)."""
    if first_seq is None or last_seq is None:
        return
    reply = reply_running_over(session_id=session_id, first_seq=first_seq, last_seq=last_seq)
    if reply is not None:
        raise CompactionBusy(
            f"This compaction was made inside a reply that is still running; {action} it once "
            "the reply has finished. Nothing was changed.",
            details={"message_id": reply},
        )


def summary_revert_for_user(
    *,
    user: AbstractBaseUser,
    summary_id: object,
    compact_rest: bool = False,
    quota: Sequence[usage.Limit] = (),
) -> RevertResult:
    """Undo a compaction (docs/context-records.md). Another user's summary is ``not_found`` and
    nothing changes; "undo and compact the rest" runs the bot's summariser, so it needs the bot to
    be usable in the chat, like ``/compact``, and a daily limit with room (``quota``: the key's)."""
    summary = summary_get_for_user(user=user, summary_id=summary_id)
    if compact_rest:
        session = session_get_for_use(user=user, session_id=summary.session_id)
        _seat_usable(summary_seat(session, summary.bot_id))
        usage.payer_check(user_id=session.user_id, extra=quota)
    else:
        session_get_for_user(user=user, session_id=summary.session_id)
    refuse_inside_running_reply(
        session_id=summary.session_id,
        first_seq=summary.first_seq,
        last_seq=summary.last_seq,
        action="undo",
    )
    with heavy_request(user_id=user.pk, kind="revert"), usage.quota_scope(extra=quota):
        result = summary_revert(summary=summary, compact_rest=compact_rest)
    context_notify(session_id=summary.session_id, bot_id=_summary_seat_key(summary))
    return result


def _summary_seat_key(summary: Summary) -> int | None:
    """Whose context report changed: in a room, the summary's bot's seat."""
    return summary.bot_id if summary.session.is_room else None


def summary_resummarise_for_user(
    *,
    user: AbstractBaseUser,
    summary_id: object,
    focus: str = "",
    quota: Sequence[usage.Limit] = (),
) -> dict[str, Any]:
    """Re-summarise a summary's span from its snapshot with the user's focus
    (docs/context-records.md). The answer says what happened: the new summary, or why the old one
    stays. A spent daily limit (the user's, or ``quota``: the key's) refuses before the summariser
    is called."""
    summary = summary_get_for_user(user=user, summary_id=summary_id)
    session = session_get_for_use(user=user, session_id=summary.session_id)
    _seat_usable(summary_seat(session, summary.bot_id))  # runs that bot's summariser
    if not text_is_storable(focus):
        raise ValidationFailed(details={"focus": [UNSTORABLE_MESSAGE]})
    refuse_inside_running_reply(
        session_id=summary.session_id,
        first_seq=summary.first_seq,
        last_seq=summary.last_seq,
        action="re-summarise",
    )
    usage.payer_check(user_id=session.user_id, extra=quota)
    with heavy_request(user_id=user.pk, kind="resummarise"), usage.quota_scope(extra=quota):
        result = summary_resummarise(summary=summary, focus=focus.strip())
    context_notify(session_id=summary.session_id, bot_id=_summary_seat_key(summary))
    summary.refresh_from_db()
    if result.compacted:
        message = (
            f"Re-summarised messages {summary.first_seq}–{summary.last_seq}: "
            f"{result.tokens_before:,} -> {result.tokens_after:,} tokens."
        )
    else:
        reason = REASON_TEXT.get(result.reason, result.reason or "unknown error")
        message = f"Re-summary {result.outcome}: {reason}. The summary is unchanged."
    return {**result_payload(result), "message": message, "replaced": summary_payload(summary)}


def session_expand_for_user(
    *,
    user: AbstractBaseUser,
    session_id: object,
    record: str | None = None,
    summary_id: int | None = None,
    bot_id: object = None,
) -> dict[str, Any]:
    """ "Use the full text next turn" (docs/context-records.md) for a snapshot (``record``) or a
    summary (its snapshot's span). Someone else's chat, record or summary is ``not_found``.

    In a room, for one bot's next reply: a summary's bot; a record's seat bot (the bot whose
    compaction wrote the snapshot); ``bot_id`` (``?bot=``) names the seat otherwise, and a
    snapshot of another bot's seat is not readable from it (``not_found``)."""
    session = session_get_for_use(user=user, session_id=session_id)
    if summary_id is not None:
        summary = summary_get_for_user(user=user, summary_id=summary_id)
        if summary.session_id != session.pk:
            raise NotFound("Summary not found.")
        seat = summary_seat(session, summary.bot_id)
        if bot_id not in (None, "") and session_seat_get(
            user=user, session=session, bot_id=bot_id
        ).bot_id != (seat.bot_id):
            raise ValidationFailed(
                "This summary is another bot's: it can be expanded for its own bot only.",
                details={"bot": [f"Summary {summary.pk} belongs to bot {summary.bot_id}."]},
            )
        snapshot = summary_snapshot(summary, room=session.is_room)
        record = (
            snapshot.name
            if snapshot is not None
            else snapshot_name(summary.first_seq, summary.last_seq)
        )
    elif bot_id not in (None, ""):
        seat = session_seat_get(user=user, session=session, bot_id=bot_id)
    else:
        seat = _record_seat(session, record)
    found = record_get_for_session(session=seat, name=record)
    refuse_inside_running_reply(
        session_id=session.pk, first_seq=found.first_seq, last_seq=found.last_seq, action="expand"
    )
    result = session_expand(session=seat, record=found)
    context_notify(session_id=session.pk, bot_id=seat_key(seat))
    return {
        "record": result.record,
        "first_seq": result.first_seq,
        "last_seq": result.last_seq,
        "messages": result.messages,
        "tokens": result.tokens,
        "replaces": result.replaces,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "event": event_payload(result.event),
    }


def _record_seat(session: ChatSession, record: object) -> ChatSession:
    """A room's snapshot is expanded for the bot whose seat wrote it; an unknown name (or a
    one-bot session) stays with the session, whose lookup answers ``not_found``."""
    if not session.is_room or not isinstance(record, str):
        return session
    writer = (
        MemoryRecord.objects.filter(session=session, kind=MemoryRecord.Kind.SNAPSHOT, name=record)
        .values_list("bot_id", flat=True)
        .first()
    )
    return session if writer is None else summary_seat(session, writer)


def summary_release_for_user(*, user: AbstractBaseUser, summary_id: object) -> dict[str, Any]:
    """Let automatic compaction take an undone span again (in a room, in its bot's seat)."""
    summary = summary_get_for_user(user=user, summary_id=summary_id)
    event = summary_release(summary=summary)
    context_notify(session_id=summary.session_id, bot_id=_summary_seat_key(summary))
    return {"summary": summary_payload(summary), "event": event_payload(event)}


def revert_payload(result: RevertResult) -> dict[str, Any]:
    """The answer to an undo: the restored range and what came back into the context."""
    summary = result.summary
    return {
        "summary": summary_payload(summary),
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "restored": {
            "messages": result.restored_messages,
            "tokens": result.restored_tokens,
            "summaries": [p.pk for p in result.parents],
        },
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "held": summary.held,
        "event": event_payload(result.event),
        "compaction": result_payload(result.compaction) if result.compaction else None,
    }


def context_notify(*, session_id: int, bot_id: int | None = None) -> None:
    """Send the session its context report (``context.updated``), as after a turn: a compaction
    changes every part of the meter. In a room, the report of ``bot_id``'s seat."""
    session = seat_load(session_id, bot_id)
    if session is not None:
        realtime.notify_context_updated(
            session_id, context_report(session=session), bot=context_bot(session)
        )


def compaction_notice_text(result: RunResult, *, session: ChatSession | None = None) -> str:
    """The chat notice answering ``/compact`` (docs/compaction.md). With the ``session`` (its seat
    in a room): when there was nothing to compact although the gauge says compaction is due, say
    what fills the context instead, so the command and the gauge tell one story."""
    if result.outcome == "compacted" and result.first_seq is not None:
        done = (
            f"{result.tokens_before:,} -> {result.tokens_after:,} tokens "
            f"(messages {result.first_seq}–{result.last_seq})"
        )
        if result.stopped == "quota_exceeded" and result.quota:
            # Stopped part-way: what was done, what ran out and when it resets; the rest of the
            # history is as it was (docs/compaction.md "/compact in chat").
            words = usage.limit_words(result.quota, what="the summariser's next input")
            return (
                f"Context compacted in part: {done}. Then {words}. The rest of the history was "
                "not compacted; /compact again after the reset to finish."
            )
        return f"Context compacted: {done}."
    if result.outcome in ("noop", "skipped"):
        due = _nothing_left_although_due(session) if session is not None else ""
        return "Nothing to compact right now." + (due or _held_left(session))
    if result.reason == "not_shorter":
        # Not a failure: what is left since the last compaction is too little to shorten.
        return (
            "Nothing worth compacting yet: a summary would not be shorter than the messages "
            "since the last compaction. Nothing was changed."
        )
    if result.reason == "quota_exceeded" and result.quota:
        # What ran out and when it resets (docs/connections.md "Daily token limits").
        words = usage.limit_words(result.quota, what="the summariser's input")
        return f"Compaction did not run: {words}. Nothing was changed."
    if result.reason == "not_lower":
        # Shorter than its messages, yet the context with it (its label, the snapshot's index
        # line) would be no smaller: nothing was kept (docs/compaction.md "/compact").
        would_be = result.would_be if result.would_be is not None else result.tokens_before
        return (
            f"Nothing to compact: with a summary in place the context would be {would_be:,} "
            f"tokens, not less than the {result.tokens_before:,} it is now. Nothing was changed."
        )
    reason = REASON_TEXT.get(result.reason, result.reason or "unknown error")
    return f"Compaction failed: {reason}. Nothing was changed."


def _held_left(session: ChatSession | None) -> str:
    """Why ``/compact`` passed over history an undo brought back: it is held until its
    summary's "Let automatic compaction take it again" (docs/context-records.md)."""
    spans = held_spans(session) if session is not None else []
    if not spans:
        return ""
    named = ", ".join(f"{first}–{last}" for first, last in sorted(spans))
    return (
        f" Messages {named} stay as they are after an undo; choose “Let automatic compaction "
        "take it again” on their summary to compact them."
    )


def _nothing_left_although_due(session: ChatSession) -> str:
    """Why ``/compact`` found nothing while pressure is at or past the soft threshold: only the
    latest exchange, summaries, pins, the system prompt and the index are left, and none of
    them is history a summary could replace. Empty when the gauge does not say "due"."""
    measure = context_measure(session=session)
    soft = measure.budget.soft
    if not measure.budget.soft_due(measure.pressure):
        return ""
    named = {
        "the latest messages": measure.parts["history"],
        "summaries": measure.parts["summaries"],
        "pinned messages": measure.parts["pinned"],
        "the system prompt": measure.parts["system"],
        "the memory index": measure.parts["memory_index"],
    }
    held = " (or held after an undo)" if held_spans(session) else ""
    listed = ", ".join(f"{name} {tokens:,}" for name, tokens in named.items() if tokens)
    return (
        f" Everything before the latest exchange is already summarised or pinned{held}. The "
        f"context is {measure.pressure:,} tokens (compaction is due from {soft:,}): {listed}. "
        "Unpin messages, shorten the system prompt, or start a new chat to make room."
    )
