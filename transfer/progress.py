"""An import's progress, for the page's progress bar: bytes of the upload read so far, written
to the ``progress`` cache (Redis in real mode, so any web process can answer the poll) under a
key the page chose, scoped to the user. Lost progress only stalls a bar: nothing depends on it."""

from typing import Any

from django.core.cache import caches

TTL_SECONDS = 3600
KEY_MAX_CHARS = 64


def _key(user_id: int, key: str) -> str:
    return f"import:{user_id}:{key}"


def key_is_valid(key: object) -> bool:
    return (
        isinstance(key, str)
        and 0 < len(key) <= KEY_MAX_CHARS
        and key.isascii()
        and all(ch.isalnum() or ch in "-_" for ch in key)
    )


def progress_write(*, user_id: int, key: str, **values: Any) -> None:
    caches["progress"].set(_key(user_id, key), values, TTL_SECONDS)


def progress_read(*, user_id: int, key: str) -> dict[str, Any] | None:
    value = caches["progress"].get(_key(user_id, key))
    return value if isinstance(value, dict) else None


def _job_key(job_id: int) -> str:
    return f"import-job:{job_id}"


def job_progress_write(*, job_id: int, bytes_read: int) -> None:
    """How far a running job has read, for its status: in the cache, not on the job's row (in
    embedded mode the child's write transaction holds SQLite's one write lock until it ends)."""
    caches["progress"].set(_job_key(job_id), bytes_read, TTL_SECONDS)


def job_progress_read(*, job_id: int) -> int | None:
    value = caches["progress"].get(_job_key(job_id))
    return value if isinstance(value, int) else None
