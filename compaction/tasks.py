"""Celery tasks of the compaction queue: thin, safe to run twice, tolerant of vanished rows."""

from celery import shared_task

from compaction import services


@shared_task(name="compaction.tasks.compact_soft", ignore_result=True)
def compact_soft(session_id: int, bot_id: int | None = None) -> None:
    services.session_compact_soft(session_id=session_id, bot_id=bot_id)
