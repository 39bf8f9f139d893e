"""Liveness of chat turns: nothing stored is ever left without an answer or a visible failure.

``turns_watchdog`` (Celery beat, every ``CHAT_WATCHDOG_SECONDS``) does two things:

* **dead turns** — a ``streaming`` reply whose heartbeat (stamped by the running turn every
  ``CHAT_HEARTBEAT_SECONDS``) is older than ``CHAT_HEARTBEAT_TIMEOUT_SECONDS`` belongs to a worker
  that died (SIGKILL, OOM, lost host): it is marked ``interrupted``, its partial text kept, and a
  ``message.failed`` frame is sent. A killed worker's reply ends within timeout + interval
  (30 + 10 s by default) instead of waiting for the broker's hour-long visibility timeout.
* **the outbox** — a ``pending`` reply that never reached the queue (the broker was down when it
  was sent), or was handed over ``CHAT_REDISPATCH_AFTER_SECONDS`` ago and never started (its task
  was lost, e.g. Redis restarted without persistence), is handed to the queue again. A duplicate
  delivery is harmless: the turn's claim is a conditional update.

``messages_sweep_orphans`` (beat, every minute; ``manage.py sweep_orphans``) is the last resort
of docs/memory.md: anything still ``pending``/``streaming`` after ``CHAT_ORPHAN_AFTER_SECONDS``.
"""

from dataclasses import dataclass
from datetime import timedelta
from functools import partial

import structlog
from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from bots import realtime
from bots.models import Message
from bots.transitions import UNFINISHED, earlier_reply_unfinished, reply_interrupt
from chat_platform import inprocess
from turns import dispatch

log = structlog.get_logger(__name__)

INTERRUPTED_TEXT = "The reply was interrupted before it finished."
DEAD_WORKER_TEXT = (
    "The reply was interrupted: the worker running it stopped answering. "
    "What it had written so far is kept; send your message again to continue."
)
NEVER_STARTED_TEXT = (
    "The reply never started: the task queue or its workers were unavailable. "
    "Send your message again."
)
# Embedded mode has no workers or queue: turns run inside the web server.
DEAD_SERVER_TEXT = (
    "The reply was interrupted: the server stopped while writing it. "
    "What it had written so far is kept; send your message again to continue."
)
NEVER_STARTED_EMBEDDED_TEXT = (
    "The reply never started: the server stopped before it could. Send your message again."
)


def _dead_text() -> str:
    return DEAD_SERVER_TEXT if settings.EMBEDDED else DEAD_WORKER_TEXT


def _never_started_text() -> str:
    return NEVER_STARTED_EMBEDDED_TEXT if settings.EMBEDDED else NEVER_STARTED_TEXT


@dataclass(frozen=True)
class WatchdogResult:
    interrupted: int
    dispatched: int


def _interrupt(*, message_id: int, still: Q, error_message: str) -> bool:
    """Mark one unfinished reply interrupted if it still matches ``still`` (a racing turn that
    finished meanwhile wins); its partial text joins the context like any finished text."""
    message = reply_interrupt(message_id=message_id, still=still, error_message=error_message)
    if message is None:
        return False
    transaction.on_commit(partial(realtime.publish_reply_finished, message_id))
    message.refresh_from_db()
    log.warning(
        "turn_interrupted_by_watchdog",
        message_id=message_id,
        session_id=message.session_id,
        reason=error_message,
    )
    realtime.notify_message_failed(message)
    # A reply queued behind this one (a message sent meanwhile) runs now.
    transaction.on_commit(partial(dispatch.turn_dispatch_next, message.session_id))
    return True


def replies_interrupt_dead(*, now=None) -> int:
    """Interrupt streaming replies whose turn stopped beating (its worker died)."""
    now = now or timezone.now()
    cutoff = now - timedelta(seconds=settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS)
    born = inprocess.queue_born()
    if born is not None and now - born > timedelta(seconds=2 * settings.CHAT_HEARTBEAT_SECONDS):
        # Embedded mode, after a restart: a turn running here has beaten since this process
        # began, so one that last beat before it died with the process before.
        cutoff = max(cutoff, born)
    # Rows claimed before heartbeats existed have none: their last write stands in for it.
    stale = Q(heartbeat_at__lt=cutoff) | Q(heartbeat_at__isnull=True, updated_at__lt=cutoff)
    ids = list(
        Message.objects.filter(stale, status=Message.Status.STREAMING).values_list("pk", flat=True)
    )
    text = _dead_text()
    return sum(_interrupt(message_id=pk, still=stale, error_message=text) for pk in ids)


def replies_redispatch(*, now=None) -> int:
    """Hand pending replies that never reached the queue (or whose task was lost) to it again."""
    now = now or timezone.now()
    # A send dispatches right after its commit: give that a moment before calling it missed.
    never = Q(dispatched_at__isnull=True, created_at__lt=now - timedelta(seconds=5))
    lost = Q(
        dispatched_at__lt=now - timedelta(seconds=settings.CHAT_REDISPATCH_AFTER_SECONDS),
    )
    born = inprocess.queue_born()
    if born is not None:
        # Embedded mode: what was dispatched before this process's queue was made was in the
        # queue of one that is gone (a restart); it is lost now, not in two minutes.
        lost |= Q(dispatched_at__lt=born)
    # A reply queued behind an unfinished one of its session is not lost: that one's end hands
    # it over (and if that hand-over fails, its stamp ages into ``lost`` here).
    ids = list(
        Message.objects.filter(never | lost, status=Message.Status.PENDING)
        .exclude(earlier_reply_unfinished())
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    dispatched = 0
    for pk in ids:
        if not dispatch.turn_dispatch(pk):
            break  # the broker is still down: try again on the next round
        dispatched += 1
    if dispatched:
        log.info("turns_redispatched", count=dispatched)
    return dispatched


def turns_watchdog(*, now=None) -> WatchdogResult:
    return WatchdogResult(
        interrupted=replies_interrupt_dead(now=now), dispatched=replies_redispatch(now=now)
    )


def messages_sweep_orphans(*, older_than_seconds: int | None = None) -> int:
    """Mark replies stuck in pending/streaming for too long as interrupted, keeping text.

    Stuck: neither written nor beating for that long. A long tool task writes no text for
    minutes on end (its rounds move the reply, they do not rewrite it), while its turn's
    heartbeat says it runs: it is not stuck."""
    age = settings.CHAT_ORPHAN_AFTER_SECONDS if older_than_seconds is None else older_than_seconds
    cutoff = timezone.now() - timedelta(seconds=age)
    old = Q(updated_at__lt=cutoff) & (Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=cutoff))
    # A reply queued behind a running one waits as long as that one runs (which ends visibly,
    # by its turn or the watchdog, and then hands it over): it is not stuck.
    stuck = list(
        Message.objects.filter(old, status__in=UNFINISHED)
        .exclude(earlier_reply_unfinished())
        .values_list("pk", "status")
    )
    swept = sum(
        _interrupt(
            message_id=pk,
            still=old,
            error_message=_never_started_text()
            if status == Message.Status.PENDING
            else INTERRUPTED_TEXT,
        )
        for pk, status in stuck
    )
    if swept:
        log.info("orphans_swept", count=swept)
    return swept
