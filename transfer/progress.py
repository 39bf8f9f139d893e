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
