"""The failure policy, in the database so every process obeys it (CONTRACT §8): a 5-minute
cool-down for automatic compaction, the hard path's 30/60/120/240/270 s back-off."""

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from compaction.models import CompactionState


def now():
    """The engine's clock (tests replace it to step through cool-downs and back-offs)."""
    return timezone.now()


def state_get(session_id: int) -> CompactionState:
    return CompactionState.objects.get_or_create(session_id=session_id)[0]


def arm_failure(session_id: int, *, hard: bool) -> None:
    state = state_get(session_id)
    at = now()
    state.cooldown_until = at + timedelta(seconds=settings.COMPACTION_COOLDOWN_SECONDS)
    fields = ["cooldown_until", "updated_at"]
    if hard:
        steps = settings.COMPACTION_BACKOFF_SECONDS
        state.backoff_until = at + timedelta(seconds=steps[min(state.backoff_step, len(steps) - 1)])
        state.backoff_step += 1
        fields += ["backoff_until", "backoff_step"]
    state.save(update_fields=fields)


def clear_failures(session_id: int) -> None:
    CompactionState.objects.filter(session_id=session_id).update(
        cooldown_until=None, backoff_until=None, backoff_step=0, updated_at=timezone.now()
    )


def compaction_blocked_until(session_id: int, *, hard: bool) -> Any:
    """When automatic compaction may call its summariser again (None = now).

    Soft compaction obeys the 5-minute cool-down; the hard path retries on its own back-off
    schedule (30, 60, 120, 240, 270 s) and uses the extractive fallback in between.
    """
    state = CompactionState.objects.filter(session_id=session_id).first()
    if state is None:
        return None
    moment = state.backoff_until if hard else state.cooldown_until
    return moment if moment is not None and moment > now() else None
