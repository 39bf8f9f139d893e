"""Start-up check: stored connection keys can be opened with ``CONNECTION_ENCRYPTION_KEY``.

A wrong or missing setting must not surface as "the provider refused the key" on every turn
hours later: the ASGI server (uvicorn, daphne, ``runserver``) and the Celery worker stop at start
with the reason (``chat_platform.startup``), and ``manage.py check --deploy`` reports it. A
database without the table yet (before ``migrate``) passes.
"""

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.core import checks
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError

from connections import crypto

CHECK_TAG = "connections"


@dataclass(frozen=True)
class EncryptedStore:
    """Values some app keeps encrypted under ``CONNECTION_ENCRYPTION_KEY``: ``rows()`` the
    queryset of those set, ``field`` the column; ``what`` they are, ``each`` how one is named
    before its owners' ids, ``prefix`` the check ids' (``<prefix>.E001``/``E002``)."""

    rows: Callable[[], Any]
    field: str
    what: str
    each: str
    prefix: str


_STORES: list[EncryptedStore] = []


def encrypted_store_register(store: EncryptedStore) -> None:
    """An app's ``ready()`` names what it keeps encrypted: the one check opens them all."""
    if store not in _STORES:
        _STORES.append(store)


def encryption_key_errors() -> list[checks.CheckMessage]:
    """The errors of every registered store (connection keys, tool servers' headers)."""
    return [
        error
        for store in _STORES
        for error in stored_secret_errors(
            _stored_tokens(store), what=store.what, each=store.each, prefix=store.prefix
        )
    ]


def _stored_tokens(store: EncryptedStore) -> list[tuple[int, str]]:
    """(pk, token) of the store's rows, [] where the database cannot be read here."""
    try:
        return list(store.rows().order_by("pk").values_list("pk", store.field))
    except (DatabaseError, RuntimeError, SynchronousOnlyOperation):
        # Not migrated yet, no database, or no database access here (an async context, a test
        # collecting modules): nothing this check can open.
        return []


def stored_secret_errors(
    tokens: list[tuple[int, str]], *, what: str, each: str, prefix: str
) -> list[checks.CheckMessage]:
    """The errors for ``tokens`` encrypted under ``CONNECTION_ENCRYPTION_KEY`` (``what`` they
    are; ``each``: how one is named before its owners' ids; the check ids' ``prefix``): the
    setting missing, or unable to open some of them."""
    if not tokens:
        return []
    if not crypto.configured():
        return [
            checks.Error(
                f"{len(tokens)} {what} are stored encrypted but "
                "CONNECTION_ENCRYPTION_KEY is not set.",
                hint="Set CONNECTION_ENCRYPTION_KEY to the value the keys were saved with.",
                id=f"{prefix}.E001",
            )
        ]
    bad = []
    for pk, token in tokens:
        try:
            crypto.key_decrypt(token)
        except crypto.KeyUnavailable:
            bad.append(pk)
    if bad:
        return [
            checks.Error(
                f"CONNECTION_ENCRYPTION_KEY cannot decrypt {each} "
                f"{', '.join(map(str, bad))}: the setting differs from the one they were saved "
                "with.",
                hint="Restore the previous value (or list it after a comma to rotate keys).",
                id=f"{prefix}.E002",
            )
        ]
    return []


def encryption_key_problems() -> list[str]:
    """The start-up check (``chat_platform.startup``): the errors as text lines."""
    return [f"{error.id}: {error.msg}" for error in encryption_key_errors()]


# A deploy check (``manage.py check --deploy``), not an ordinary one: those run on every
# management command and in Celery's Django fixup, each then querying the database.
@checks.register(CHECK_TAG, deploy=True)
def encryption_key_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    return encryption_key_errors()
