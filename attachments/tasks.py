"""Celery tasks of attachments: thin interfaces (one service call, safe to run twice)."""

from celery import shared_task

from attachments.services import attachments_sweep_unsent


@shared_task(name="attachments.tasks.sweep_unsent", ignore_result=True)
def sweep_unsent() -> int:
    return attachments_sweep_unsent()
