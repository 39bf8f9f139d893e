"""Import jobs (docs/transfer.md, "Import jobs"; docs/security.md, "Heavy work").

An import file is never parsed in the web process. ``import_job_create`` (the POST) checks the
size and the bot, stores the upload as ``ImportChunk`` rows of a new ``ImportJob`` (the database
is the one storage the web host and a worker host share) and hands the job to the ``heavy``
queue. ``import_job_run`` (the task) runs ``chats_import`` in a child process bounded by
``IMPORT_RUN_SECONDS`` (wall clock, CPU one second more) and ``IMPORT_RUN_MEMORY_BYTES``
(``chat_platform.sandbox``): the child sets Django up itself, reads the chunks from the database,
writes the chats in steps (docs/transfer.md, "Written in steps"), each chat linked to the job
as it is made (``ImportJobSession``), and reports how far it has read, line by line; the worker
relays that to the ``progress`` cache (the job's status and the page's key), and waits
without a database connection. A limit reached, a bad file or a crash ends the job ``failed``
with an error in the API's shape, with nothing of the file kept: the child deletes what it
wrote of a file it refused, and the worker what a stopped child had committed
(``chats_made_delete``), before the job ends. Either way the chunks and the links are deleted
when the job ends. After a ``done`` job each new chat gets its soft compaction.
"""

from collections.abc import Iterator
from datetime import timedelta
from functools import partial
from typing import IO, Any

import structlog
from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import Exists, F, OuterRef, Q
from django.utils import timezone

from bots.models import ChatSession
from bots.queries import bot_get_for_user
from chat_platform import sandbox
from chat_platform.celery_app import task_named
from chat_platform.dbconn import connection_release
from chat_platform.errors import PlatformError, ServiceUnavailable
from chat_platform.heavy import heavy_refusal
from chat_platform.outage import BROKER_ERRORS
from chat_platform.textcheck import json_made_storable, text_made_storable
from connections import usage
from memory import embeddings
from memory.models import MessageIndex
from transfer import progress
from transfer.models import ImportChunk, ImportJob, ImportJobSession
from transfer.services.common import chats_made_delete
from transfer.services.importing import chats_import, check_import_size
from turns.dispatch import compact_soft_dispatch

log = structlog.get_logger(__name__)

RUN_TASK = "transfer.tasks.import_run"
CHUNK_BYTES = 1024 * 1024
# A job still ``running`` this long after its limit ran out lost its worker (a redelivered
# task may take it again).
STALE_AFTER_SECONDS = 60
ACTIVE = (ImportJob.Status.QUEUED, ImportJob.Status.RUNNING)
# A job whose user has another import running is handed to the queue again this much later.
WAIT_FOR_OTHER_SECONDS = 5.0


# --- the POST -----------------------------------------------------------------------------------


def import_job_create(
    *,
    user: AbstractBaseUser,
    bot_id: object,
    upload: IO[bytes],
    size: int,
    progress_key: str = "",
    quota: list[list[Any]] | None = None,
) -> ImportJob:
    """Store ``upload`` as a queued job of ``user`` with the bot ``bot_id`` and queue its run.
    Refused before anything is stored: a file over ``IMPORT_MAX_BYTES``, a bot the user may not
    use, and a job past the user's ``HEAVY_REQUESTS_PER_USER`` unfinished ones."""
    check_import_size(size=size)
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    limit = settings.HEAVY_REQUESTS_PER_USER
    if ImportJob.objects.filter(user=user, status__in=ACTIVE).count() >= limit:
        log.info("import_job_refused", user_id=user.pk, limit=limit)
        raise heavy_refusal(limit)
    name = str(getattr(upload, "name", "") or "")[:255]
    with transaction.atomic():
        job = ImportJob.objects.create(
            user=user,
            bot=bot,
            file_name=name,
            bytes_total=size,
            progress_key=progress_key,
            quota=quota or [],
        )
        for position, data in enumerate(_pieces(upload)):
            ImportChunk.objects.create(job=job, position=position, data=data)
    _progress(job, phase="queued", bytes_read=0)
    if not import_job_dispatch(job.pk, user_id=user.pk):
        _finish(
            job.pk,
            error={
                "code": ServiceUnavailable.code,
                "message": "The import could not be queued (the task queue is unavailable). "
                "Try again in a minute.",
                "details": {},
            },
        )
        raise ServiceUnavailable("The import could not be queued. Try again in a minute.")
    job.refresh_from_db()
    return job


def _pieces(upload: IO[bytes]) -> Iterator[bytes]:
    chunks = getattr(upload, "chunks", None)
    if chunks is not None:  # a Django upload: its own chunking, re-cut to CHUNK_BYTES
        source: Iterator[bytes] = chunks(CHUNK_BYTES)
    else:
        source = iter(partial(upload.read, CHUNK_BYTES), b"")
    pending = b""
    for piece in source:
        pending += piece
        while len(pending) >= CHUNK_BYTES:
            yield pending[:CHUNK_BYTES]
            pending = pending[CHUNK_BYTES:]
    if pending:
        yield pending


def import_job_dispatch(
    job_id: int, *, user_id: int | None = None, countdown: float | None = None
) -> bool:
    """Hand the job to the ``heavy`` queue by task name (the domain never imports its task
    module); in embedded mode, to a task thread in the lane of the user importing
    (``user_id``): their imports take turns with their own replies, never every thread.
    ``countdown``: seconds from now (a job waiting for its user's other import)."""
    try:
        task_named(RUN_TASK).apply_async((job_id,), fair_key=user_id, countdown=countdown)
    except BROKER_ERRORS:
        log.exception("import_job_dispatch_failed", job_id=job_id)
        return False
    return True


# --- the task -----------------------------------------------------------------------------------


def import_job_run(*, job_id: int) -> str | None:
    """Run a queued job in a limited child process and end it ``done`` or ``failed``. Safe to
    run twice (a job already taken is nothing to do, unless its run is long past its limit: its
    worker was lost). Returns the status written (None: nothing to do)."""
    job = _claim(job_id)
    if job is None:
        return None
    if job.status == ImportJob.Status.QUEUED:
        # Another import of its user runs: one at a time, or the second skips as "imported
        # before" what the first then takes back when its file fails (docs/transfer.md).
        import_job_dispatch(job.pk, user_id=job.user_id, countdown=WAIT_FOR_OTHER_SECONDS)
        return None
    # A run taken again (its worker was lost) starts from nothing.
    chats_made_delete(job_id=job.pk)
    _progress(job, phase="reading", bytes_read=0)
    progress.job_progress_write(job_id=job.pk, bytes_read=0)
    connection_release()  # the child works; this thread only waits
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None
    try:
        answer = sandbox.run_limited(
            target="transfer.child:import_child",
            data=b"",
            params={"job_id": job.pk, "database": _database_params()},
            limits=_limits(),
            on_line=partial(_relay, job),
        )
    except sandbox.LimitExceeded as exc:
        error = {
            "code": "limit_exceeded",
            "message": f"The import stopped: {exc}. Nothing was imported; split the file into "
            "smaller ones.",
            "details": {"limit": exc.limit},
        }
    except sandbox.Refused as exc:  # pragma: no cover - the child answers refusals as data
        error = {"code": "validation_error", "message": str(exc), "details": {"file": [str(exc)]}}
    except Exception as exc:
        log.exception("import_job_crashed", job_id=job.pk, error=str(exc))
        error = {
            "code": "internal_error",
            "message": "The import failed: the file could not be processed. Nothing was imported.",
            "details": {},
        }
    else:
        if isinstance(answer, dict) and isinstance(answer.get("result"), dict):
            result = answer["result"]
        elif isinstance(answer, dict) and isinstance(answer.get("error"), dict):
            error = answer["error"]
        else:  # pragma: no cover - the child answers one of the two
            error = {"code": "internal_error", "message": "The import failed.", "details": {}}
    if error is not None:
        # What the child had committed before it was stopped (or before a crash).
        chats_made_delete(job_id=job.pk)
    status = _finish(job.pk, result=result, error=error)
    if status == ImportJob.Status.DONE and result is not None:
        limits = usage.limits_from_pairs(job.quota)
        for entry in result.get("imported", []):
            if limits:
                compact_soft_dispatch(entry["session"], quota=limits)
            else:
                compact_soft_dispatch(entry["session"])
        _embed_dispatch([entry["session"] for entry in result.get("imported", [])], job.quota)
    return status


def _embed_dispatch(session_ids: list[int], quota: Any) -> None:
    """Embed what the import wrote (each new chat and its branches' own messages), from here:
    the child dispatches none (``ChatsMade.embed``): its steps commit as it goes, and what it
    dispatched would run in a process that ends with the import (before, nothing was embedded
    and a chat below its soft threshold was searched by words only until a compaction,
    docs/memory.md, "Hybrid search"). A branch's copies of its chat's lines were
    indexed before any vector existed: they are not embedded a second time here, but by the
    branch's own compaction, as the other pending rows of a chat are (docs/transfer.md)."""
    if not session_ids:
        return
    chats = ChatSession.objects.filter(pk__in=session_ids).exclude(bot__embedding_model="")
    for session_id in chats.values_list("pk", flat=True):
        embeddings.messages_embed_dispatch(session_id, quota=quota or None)
    own: dict[int, list[int]] = {}
    rows = MessageIndex.objects.filter(
        session__branch_of_id__in=session_ids, seq__gte=F("session__branch_seq")
    ).exclude(session__bot__embedding_model="")
    for session_id, message_id in rows.values_list("session_id", "message_id"):
        own.setdefault(session_id, []).append(message_id)
    for session_id, message_ids in own.items():
        embeddings.messages_embed_dispatch(session_id, message_ids, quota=quota or None)


def _claim(job_id: int) -> ImportJob | None:
    """Take the job (``running``): the job; still ``queued`` when another import of its user
    runs (taken under a lock on the user's row, so two claims at once take one); None: nothing
    to do."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.IMPORT_RUN_SECONDS + STALE_AFTER_SECONDS)
    job = ImportJob.objects.filter(pk=job_id).only("user_id").first()
    if job is None:
        return None
    with transaction.atomic():
        get_user_model().objects.select_for_update().filter(pk=job.user_id).first()
        other = (
            ImportJob.objects.filter(
                user_id=job.user_id, status=ImportJob.Status.RUNNING, started_at__gte=stale
            )
            .exclude(pk=job_id)
            .exists()
        )
        taken = ImportJob.objects.filter(
            Q(status=ImportJob.Status.QUEUED)
            | Q(status=ImportJob.Status.RUNNING, started_at__lt=stale),
            pk=job_id,
        )
        if other:
            return taken.filter(status=ImportJob.Status.QUEUED).first()
        if not taken.update(status=ImportJob.Status.RUNNING, started_at=now, bytes_read=0):
            return None
    return ImportJob.objects.filter(pk=job_id).first()


def _limits() -> sandbox.Limits:
    return sandbox.Limits(
        seconds=settings.IMPORT_RUN_SECONDS, memory_bytes=settings.IMPORT_RUN_MEMORY_BYTES
    )


def _database_params() -> dict[str, Any]:
    """The connection the child opens: this process's own database (in tests, the test
    database), sent on its stdin, never in its environment. No pool: the child needs one."""
    own = connection.settings_dict
    options = {k: v for k, v in (own.get("OPTIONS") or {}).items() if k != "pool"}
    return {
        **{k: str(own[k]) if k == "NAME" else own[k] for k in ("ENGINE", "NAME", "USER", "HOST")},
        "PASSWORD": own.get("PASSWORD") or "",
        "PORT": str(own.get("PORT") or ""),
        "OPTIONS": options,
    }


def _relay(job: ImportJob, line: dict[str, Any]) -> None:
    """A progress line of the child: how far it has read, for the job's status and the page's
    key (the cache: the job's row is written when it ends)."""
    done = line.get("bytes_read")
    if not isinstance(done, int):
        return
    progress.job_progress_write(job_id=job.pk, bytes_read=done)
    _progress(job, phase="reading", bytes_read=done)


def _progress(job: ImportJob, *, phase: str, bytes_read: int) -> None:
    if job.progress_key:
        progress.progress_write(
            user_id=job.user_id,
            key=job.progress_key,
            phase=phase,
            bytes_read=bytes_read,
            bytes_total=job.bytes_total,
        )


def _finish(
    job_id: int, *, result: dict[str, Any] | None = None, error: dict[str, Any] | None = None
) -> str | None:
    """End the job (``done`` with ``result``, else ``failed`` with ``error``) and delete its
    chunks and its links to the chats it made, in one transaction."""
    status = ImportJob.Status.FAILED if error is not None else ImportJob.Status.DONE
    values: dict[str, Any] = {"status": status, "finished_at": timezone.now()}
    if error is not None:
        # A refusal may quote the file (a key, a node id): what the database cannot store (a
        # NUL) made this write fail, and the job stayed running with its chunks.
        values.update(
            error_code=str(error.get("code", "")),
            error_message=text_made_storable(str(error.get("message", ""))),
            error_details=json_made_storable(error.get("details") or {}),
        )
    else:
        job = ImportJob.objects.filter(pk=job_id).only("bytes_total").first()
        values.update(result=result, bytes_read=job.bytes_total if job else 0)
    with transaction.atomic():
        written = ImportJob.objects.filter(pk=job_id, status__in=ACTIVE).update(**values)
        ImportChunk.objects.filter(job_id=job_id).delete()
        ImportJobSession.objects.filter(job_id=job_id).delete()
    job = ImportJob.objects.filter(pk=job_id).first()
    if job is not None:
        _progress(job, phase="done" if error is None else "failed", bytes_read=job.bytes_read)
    log.info(
        "import_job_finished",
        job_id=job_id,
        status=status,
        error_code=values.get("error_code", ""),
        written=bool(written),
    )
    return status if written else None


# --- the sweep (beat) ---------------------------------------------------------------------------

LOST_TEXT = (
    "The import never ran: its task was lost before a worker took it. Nothing was imported; "
    "upload the file again."
)
INTERRUPTED_TEXT = (
    "The import was interrupted: the worker running it stopped. Nothing was imported; upload "
    "the file again."
)


def import_jobs_sweep(*, now: Any = None) -> dict[str, int]:
    """No job waits forever, and none is kept forever: a job still ``queued``
    ``IMPORT_JOB_LOST_AFTER_SECONDS`` after its upload (and not waiting for its user's running
    import), or ``running`` past its limit plus ``STALE_AFTER_SECONDS`` (its worker died and no
    redelivery took it), ends ``failed`` (``service_unavailable``, its chunks and the chats its
    run had written deleted); a job that ended more than ``IMPORT_JOB_KEEP_DAYS`` ago is
    deleted. Counts of each."""
    now = now or timezone.now()
    lost_before = now - timedelta(seconds=settings.IMPORT_JOB_LOST_AFTER_SECONDS)
    dead_before = now - timedelta(seconds=settings.IMPORT_RUN_SECONDS + STALE_AFTER_SECONDS)
    # A job waiting for its user's running import (one at a time) is not lost: its task comes
    # back every WAIT_FOR_OTHER_SECONDS.
    running = ImportJob.objects.filter(
        user_id=OuterRef("user_id"), status=ImportJob.Status.RUNNING, started_at__gte=dead_before
    )
    found = {
        LOST_TEXT: ImportJob.objects.filter(
            status=ImportJob.Status.QUEUED, created_at__lt=lost_before
        ).exclude(Exists(running)),
        INTERRUPTED_TEXT: ImportJob.objects.filter(
            status=ImportJob.Status.RUNNING, started_at__lt=dead_before
        ),
    }
    failed = 0
    for text, jobs in found.items():
        for job_id in jobs.values_list("pk", flat=True):
            chats_made_delete(job_id=job_id)
            error = {"code": ServiceUnavailable.code, "message": text, "details": {}}
            failed += _finish(job_id, error=error) is not None
    ended = (ImportJob.Status.DONE, ImportJob.Status.FAILED)
    keep_after = now - timedelta(days=settings.IMPORT_JOB_KEEP_DAYS)
    _, per_model = ImportJob.objects.filter(status__in=ended, finished_at__lt=keep_after).delete()
    deleted = per_model.get(ImportJob._meta.label, 0)
    if failed or deleted:
        log.info("import_jobs_swept", failed=failed, deleted=deleted)
    return {"failed": failed, "deleted": deleted}


# --- the child ----------------------------------------------------------------------------------


class ChunkReader:
    """A job's stored chunks as one binary file, fetched a chunk at a time (a read returns at
    most the rest of the current chunk; an empty read is the end)."""

    def __init__(self, job_id: int) -> None:
        self.job_id = job_id
        self.position = 0
        self.chunk = b""
        self.offset = 0

    def read(self, size: int = -1) -> bytes:
        if self.offset >= len(self.chunk):
            data = (
                ImportChunk.objects.filter(job_id=self.job_id, position=self.position)
                .values_list("data", flat=True)
                .first()
            )
            if data is None:
                return b""
            self.chunk, self.offset, self.position = bytes(data), 0, self.position + 1
        end = len(self.chunk) if size < 0 else self.offset + size
        piece = self.chunk[self.offset : end]
        self.offset += len(piece)
        return piece


def import_job_child_run(*, job_id: int, on_progress: Any) -> dict[str, Any]:
    """In the child (``transfer.child``): the job's file into chats. ``{"result": …}`` or
    ``{"error": {code, message, details}}`` (a refusal in the API's shape; nothing written)."""
    job = ImportJob.objects.select_related("user").filter(pk=job_id).first()
    if job is None:
        return {"error": {"code": "not_found", "message": "Import not found.", "details": {}}}
    try:
        # Whatever it sets off is charged to the key the POST came through (what it writes is
        # embedded by the worker once the job is done, charged to that key too).
        with usage.quota_scope(extra=usage.limits_from_pairs(job.quota)):
            result = chats_import(
                user=job.user,
                bot_id=job.bot_id,
                raw=ChunkReader(job.pk),  # type: ignore[arg-type]
                size=job.bytes_total,
                on_progress=on_progress,
                job_id=job.pk,
            )
    except PlatformError as exc:
        return {"error": exc.as_dict()}
    except FILE_DATA_ERRORS as exc:
        # What the checks did not foresee in a file's data (two messages with one client_id or
        # one reply_to, a date past the year 9999 in a time zone, a NUL where no field check
        # looked): the database or the clock refused it, the step was rolled back (and what the
        # earlier steps wrote deleted, ``chats_import``). The file's fault, said as such — it
        # ended as a crash ("internal_error").
        log.warning("import_file_refused", job_id=job_id, error=str(exc)[:500])
        message = (
            "The file could not be imported: its data breaks a rule of the chats it would "
            f"make ({type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else '-'}"
            "). Nothing was imported."
        )
        return {"error": {"code": "validation_error", "message": message, "details": {}}}
    return {"result": result.as_dict()}


# Errors a file's data can raise past the field checks (``import_job_child_run``).
FILE_DATA_ERRORS = (IntegrityError, DataError, OverflowError, UnicodeError)
