"""Reads of the compaction app, always through the session access chokepoint."""

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet

from bots.models import ChatSession, Message
from bots.queries import message_get_for_user, session_get_for_user, session_seat_get
from chat_platform.errors import NotFound, ValidationFailed
from compaction.measure import context_measure
from compaction.models import CompactionEvent, Summary, SummaryCoverage
from compaction.pipeline.admit import context_fixed_fits
from compaction.results import RunResult
from compaction.seats import seat_summaries


def summary_list_for_user(
    *, user: AbstractBaseUser, session_id: object, bot_id: object = None
) -> QuerySet[Summary]:
    """The session's summaries; in a room, those of one bot's seat (``?bot=``, default: the
    room's default bot). A one-bot session's are all its bot's."""
    session = session_get_for_user(user=user, session_id=session_id)
    if session.is_room:
        seat = session_seat_get(user=user, session=session, bot_id=bot_id)
        summaries = seat_summaries(session, seat.bot_id)
    else:
        if bot_id not in (None, ""):
            session_seat_get(
                user=user, session=session, bot_id=bot_id
            )  # not the chat's bot: not found
        summaries = seat_summaries(session, None)
    return summaries.prefetch_related("parents").order_by("-created_at", "-id")


def seat_compacted_ids(seat: ChatSession, *, after_seq: int | None = None) -> set[int]:
    """The ids of the messages (after ``after_seq``) that the seat's own summaries cover:
    ``seat`` as ``session_seat_get`` reads it, the seat's bot as its ``bot`` (a one-bot chat's
    own). One statement."""
    rows = SummaryCoverage.objects.filter(bot_id=seat.bot_id, summary__session_id=seat.pk)
    if after_seq is not None:
        rows = rows.filter(message__seq__gt=after_seq)
    return set(rows.values_list("message_id", flat=True))


def message_compacted(message: Message) -> bool:
    """Whether a summary of the seat of the message's chat (its bot's; a room's default bot's)
    covers ``message``, its session read with it. One statement."""
    return SummaryCoverage.objects.filter(
        message_id=message.pk, bot_id=message.session.bot_id
    ).exists()


def manual_run_between(*, command: Message, notice: Message | None) -> RunResult | None:
    """What a ``/compact`` typed in chat did, read back from the events it wrote between its
    ``command`` and its ``notice``, for a send repeated with the same ``client_id``
    (docs/api.md). None while it runs (no notice yet) or when it wrote none (the seat was busy,
    the limit refused it before any call, an ``@`` named nobody)."""
    if notice is None:
        return None
    events = list(
        CompactionEvent.objects.filter(
            session_id=command.session_id,
            trigger__in=["manual", "fusion"],
            created_at__gte=command.created_at,
            created_at__lte=notice.created_at,
        )
        .select_related("summary")
        .order_by("id")
    )
    if not events:
        return None
    compacted = [e for e in events if e.outcome == CompactionEvent.Outcome.COMPACTED]
    last = compacted[-1] if compacted else events[-1]
    before = events[0].tokens_before if compacted else last.tokens_before
    return RunResult(last.outcome, last.reason, before, last.tokens_after, last.summary, last)


def summary_get_for_user(*, user: AbstractBaseUser, summary_id: object) -> Summary:
    """One of the user's summaries; ``not_found`` whether missing or someone else's."""
    try:
        pk = int(str(summary_id))
    except ValueError:
        pk = 0
    if not 0 < pk < 2**63:
        raise NotFound("Summary not found.")
    summary = (
        Summary.objects.select_related("session__bot").filter(pk=pk, session__user=user).first()
    )
    if summary is None:
        raise NotFound("Summary not found.")
    return summary


def event_list_for_user(
    *, user: AbstractBaseUser, session_id: object | None = None, bot_id: object = None
) -> QuerySet[CompactionEvent]:
    """The user's compaction events; with ``?session=``, that session's, and in a room one
    bot's (``?bot=``, default: the room's default bot)."""
    events = CompactionEvent.objects.filter(session__user=user)
    if session_id not in (None, ""):
        session = session_get_for_user(user=user, session_id=session_id)
        events = events.filter(session=session)
        if session.is_room:
            events = events.filter(
                bot_id=session_seat_get(user=user, session=session, bot_id=bot_id).bot_id
            )
        elif bot_id not in (None, ""):
            session_seat_get(user=user, session=session, bot_id=bot_id)
    elif bot_id not in (None, ""):
        raise ValidationFailed(details={"bot": ["Name the session too (?session=)."]})
    return events.select_related("snapshot").order_by("-created_at", "-id")


def message_fit_for_user(*, user: AbstractBaseUser, message_id: object) -> dict[str, Any]:
    """Would this user message fit if it were sent again now? The part that is sent whatever
    happens (system prompt, the message, pins, active summaries: docs/compaction.md) against the
    budget B, read from stored token counts only, as the send path decides ``context_too_large``.

    What a failed reply offers instead of a plain Retry (issue 18, defect 8) reads this: how
    many tokens over, and, after ``/compact``, whether a retry can now succeed. Someone else's
    message is ``not_found``; anything but a chat message of the user's is ``validation_error``.
    """
    message = message_get_for_user(user=user, message_id=message_id)
    if message.role != Message.Role.USER or message.kind != Message.Kind.CHAT:
        raise ValidationFailed(
            details={"message": ["Only a chat message you wrote can be checked."]}
        )
    session = message.session
    measure = context_measure(
        session=session, new_message=message, before_seq=session.last_seq + 1, with_index=False
    )
    budget = measure.budget.budget
    required = measure.fixed_tokens
    return {
        "message": message.pk,
        "budget_tokens": budget,
        "required_tokens": required,
        "over_tokens": max(0, required - budget),
        "fits": context_fixed_fits(measure),
    }
