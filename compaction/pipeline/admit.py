"""Admit: what the call carries (``compaction.admission`` decides on the measure and the
history rows), recorded as the session's ``last_admission``; refused with ``ContextTooLarge``
when the fixed part alone exceeds the budget (docs/compaction.md)."""

from collections.abc import Iterable
from dataclasses import replace
from typing import Any

import structlog
from django.utils import timezone

from bots.models import ChatSession
from chat_platform.errors import ContextTooLarge
from compaction.admission import Admission, HistoryRow, admission_decide
from compaction.measure import Measure
from compaction.models import SeatState
from compaction.pipeline import history as history_read
from compaction.seats import seat_key

log = structlog.get_logger("compaction.pipeline")


def _decide(measure: Measure, history: Iterable[HistoryRow]) -> Admission:
    return admission_decide(
        budget=measure.budget.budget,
        system_tokens=measure.system_tokens,
        new_message=measure.new_message,
        # An expanded span is sent whole, like pins (and is never part of the history).
        pinned=[*measure.pinned, *measure.expanded],
        summaries=measure.summaries,
        index_line_tokens=measure.index_line_tokens,
        index_block_tokens=measure.index_block_tokens,
        history_newest_first=history,
        history_totals=measure.history_totals,
        recalled=measure.recalled,
        reserve_tokens=measure.reserve_tokens,
    )


def context_unshrinkable(measure: Measure) -> Measure:
    """What no compaction can make smaller: with compaction on, the summaries are left out (the
    turn's blocking compaction may fuse them to make room: the send refused a chat whose
    summaries filled B before it could); the system prompt, the message and pins stay."""
    if not measure.session.bot.compaction_enabled:
        return measure
    return replace(measure, summaries=[])


def context_fixed_fits(measure: Measure) -> bool:
    """Do the system prompt, the new message, the recalled material, pins and summaries fit the
    budget? Only they can make a call impossible: the memory index and history are shortened
    to whatever room is left, so a measure taken without the index answers this too."""
    return _decide(measure, ()).decision != "reject"


def context_precheck(measure: Measure, *, path: str) -> None:
    """Refuse early, reading no history, when the fixed part alone exceeds the budget.

    The send path uses it so an oversized message fails at once (422 / message.failed) instead of
    occupying a worker; the turn re-checks through ``context_admit`` with the same rule.
    """
    admission = _decide(measure, ())
    if admission.decision == "reject":
        _reject(measure, admission, path=path)


def _reject(measure: Measure, admission: Admission, *, path: str) -> None:
    fields = _log_fields(measure, admission, path=path)
    log.info("context_admission", **fields)
    log.warning("context_admission_rejected", **fields)
    _last_admission_store(measure.session, fields)
    budget = measure.budget.budget
    recalled = sum(r.tokens for r in measure.recalled)
    details = {"budget_tokens": budget, "required_tokens": measure.fixed_tokens}
    if recalled and measure.fixed_tokens - recalled <= budget:
        # The user's message fits: what overflows is this turn's recall exchange (e.g. a model
        # that asked for thousands of records in one call). Say so instead of blaming the message.
        details["recalled_tokens"] = recalled
        raise ContextTooLarge(
            "The model's requests to read or search records, with what they returned, take "
            f"{recalled:,} tokens and do not fit in the bot's context budget of {budget:,} "
            "tokens. Your message itself fits.",
            details=details,
        )
    raise ContextTooLarge(
        "This message, with the system prompt and pinned messages, does not fit in the "
        f"bot's context budget of {budget:,} tokens.",
        details=details,
    )


def _log_fields(measure: Measure, admission: Admission, *, path: str) -> dict[str, Any]:
    return {
        "session_id": measure.session.pk,
        "bot_id": measure.session.bot_id,
        **admission.log_fields(),
        "path": path,
    }


def context_admit(
    measure: Measure,
    *,
    path: str,
    record: bool = True,
    history: Iterable[HistoryRow] | None = None,
) -> Admission:
    """Decide what the call carries (docs/compaction.md) and record it (``admission_record``); raise
    on reject, which is always recorded at once. ``record=False`` leaves recording an admitted call
    to the caller. ``history`` (newest first) is the history already read; else it is walked in
    keyset pages."""
    admission = _decide(
        measure, history_read.history_newest_first(measure) if history is None else history
    )
    if admission.decision == "reject":
        _reject(measure, admission, path=path)
    if record:
        admission_record(measure, admission, path=path)
    return admission


def admission_record(measure: Measure, admission: Admission, *, path: str) -> None:
    """The ``context_admission`` event, and the same fields as the session's ``last_admission``
    (the context report shows them)."""
    fields = _log_fields(measure, admission, path=path)
    log.info("context_admission", **fields)
    _last_admission_store(measure.session, fields)


def _last_admission_store(session: ChatSession, fields: dict[str, Any]) -> None:
    """The session's ``last_admission``; in a room, the bot's own (its seat's context report)."""
    key = seat_key(session)
    if key is None:
        ChatSession.objects.filter(pk=session.pk).update(last_admission=fields)
        return
    # One conditional UPDATE of that field; the seat's first admission creates its row.
    if not SeatState.objects.filter(session_id=session.pk, bot_id=key).update(
        last_admission=fields, updated_at=timezone.now()
    ):
        SeatState.objects.update_or_create(
            session_id=session.pk, bot_id=key, defaults={"last_admission": fields}
        )
