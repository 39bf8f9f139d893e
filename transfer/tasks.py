"""Celery tasks of transfer: thin interfaces (one service call, safe to run twice)."""

from celery import shared_task

from transfer.services.jobs import import_job_run, import_jobs_sweep


@shared_task(name="transfer.tasks.import_run", ignore_result=True)
def import_run(job_id: int) -> str | None:
    """Queue ``heavy``. The import runs in a limited child process (the service), so a hostile
    file can end only that child, never this worker's process or its other threads."""
    return import_job_run(job_id=job_id)


@shared_task(name="transfer.tasks.sweep_jobs", ignore_result=True)
def sweep_jobs() -> dict[str, int]:
    """Beat, every 5 minutes: lost jobs end ``failed``, old ended ones are deleted."""
    return import_jobs_sweep()
