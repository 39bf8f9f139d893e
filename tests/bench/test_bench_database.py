"""A bench's PostgreSQL database (``bench/_django.py``): a copy of this tree's migrated template,
except on a side of ``--against REV``, whose apps are REV's (``bench/_against.py`` runs this
checkout's bench scripts over REV's code). That side once got a template named for REV's
migrations but migrated by this tree's ``manage.py``: ``--against 94ecda9`` failed at its first
bot (``tools`` NOT NULL, a column 94ecda9 does not know)."""

import sys
import uuid
from pathlib import Path

import psycopg
import pytest
from django.db import connection

from tests.integration.processes import database_url

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import _django  # noqa: E402

pytestmark = pytest.mark.skipif(
    connection.vendor != "postgresql", reason="the benches' databases are PostgreSQL's"
)


@pytest.fixture
def bench_url():
    """The URL of a database that does not exist yet, dropped afterwards."""
    server = database_url().rsplit("/", 1)[0]
    name = f"bench_db_test_{uuid.uuid4().hex[:12]}"
    yield f"{server}/{name}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as admin:
        admin.execute(f'drop database if exists "{name}" with (force)')


def _tables(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "select tablename from pg_tables where schemaname = 'public' order by 1"
        ).fetchall()
    return [name for (name,) in rows]


@pytest.mark.django_db
def test_this_trees_bench_database_is_a_copy_of_its_migrated_template(bench_url):
    _django._ensure_database(bench_url)

    assert "django_migrations" in _tables(bench_url)
    assert "bots_bot" in _tables(bench_url)


@pytest.mark.django_db
def test_a_side_of_another_tree_gets_an_empty_database_for_its_own_migrations(
    bench_url, monkeypatch, tmp_path
):
    # The apps loaded are not the tree the bench scripts come from: REV's, under --against.
    monkeypatch.setattr(_django, "ROOT", tmp_path)

    _django._ensure_database(bench_url)

    assert _tables(bench_url) == []  # nothing of this tree's schema: REV's migrate fills it
