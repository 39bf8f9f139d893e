"""The context report: the session's context as measured now, with compaction's own state —
the numbers behind the context meter (docs/api.md) and what decides a soft compaction."""

from dataclasses import dataclass
from typing import Any

from bots.models import ChatSession
from bots.realtime import room_frame_bot
from chat_platform.compiled import CompiledValues
from chat_platform.isotime import iso_utc
from compaction.engine import blocked_moment, compaction_blocked_until
from compaction.lock import in_flight
from compaction.measure import Measure, context_measure
from compaction.seats import seat_key


@dataclass(frozen=True)
class ContextState:
    """The session's context as measured now, with compaction's own state: what the meter shows
    and what decides a soft compaction, read once for both."""

    session: ChatSession
    measure: Measure
    cooldown_until: Any  # datetime | None: when automatic compaction may run again
    in_flight: bool
    last_admission: Any = None


# The session's running totals as the measure reads them, re-read after every turn (its gauge):
# built once per process (chat_platform/compiled.py).
_TOTAL_FIELDS = ("context_tokens", "context_messages", "last_admission", "last_seq")
_TOTALS = CompiledValues(
    lambda session_id: ChatSession.objects.filter(pk=session_id).values_list(*_TOTAL_FIELDS),
    name="session_totals",
)


def context_state(*, session: ChatSession) -> ContextState:
    """In a room, ``session`` is a bot's seat (``bots.queries.session_seat``): the state is that
    bot's own — its measure, cool-down, lease and last admission (docs/rooms.md)."""
    rows = _TOTALS.rows(session_id=session.pk)
    if not rows:
        raise ChatSession.DoesNotExist("the session was deleted")
    for name, value in zip(_TOTAL_FIELDS, rows[0], strict=True):
        setattr(session, name, value)
    key = seat_key(session)
    measure = context_measure(session=session)
    room = measure.room
    if room is None:
        last_admission = session.last_admission
        cooldown_until = compaction_blocked_until(session.pk, hard=False)
    else:
        # The seat's row was read with its totals by the measure: no second read of it.
        last_admission = room.last_admission
        cooldown_until = blocked_moment(
            backoff_until=room.backoff_until, cooldown_until=room.cooldown_until, hard=False
        )
    return ContextState(
        session=session,
        measure=measure,
        cooldown_until=cooldown_until,
        in_flight=in_flight(session.pk, key),
        last_admission=last_admission,
    )


def context_bot(session: ChatSession) -> dict[str, Any] | None:
    """The bot a room's context report and frames concern; None in a one-bot session."""
    return room_frame_bot(session)


def soft_compaction_due(state: ContextState) -> bool:
    """The soft trigger (docs/compaction.md): compaction on, pressure at or past S, no cool-down and
    no run in flight. The one place that says so; the turn asks it after every reply."""
    return bool(
        state.session.bot.compaction_enabled
        and state.measure.budget.soft_due(state.measure.pressure)
        and state.cooldown_until is None
        and not state.in_flight
    )


def context_report(*, session: ChatSession, state: ContextState | None = None) -> dict[str, Any]:
    """What the next call would carry: the numbers behind the context meter (docs/api.md)."""
    if state is None:
        state = context_state(session=session)
    measure = state.measure
    budget = measure.budget
    # With compaction off no threshold acts (admission alone keeps a call within B): the marks
    # are null, so a meter draws none and never says compaction is due (docs/api.md).
    enabled = session.bot.compaction_enabled
    return {
        "window": budget.window,
        "reserve": budget.reserve,
        "budget": budget.budget,
        "soft": budget.soft if enabled else None,
        "hard": budget.hard if enabled else None,
        "target": budget.target if enabled else None,
        "pressure": measure.pressure,
        "parts": measure.parts,
        "last_admission": state.last_admission,
        "compaction": {
            "enabled": enabled,
            "in_flight": state.in_flight,
            "cooldown_until": iso_utc(state.cooldown_until),
        },
    }
