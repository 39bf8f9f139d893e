"""Shared start-up of the benchmarks: Django on a PostgreSQL database of their own, embedded
mode (tasks in-process), quiet logs. Call ``setup()`` before importing anything from the apps."""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _ensure_database(url: str) -> None:
    """Make the bench's PostgreSQL database if it is missing, as a copy of the migrated template
    the test suite keeps for this tree's migrations (``postgres_template`` in
    tests/integration/processes.py, made now if there is none), so the ``migrate`` after it has
    nothing to apply. On a fresh machine each bench database migrated from nothing: ~15 s of CPU
    each, three of them in `make test` (the bench smoke's two and tests/bench's). Call it after
    ``django.setup()``: the template is named by the installed apps' migrations."""
    import psycopg

    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if conn.execute("select 1 from pg_database where datname = %s", (name,)).fetchone():
            return
        if not _apps_of_this_tree():
            # ``--against REV``'s side: the template would be migrated by this tree's
            # ``manage.py``, not REV's. An empty database, which the ``migrate`` after this
            # fills with REV's own migrations.
            conn.execute(f'create database "{name}"')
            return
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from tests.integration.processes import postgres_template

    template = postgres_template()
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'create database "{name}" template "{template}"')


def _apps_of_this_tree() -> bool:
    """Whether the apps Django loaded are this tree's. ``bench/_against.py`` runs this
    checkout's bench scripts over REV's code (``PYTHONPATH``): the apps are then REV's, and
    this tree's ``tests/integration/processes.py`` would migrate a template named for REV's
    migrations with this tree's (a bot without REV's columns then failed to save)."""
    import chat_platform

    return Path(chat_platform.__file__).resolve().parents[1] == ROOT


def database_migrated() -> None:
    """After ``django.setup()``: the database of ``DATABASE_URL`` exists and is migrated."""
    from django.core.management import call_command

    url = os.environ["DATABASE_URL"]
    if url.startswith("postgres"):
        _ensure_database(url)
    call_command("migrate", verbosity=0)


# The key variable of the bots that call a bench's local fake provider (``fake_bot``).
FAKE_KEY_ENV = "BENCH_FAKE_KEY"


def fake_key_env() -> None:
    """Set ``FAKE_KEY_ENV`` and allow-list it for bots (the provider policy checks a bot's key
    variable against ``PROVIDER_KEY_ENV_ALLOWED`` at settings load), in this process's
    environment: processes started after it (the stack's web and worker) inherit both."""
    os.environ[FAKE_KEY_ENV] = "sk-bench"
    allowed = os.environ.get("PROVIDER_KEY_ENV_ALLOWED", "OPENAI_API_KEY,ANTHROPIC_API_KEY")
    os.environ["PROVIDER_KEY_ENV_ALLOWED"] = ",".join(
        dict.fromkeys([*filter(None, allowed.split(",")), FAKE_KEY_ENV])
    )


def setup(*, fake_key: bool = False) -> None:
    """``fake_key``: set ``FAKE_KEY_ENV`` and allow-list it for bots (the provider policy
    checks a bot's key variable against ``PROVIDER_KEY_ENV_ALLOWED`` at settings load)."""
    if fake_key:
        fake_key_env()
    sys.path.insert(0, str(ROOT))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.pop("REDIS_URL", None)  # embedded: tasks run in-process, the lock is in-process

    import django

    django.setup()
    database_migrated()


def fake_bot(owner, fake, **fields):  # noqa: ANN001, ANN201 - models load after setup()
    """A bot of ``owner`` calling the local fake provider ``fake`` with ``FAKE_KEY_ENV``, its
    address approved as staff would approve a local server (``setup(fake_key=True)`` first)."""
    from bots.models import Bot

    bot = Bot.objects.create(owner=owner, api_base=fake.url, api_key_env=FAKE_KEY_ENV, **fields)
    bot.api_base_approved = fake.url
    bot.save(update_fields=["api_base_approved"])
    return bot
