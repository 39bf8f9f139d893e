"""Celery tasks of the compaction queue: thin, safe to run twice, tolerant of vanished rows."""

from celery import shared_task
from django.conf import settings

from compaction import records, services


@shared_task(name="compaction.tasks.compact_soft", ignore_result=True)
def compact_soft(session_id: int, bot_id: int | None = None) -> None:
    services.session_compact_soft(session_id=session_id, bot_id=bot_id)


@shared_task(name="compaction.tasks.context_records_sweep", ignore_result=True)
def context_records_sweep() -> int:
    """Delete context records past ``CONTEXT_RECORD_RETENTION_DAYS`` (beat, hourly)."""
    return records.records_sweep(older_than_days=settings.CONTEXT_RECORD_RETENTION_DAYS)
