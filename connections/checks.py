"""Start-up check: stored connection keys can be opened with ``CONNECTION_ENCRYPTION_KEY``.

A wrong or missing setting must not surface as "the provider refused the key" on every turn
hours later: ``runserver``, ``migrate``, ``check`` (and the worker, ``celery_app``) stop with the
reason. A database without the table yet (before ``migrate``) passes.
"""

from django.core import checks
from django.core.exceptions import SynchronousOnlyOperation
from django.db import DatabaseError

from connections import crypto

CHECK_TAG = "connections"


def encryption_key_errors() -> list[checks.CheckMessage]:
    from connections.models import Connection

    try:
        tokens = list(
            Connection.objects.exclude(api_key_encrypted="")
            .order_by("pk")
            .values_list("pk", "api_key_encrypted")
        )
    except (DatabaseError, RuntimeError, SynchronousOnlyOperation):
        # Not migrated yet, no database, or no database access here (an async context, a test
        # collecting modules): nothing this check can open.
        return []
    if not tokens:
        return []
    if not crypto.configured():
        return [
            checks.Error(
                f"{len(tokens)} provider connection key(s) are stored encrypted but "
                "CONNECTION_ENCRYPTION_KEY is not set.",
                hint="Set CONNECTION_ENCRYPTION_KEY to the value the keys were saved with.",
                id="connections.E001",
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
                f"CONNECTION_ENCRYPTION_KEY cannot decrypt the key of connection(s) "
                f"{', '.join(map(str, bad))}: the setting differs from the one they were saved "
                "with.",
                hint="Restore the previous value (or list it after a comma to rotate keys).",
                id="connections.E002",
            )
        ]
    return []


# Tagged so the ASGI app and the worker can run just this one at start (run_checks(tags=…)).
@checks.register(CHECK_TAG)
def encryption_key_check(app_configs: object = None, **kwargs: object) -> list[checks.CheckMessage]:
    return encryption_key_errors()
