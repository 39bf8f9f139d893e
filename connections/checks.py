"""Start-up check: stored connection keys can be opened with ``CONNECTION_ENCRYPTION_KEY``.

A wrong or missing setting must not surface as "the provider refused the key" on every turn
hours later: the ASGI server (uvicorn, daphne, ``runserver``) and the Celery worker stop at start
with the reason (``chat_platform.startup``), and ``manage.py check --deploy`` reports it. A
database without the table yet (before ``migrate``) passes.
"""

from typing import Any

from django.core import checks
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError

from connections import crypto

CHECK_TAG = "connections"


def encryption_key_errors() -> list[checks.CheckMessage]:
    from connections.models import Connection

    tokens = stored_tokens(Connection.objects.exclude(api_key_encrypted=""), "api_key_encrypted")
    return stored_secret_errors(
        tokens,
        what="provider connection key(s)",
        each="the key of connection(s)",
        prefix="connections",
    )


def stored_tokens(rows: Any, field: str) -> list[tuple[int, str]]:
    """(pk, token) of ``rows`` (a queryset), [] where the database cannot be read here."""
    try:
        return list(rows.order_by("pk").values_list("pk", field))
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
