"""Reads of the compaction app, always through the session access chokepoint."""

from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import QuerySet

from bots.queries import session_get_for_user
from compaction.models import CompactionEvent, Summary


def summary_list_for_user(*, user: AbstractBaseUser, session_id: object) -> QuerySet[Summary]:
    session = session_get_for_user(user=user, session_id=session_id)
    return (
        Summary.objects.filter(session=session)
        .prefetch_related("parents")
        .order_by("-created_at", "-id")
    )


def event_list_for_user(
    *, user: AbstractBaseUser, session_id: object | None = None
) -> QuerySet[CompactionEvent]:
    events = CompactionEvent.objects.filter(session__user=user)
    if session_id not in (None, ""):
        events = events.filter(session=session_get_for_user(user=user, session_id=session_id))
    return events.select_related("snapshot").order_by("-created_at", "-id")
