"""Checks a serving process (the ASGI app, a Celery worker) runs once at start.

``manage.py`` commands run Django's system checks themselves; servers started without
``manage.py`` (uvicorn, daphne, ``celery worker``) do not, so a wrong ``CONNECTION_ENCRYPTION_KEY``
would only show hours later as failed turns. The checks are found by tag, so this module names
no app.
"""

from django.core import checks
from django.core.exceptions import ImproperlyConfigured

STARTUP_CHECK_TAGS = ("connections",)


def startup_checks_run() -> None:
    """Raise ``ImproperlyConfigured`` listing every error of the start-up checks."""
    messages = checks.run_checks(tags=list(STARTUP_CHECK_TAGS))
    errors = [m for m in messages if m.level >= checks.ERROR]
    if errors:
        raise ImproperlyConfigured("; ".join(f"{m.id}: {m.msg}" for m in errors))
