"""Celery tasks of the compaction queue: thin, safe to run twice, tolerant of vanished rows."""

from typing import Any

import structlog
from celery import shared_task
from django.conf import settings

from chat_platform.outage import BROKER_ERRORS
from compaction import records, services
from connections import usage

log = structlog.get_logger(__name__)


@shared_task(bind=True, name="compaction.tasks.compact_soft", ignore_result=True)
def compact_soft(  # noqa: ANN001
    self,
    session_id: int,
    bot_id: int | None = None,
    yielded: int = 0,
    quota: list[list[Any]] | None = None,
) -> None:
    # Run eagerly (tests' task_always_eager): the next reply has run already (the turn
    # dispatches this after its hand-over), and a countdown would not wait anyway. Embedded
    # mode's task threads yield like a worker (chat_platform/inprocess.py keeps the countdown).
    eager = self.app.conf.task_always_eager
    if not eager and services.soft_compaction_yields(session_id=session_id, yielded=yielded):
        try:
            self.apply_async(
                (session_id, bot_id),
                {"yielded": yielded + 1, **({"quota": quota} if quota else {})},
                countdown=settings.COMPACTION_SOFT_YIELD_SECONDS,
            )
            return
        except BROKER_ERRORS:  # it cannot be put back: run it now rather than drop it
            log.warning("compaction_yield_requeue_failed", session_id=session_id, exc_info=True)
    # Charged to the API key the turn came through too, as its own calls were.
    with usage.quota_scope(extra=usage.limits_from_pairs(quota)):
        services.session_compact_soft(session_id=session_id, bot_id=bot_id)


@shared_task(name="compaction.tasks.context_records_sweep", ignore_result=True)
def context_records_sweep() -> int:
    """Delete context records past ``CONTEXT_RECORD_RETENTION_DAYS`` (beat, hourly)."""
    return records.records_sweep(older_than_days=settings.CONTEXT_RECORD_RETENTION_DAYS)
