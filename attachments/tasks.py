"""Celery tasks of attachments: thin interfaces (one service call, safe to run twice)."""

from celery import shared_task

from attachments.services import attachment_extract, attachments_sweep_unsent


@shared_task(name="attachments.tasks.sweep_unsent", ignore_result=True)
def sweep_unsent() -> int:
    return attachments_sweep_unsent()


@shared_task(name="attachments.tasks.extract", ignore_result=True)
def extract(attachment_id: int) -> str | None:
    """Queue ``heavy``. The parse runs in a limited child process (the service), so a hostile
    PDF can end only that child, never this worker's process or its other threads."""
    return attachment_extract(attachment_id=attachment_id)
