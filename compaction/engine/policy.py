"""The failure policy, in the database so every process obeys it (docs/compaction.md): a 5-minute
cool-down for automatic compaction, the hard path's 30/60/120/240/270 s back-off."""

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from chat_platform.compiled import CompiledValues
from compaction.models import CompactionState, SeatState
from compaction.seats import RoomView


def now():
    """The engine's clock (tests replace it to step through cool-downs and back-offs)."""
    return timezone.now()


def state_get(session_id: int, bot_id: int | None = None) -> CompactionState | SeatState:
    """The failure policy's row: the session's, or in a room the bot's seat (``seat_key``)."""
    if bot_id is None:
        return CompactionState.objects.get_or_create(session_id=session_id)[0]
    return SeatState.objects.get_or_create(session_id=session_id, bot_id=bot_id)[0]


def _states(session_id: int, bot_id: int | None):
    if bot_id is None:
        return CompactionState.objects.filter(session_id=session_id)
    return SeatState.objects.filter(session_id=session_id, bot_id=bot_id)


def arm_failure(session_id: int, *, hard: bool, bot_id: int | None = None) -> None:
    state = state_get(session_id, bot_id)
    at = now()
    state.cooldown_until = at + timedelta(seconds=settings.COMPACTION_COOLDOWN_SECONDS)
    fields = ["cooldown_until", "updated_at"]
    if hard:
        steps = settings.COMPACTION_BACKOFF_SECONDS
        state.backoff_until = at + timedelta(seconds=steps[min(state.backoff_step, len(steps) - 1)])
        state.backoff_step += 1
        fields += ["backoff_until", "backoff_step"]
    state.save(update_fields=fields)


def clear_failures(session_id: int, bot_id: int | None = None) -> None:
    _states(session_id, bot_id).update(
        cooldown_until=None, backoff_until=None, backoff_step=0, updated_at=timezone.now()
    )


def compaction_blocked_until(session_id: int, *, hard: bool, bot_id: int | None = None) -> Any:
    """When automatic compaction may call its summariser again (None = now).

    Soft compaction obeys the 5-minute cool-down; the hard path retries on its own back-off
    schedule (30, 60, 120, 240, 270 s), or, before any hard failure, waits out a soft failure's
    cool-down, and uses the extractive fallback in between. In a room
    each bot has its own (``bot_id``): one bot's failures never hold back another's compaction.
    """
    seat = {} if bot_id is None else {"bot_id": bot_id}
    rows = _BLOCKED.rows(session_id=session_id, **seat)
    if not rows:
        return None
    return blocked_moment(backoff_until=rows[0][0], cooldown_until=rows[0][1], hard=hard)


def _blocked_query(session_id: int, bot_id: int | None = None):  # noqa: ANN202 (a queryset)
    return _states(session_id, bot_id).values_list("backoff_until", "cooldown_until")[:1]


# Read after every turn (its gauge): built once per process (chat_platform/compiled.py), one
# statement per shape: bind names key it, so a seat's (with ``bot_id``) and a one-bot session's
# (without) compile separately.
_BLOCKED = CompiledValues(_blocked_query, name="compaction_blocked_until")


def seat_blocked_until(session_id: int, *, hard: bool, room: RoomView | None) -> Any:
    """``compaction_blocked_until`` of the seat just measured: in a room, from the seat's row
    that the measure read with its totals (``RoomView``: no second read of it); in a one-bot
    session, from the session's row."""
    return seat_failures(session_id, room=room).blocked(hard=hard)


@dataclass(frozen=True)
class Failures:
    """A seat's failure state as read: when its back-off and cool-down end (None: never armed
    since the last success)."""

    backoff_until: Any = None
    cooldown_until: Any = None

    def blocked(self, *, hard: bool) -> Any:
        return blocked_moment(
            backoff_until=self.backoff_until, cooldown_until=self.cooldown_until, hard=hard
        )

    @property
    def armed(self) -> bool:
        """Whether a success has anything to clear: ``arm_failure`` always sets the cool-down,
        ``clear_failures`` unsets both with the back-off step, so with neither set the row
        is as a clear leaves it (or there is none)."""
        return self.backoff_until is not None or self.cooldown_until is not None


def seat_failures(session_id: int, *, room: RoomView | None) -> Failures:
    """The failure state of the seat just measured (in a room, as the measure read it with
    its totals; in a one-bot session, the session's row: one statement)."""
    if room is not None:
        return Failures(backoff_until=room.backoff_until, cooldown_until=room.cooldown_until)
    rows = _BLOCKED.rows(session_id=session_id)
    return Failures(*rows[0]) if rows else Failures()


def blocked_moment(*, backoff_until: Any, cooldown_until: Any, hard: bool) -> Any:
    """``compaction_blocked_until`` from a state row already read (a room's seat row, read with
    its totals by the measure). The hard path follows its back-off once a hard pass failed; with
    none since the last success, a soft failure's cool-down holds it too (docs/compaction.md:
    in cool-down or backing off, ``builtin/extractive``): the summariser that just failed is
    not asked again, with its retries, on the turn's time."""
    moment = backoff_until if hard and backoff_until is not None else cooldown_until
    return moment if moment is not None and moment > now() else None
