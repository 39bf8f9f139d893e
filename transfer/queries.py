"""Reads of transfer: an import job, only ever its own user's."""

from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.urls import reverse

from bots.queries import user_bot_scope
from chat_platform.errors import NotFound
from transfer import progress
from transfer.models import ImportJob


def import_job_get_for_user(*, user: AbstractBaseUser, job_id: object) -> ImportJob:
    """The user's import job; any other (another user's, none, or one into a bot outside those
    the request's API key is limited to) is the one not-found."""
    try:
        number = int(str(job_id))
    except ValueError:
        number = 0
    in_range = 0 < number < 2**63  # a bigint: a larger id is no row, never a database error
    jobs = ImportJob.objects.filter(pk=number, user_id=user.pk)
    scope = user_bot_scope(user)
    if scope is not None:
        jobs = jobs.filter(bot_id__in=scope)
    job = jobs.first() if in_range else None
    if job is None:
        raise NotFound("Import not found.")
    return job


def import_job_as_dict(job: ImportJob) -> dict[str, Any]:
    failed = job.status == ImportJob.Status.FAILED
    bytes_read = job.bytes_read
    if job.status == ImportJob.Status.RUNNING:
        bytes_read = progress.job_progress_read(job_id=job.pk) or bytes_read
    return {
        "id": job.pk,
        "status": job.status,
        "status_url": reverse("import-job", kwargs={"job_id": job.pk}),
        "file_name": job.file_name,
        "bytes_total": job.bytes_total,
        "bytes_read": bytes_read,
        "result": job.result if job.status == ImportJob.Status.DONE else None,
        "error": {
            "code": job.error_code,
            "message": job.error_message,
            "details": job.error_details,
        }
        if failed
        else None,
        "created_at": job.created_at.isoformat().replace("+00:00", "Z"),
        "finished_at": job.finished_at.isoformat().replace("+00:00", "Z")
        if job.finished_at
        else None,
    }
