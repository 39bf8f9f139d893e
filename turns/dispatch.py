"""Hand work to the task queue, by task name, so the domain never imports an interface (tasks.py).

The chat turn uses a transactional outbox: the pending reply written with the user's message *is*
the outbox row. After commit, ``turn_dispatch`` hands it to the ``chat`` queue (in embedded mode,
the in-process task threads: chat_platform/inprocess.py) and stamps ``dispatched_at``. If the
broker is down the stamp stays empty and the watchdog (``turns.watchdog.turns_watchdog``) hands it
over once the broker answers again, so a committed send always gets its turn. Running a turn
twice is safe (its claim is a conditional update).
"""

from collections.abc import Sequence

import structlog
from django.conf import settings
from django.db import DatabaseError

from bots.models import Message
from bots.transitions import reply_dispatched, reply_running_first
from chat_platform.celery_app import task_named
from chat_platform.outage import BROKER_ERRORS
from connections.usage import Limit, limits_pairs

log = structlog.get_logger(__name__)

TURN_TASK = "bots.tasks.turn_run"
COMPACT_SOFT_TASK = "compaction.tasks.compact_soft"


def _task(name: str):
    return task_named(name)


def _lane(message_id: int) -> dict[str, int]:
    """Embedded mode's task threads take their users in turn (``chat_platform.inprocess``):
    the reply's lane is its chat's user (one statement, embedded mode only)."""
    if not settings.TASKS_IN_PROCESS:
        return {}
    user_id = Message.objects.filter(pk=message_id).values_list("session__user_id", flat=True)
    found = user_id.first()
    return {} if found is None else {"fair_key": found}


def turn_dispatch(message_id: int) -> bool:
    """Hand a pending reply to the ``chat`` queue. Returns False (and logs) if the broker is down:
    the reply stays an undispatched outbox row for the watchdog."""
    try:
        lane = _lane(message_id)
        if lane:
            _task(TURN_TASK).apply_async((message_id,), **lane)
        else:
            _task(TURN_TASK).delay(message_id)
    except BROKER_ERRORS:
        log.exception("turn_dispatch_failed", message_id=message_id)
        return False
    try:
        reply_dispatched(message_id=message_id)
    except DatabaseError:
        # Handed over but not stamped (the database is saturated): the send itself committed and
        # must not fail now. The watchdog hands it over again later; the duplicate finds
        # nothing to claim.
        log.exception("turn_dispatch_stamp_failed", message_id=message_id)
    return True


def turn_dispatch_next(session_id: int) -> bool:
    """Hand the session's next queued reply to the queue, if the one before it has ended.
    Replies of a session run one at a time, in seq order: a reply whose claim found an earlier
    one unfinished waits for this call (made when that one ends, by its turn or the watchdog).
    Returns whether a reply was handed over."""
    first = reply_running_first(session_id=session_id)
    if first is None or first[1] != Message.Status.PENDING:
        return False
    return turn_dispatch(first[0])


def compact_soft_dispatch(
    session_id: int, bot_id: int | None = None, *, quota: Sequence[Limit] = ()
) -> bool:
    """Schedule a soft compaction (best effort: the next turn re-checks pressure anyway); in a
    room, of ``bot_id``'s seat. ``quota``: the limits of the API key the turn that found it due
    came through, which its summariser calls are charged to as well (docs/connections.md)."""
    try:
        task = _task(COMPACT_SOFT_TASK)
        args = (session_id,) if bot_id is None else (session_id, bot_id)
        if quota:
            task.delay(*args, quota=limits_pairs(quota))
        else:
            task.delay(*args)
    except BROKER_ERRORS:
        log.exception("compaction_dispatch_failed", session_id=session_id)
        return False
    return True
