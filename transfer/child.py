"""The import's child process (``chat_platform.sandbox.run_limited`` target
``transfer.child:import_child``; docs/security.md, "Heavy work").

The sandbox starts a fresh interpreter with nothing of the server's environment; an import
writes chats, so this child sets Django up itself, with the database connection the worker sent
on its stdin (never in the environment) and a throwaway ``SECRET_KEY`` (nothing here signs
anything). Without ``REDIS_URL`` it is in embedded mode: no broker, no cache shared with the web
processes; what follows the import (progress to the page, the soft compactions) is the worker's.
Whatever Django or a library prints goes to stderr: stdout carries only the progress lines
(``{"progress": "reading", "bytes_read": n}``) and the sandbox's answer.
"""

import json
import os
import secrets
import sys
from typing import IO, Any


def import_child(data: bytes, params: dict[str, Any]) -> dict[str, Any]:
    answer_to = sys.stdout
    sys.stdout = sys.stderr
    try:
        _django_setup(params["database"])
        from django.db import DatabaseError

        from transfer.services.jobs import import_job_child_run

        try:
            return import_job_child_run(
                job_id=int(params["job_id"]), on_progress=lambda done: _report(answer_to, done)
            )
        except DatabaseError as exc:
            # libpq out of address space while it reads a row is the memory limit too.
            if "out of memory" in str(exc):
                raise MemoryError(str(exc)) from exc
            raise
    finally:
        sys.stdout = answer_to


def _django_setup(database: dict[str, Any]) -> None:
    os.environ["DJANGO_SETTINGS_MODULE"] = "chat_platform.settings"
    os.environ.setdefault("SECRET_KEY", secrets.token_urlsafe(32))
    os.environ["DATABASE_POOL"] = "false"
    import django
    from django.conf import settings

    settings.DATABASES["default"] = {**database, "CONN_MAX_AGE": 0}
    django.setup()


def _report(out: IO[str], done: int) -> None:
    out.write(json.dumps({"progress": "reading", "bytes_read": done}) + "\n")
    out.flush()
