"""Every attempt's record: the ``CompactionEvent`` with its log line and frame, and the result
of an attempt that changed nothing."""

import structlog
from django.db import transaction

from bots.models import ChatSession
from bots.realtime import room_frame_bot
from chat_platform import realtime
from compaction.models import CompactionEvent
from compaction.payloads import event_payload
from compaction.results import RunResult

log = structlog.get_logger("compaction.engine")


def event_write(
    session: ChatSession, *, trigger: str, outcome: str, reason: str, **fields
) -> CompactionEvent:
    event = CompactionEvent.objects.create(
        session=session,
        bot_id=session.bot_id,
        trigger=trigger,
        outcome=outcome,
        reason=reason,
        **fields,
    )
    log.info(
        "compaction_event",
        session_id=session.pk,
        bot_id=session.bot_id,
        trigger=trigger,
        outcome=outcome,
        reason=reason,
        tokens_before=event.tokens_before,
        tokens_after=event.tokens_after,
        source_tokens=event.source_tokens,
        summary_tokens=event.summary_tokens,
        model=event.model,
        duration_ms=event.duration_ms,
    )
    frame = room_frame(session, {"type": "compaction.finished", "event": event_payload(event)})
    transaction.on_commit(lambda: realtime.send_frame(session.pk, frame))
    return event


def room_frame(session: ChatSession, frame: dict) -> dict:
    """A compaction frame names the bot whose seat it concerns in a room (docs/rooms.md); a
    one-bot session's frames are as they always were."""
    bot = room_frame_bot(session)
    if bot is not None:
        frame["bot"] = bot
    return frame


def unchanged(
    session: ChatSession, *, trigger: str, outcome: str, reason: str, pressure: int
) -> RunResult:
    """An attempt that changed nothing (noop or skipped): its event, and the result."""
    event = event_write(
        session,
        trigger=trigger,
        outcome=outcome,
        reason=reason,
        tokens_before=pressure,
        tokens_after=pressure,
    )
    return RunResult(outcome, reason, pressure, pressure, None, event)


def skipped(session: ChatSession, trigger: str, reason: str, pressure: int) -> RunResult:
    return unchanged(
        session,
        trigger=trigger,
        outcome=CompactionEvent.Outcome.SKIPPED,
        reason=reason,
        pressure=pressure,
    )
