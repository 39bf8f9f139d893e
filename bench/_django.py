"""Shared start-up of the benchmarks: Django on a PostgreSQL database of their own, embedded
mode (tasks in-process), quiet logs. Call ``setup()`` before importing anything from the apps."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ensure_database(url: str) -> None:
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            conn.execute(f'create database "{name}"')


def setup() -> None:
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.pop("REDIS_URL", None)  # embedded: tasks run in-process, the lock is in-process
    _ensure_database(os.environ["DATABASE_URL"])

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
