"""Import jobs never wait forever and are not kept forever (docs/transfer.md, "Import jobs"):
the beat's sweep fails a job whose task was lost (still ``queued``) or whose worker died
(``running`` past its limit), deleting its chunks, and deletes jobs that ended long ago."""

from datetime import timedelta

import pytest
from django.utils import timezone

from transfer.models import ImportChunk, ImportJob
from transfer.services import jobs
from transfer.tasks import sweep_jobs

pytestmark = pytest.mark.django_db


def _job(owner, bot, status, **ages):
    job = ImportJob.objects.create(user=owner, bot=bot, bytes_total=3, status=status)
    ImportChunk.objects.create(job=job, position=0, data=b"abc")
    now = timezone.now()
    ImportJob.objects.filter(pk=job.pk).update(
        **{field: now - timedelta(seconds=seconds) for field, seconds in ages.items()}
    )
    return job


def test_lost_and_dead_jobs_end_failed_and_old_ended_ones_go(owner, other_user, bot, settings):
    settings.IMPORT_JOB_LOST_AFTER_SECONDS = 3600
    settings.IMPORT_RUN_SECONDS = 900
    settings.IMPORT_JOB_KEEP_DAYS = 7
    # another user's: the owner's job below is running (a job waiting behind one is not lost)
    lost = _job(other_user, bot, "queued", created_at=3601)
    waiting = _job(owner, bot, "queued", created_at=3599)
    dead = _job(
        owner, bot, "running", created_at=5000, started_at=900 + jobs.STALE_AFTER_SECONDS + 1
    )
    working = _job(owner, bot, "running", created_at=5000, started_at=900)
    old = _job(owner, bot, "done", finished_at=7 * 86400 + 1)
    recent = _job(owner, bot, "failed", finished_at=7 * 86400 - 60)

    assert jobs.import_jobs_sweep() == {"failed": 2, "deleted": 1}

    rows = {j.pk: j for j in ImportJob.objects.all()}
    assert old.pk not in rows
    assert [rows[j.pk].status for j in (lost, waiting, dead, working, recent)] == [
        "failed",
        "queued",
        "failed",
        "running",
        "failed",
    ]
    assert (rows[lost.pk].error_code, rows[lost.pk].error_message) == (
        "service_unavailable",
        "The import never ran: its task was lost before a worker took it. Nothing was "
        "imported; upload the file again.",
    )
    assert (rows[dead.pk].error_code, rows[dead.pk].error_message) == (
        "service_unavailable",
        "The import was interrupted: the worker running it stopped. Nothing was imported; "
        "upload the file again.",
    )
    assert rows[lost.pk].finished_at is not None
    # the ended jobs' chunks are gone; the live ones keep theirs
    assert sorted(ImportChunk.objects.values_list("job_id", flat=True)) == sorted(
        [waiting.pk, working.pk, recent.pk]
    )
    # a second sweep finds nothing more to do
    assert sweep_jobs() == {"failed": 0, "deleted": 0}


def test_the_sweep_is_on_the_beat_schedule(settings):
    assert settings.CELERY_BEAT_SCHEDULE["import-jobs-sweep"] == {
        "task": "transfer.tasks.sweep_jobs",
        "schedule": 300.0,
        "options": {"expires": 300.0},
    }


def test_the_chats_a_dead_jobs_child_had_written_are_deleted_and_a_live_ones_kept(
    owner, bot, settings
):
    from bots.models import ChatSession
    from transfer.services.common import ChatsMade

    settings.IMPORT_RUN_SECONDS = 900
    dead = _job(owner, bot, "running", started_at=900 + jobs.STALE_AFTER_SECONDS + 1)
    working = _job(owner, bot, "running", started_at=900)
    for job in (dead, working):
        made = ChatsMade(job_id=job.pk)
        made.session_new(user=owner, bot=bot, title=f"of {job.pk}", created_at=None)
    ChatSession.objects.create(user=owner, bot=bot, title="mine")

    assert jobs.import_jobs_sweep() == {"failed": 1, "deleted": 0}

    assert sorted(ChatSession.objects.values_list("title", flat=True)) == sorted(
        ["mine", f"of {working.pk}"]
    )


def test_a_job_waiting_for_its_users_running_import_is_not_lost(owner, other_user, bot, settings):
    """Imports of one user run one at a time: a job queued behind a long import is not lost."""
    settings.IMPORT_JOB_LOST_AFTER_SECONDS = 3600
    settings.IMPORT_RUN_SECONDS = 900
    _job(owner, bot, "running", started_at=600)
    waiting = _job(owner, bot, "queued", created_at=3601)
    lost = _job(other_user, bot, "queued", created_at=3601)

    assert jobs.import_jobs_sweep() == {"failed": 1, "deleted": 0}

    statuses = dict(ImportJob.objects.values_list("pk", "status"))
    assert (statuses[waiting.pk], statuses[lost.pk]) == ("queued", "failed")
