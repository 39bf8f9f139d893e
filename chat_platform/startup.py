"""Checks a serving process (the ASGI server, a Celery worker) runs once at start.

A wrong ``CONNECTION_ENCRYPTION_KEY`` must stop a server at start, not show hours later as
failed turns. The checks live in their apps, which register them here from ``AppConfig.ready``
(so this module names no app); they are not ordinary Django system checks, which every
management command and Celery's Django fixup (beat included) would run against the database.
``manage.py check --deploy`` runs them too (each app also registers a deploy check).
"""

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured

# Each returns its problems as "<id>: <message>" lines (none: fine).
StartupCheck = Callable[[], list[str]]
_checks: list[StartupCheck] = []


def startup_check_register(check: StartupCheck) -> None:
    if check not in _checks:
        _checks.append(check)


def startup_checks_run() -> None:
    """Raise ``ImproperlyConfigured`` listing every problem of the registered checks."""
    problems = [problem for check in _checks for problem in check()]
    if problems:
        raise ImproperlyConfigured("; ".join(problems))
