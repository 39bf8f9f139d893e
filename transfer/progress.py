"""An import's progress, for the page's progress bar: bytes of the upload read so far, written
to the ``progress`` cache (Redis in real mode, so any web process can answer the poll) under a
key the page chose, scoped to the user. Lost progress only stalls a bar: nothing depends on it."""

from typing import Any

import structlog
from django.core.cache import caches

log = structlog.get_logger(__name__)

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


def _set(key: str, value: Any) -> None:
    """Best effort: a cache that does not answer (Redis restarting) stalls a bar, and never
    fails the import it reports on (it failed a good file, or left its job running)."""
    try:
        caches["progress"].set(key, value, TTL_SECONDS)
    except Exception as exc:
        log.warning("import_progress_not_written", key=key, error=str(exc))


def _get(key: str) -> Any:
    try:
        return caches["progress"].get(key)
    except Exception as exc:
        log.warning("import_progress_not_read", key=key, error=str(exc))
        return None


def progress_write(*, user_id: int, key: str, **values: Any) -> None:
    _set(_key(user_id, key), values)


def progress_read(*, user_id: int, key: str) -> dict[str, Any] | None:
    value = _get(_key(user_id, key))
    return value if isinstance(value, dict) else None


def _job_key(job_id: int) -> str:
    return f"import-job:{job_id}"


def job_progress_write(*, job_id: int, bytes_read: int) -> None:
    """How far a running job has read, for its status: in the cache, not on the job's row (in
    embedded mode the child's write transaction holds SQLite's one write lock until it ends)."""
    _set(_job_key(job_id), bytes_read)


def job_progress_read(*, job_id: int) -> int | None:
    value = _get(_job_key(job_id))
    return value if isinstance(value, int) else None
