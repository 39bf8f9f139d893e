"""PostgreSQL parses a statement once per connection, not at every run: parameters are bound by
the server and a statement is prepared on a connection at its first run there
(``DATABASE_SERVER_SIDE_BINDING``, ``DATABASE_PREPARE_THRESHOLD``; docs/operations.md)."""

import os
import subprocess
import sys

import pytest
from django.db import connection

from memory.search_schema import message_search_install, search_schema_install

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(
        connection.vendor != "postgresql", reason="PostgreSQL's prepared statements"
    ),
]

PROBE = "SELECT %s::int + 1 AS prepared_probe_c41"


def _prepared(marker: str) -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT statement FROM pg_prepared_statements WHERE statement LIKE %s",
            [f"%{marker}%"],
        )
        return [row[0] for row in cursor.fetchall()]


def _runs_prepared(probe: str) -> list[int]:
    """Run ``probe`` five times on the test's connection: after each run, how many prepared
    statements on it hold its text."""
    marker = probe.rsplit(" ", 1)[1]
    seen = []
    with connection.cursor() as cursor:
        for run in (1, 2, 3, 4, 5):
            cursor.execute(probe, [run])
            assert cursor.fetchone() == (run + 1,)
            seen.append(len(_prepared(marker)))
    return seen


def test_a_statement_is_prepared_at_its_first_run_on_a_connection_and_once():
    assert _runs_prepared(PROBE) == [1, 1, 1, 1, 1]
    # the parameter went apart from the text: one statement serves every value
    assert _prepared("prepared_probe_c41") == ["SELECT $1::int + 1 AS prepared_probe_c41"]


def test_a_threshold_of_two_prepares_at_the_third_run():
    connection.ensure_connection()
    threshold, connection.connection.prepare_threshold = connection.connection.prepare_threshold, 2
    try:
        seen = _runs_prepared("SELECT %s::int + 1 AS prepared_probe_d52")
    finally:
        connection.connection.prepare_threshold = threshold
    assert seen == [0, 0, 1, 1, 1]


def test_a_statement_without_parameters_is_never_prepared_so_a_script_runs():
    # The default threshold (0) would prepare it at once, and a prepared statement holds one
    # statement: "cannot insert multiple commands into a prepared statement" (chat_platform/
    # pgcursor.py). tests/conftest.py empties the tables with such a script.
    with connection.cursor() as cursor:
        for _ in range(3):
            cursor.execute("SELECT 1 AS prepared_probe_e63; SELECT 2 AS prepared_probe_e63")
            assert cursor.fetchone() == (1,)
        cursor.execute("SELECT 3 AS prepared_probe_f74")
        assert cursor.fetchone() == (3,)
    assert _prepared("prepared_probe_e63") == []
    assert _prepared("prepared_probe_f74") == []
    assert type(connection.connection.cursor()).__name__ == "PreparingCursor"


def test_scripts_of_several_statements_run_even_when_every_statement_is_prepared():
    # psycopg leaves a script unprepared after its first run, but with a threshold of 0 (the
    # default) it would prepare it at once and fail: "cannot insert multiple commands into a
    # prepared statement". The installs ask for it unprepared, and the connection's cursor
    # leaves a statement without parameters unprepared too (the test above).
    connection.ensure_connection()
    threshold, connection.connection.prepare_threshold = connection.connection.prepare_threshold, 0
    try:
        for _ in range(2):
            message_search_install(connection)
            search_schema_install(connection)
    finally:
        connection.connection.prepare_threshold = threshold
    assert _prepared("memory_message_terms_gin") == []


def _options(**env: str) -> str:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "o = s.DATABASES['default']['OPTIONS']; "
        "print(o.get('server_side_binding'), o.get('prepare_threshold', 'unset'))"
    )
    merged = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "chat_platform.settings",
        "DATABASE_URL": "postgres://postgres@127.0.0.1:5432/postgres",
        **env,
    }
    for key in ("DATABASE_SERVER_SIDE_BINDING", "DATABASE_PREPARE_THRESHOLD"):
        if key not in env:
            merged.pop(key, None)
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], env=merged, capture_output=True, text=True, timeout=60
    )
    return done.stdout.strip() if done.returncode == 0 else done.stderr.strip().splitlines()[-1]


def test_the_settings_and_a_bad_threshold():
    assert _options() == "True 0"
    assert _options(DATABASE_PREPARE_THRESHOLD="2") == "True 2"
    assert _options(DATABASE_PREPARE_THRESHOLD="off", DATABASE_SERVER_SIDE_BINDING="false") == (
        "False unset"
    )
    assert _options(DATABASE_PREPARE_THRESHOLD="soon") == (
        "django.core.exceptions.ImproperlyConfigured: DATABASE_PREPARE_THRESHOLD: a whole number "
        "of runs (0 or more), or off"
    )
