"""Fixtures of the cross-process tests."""

import pytest

from tests.integration.processes import celery_worker, database_url, process_env, web_server


@pytest.fixture
def real_stack(django_db_setup, tmp_path):
    """uvicorn and a Celery worker (``processes.celery_worker``) on the test database; yields
    the web server's base URL. One per test: a worker that outlived its test would take the
    tasks later tests queue for themselves (docs/testing.md)."""
    env = process_env(DATABASE_URL=database_url(), DEBUG="false", LOG_JSON="true")
    with celery_worker(env, tmp_path / "worker.log"), web_server(env, tmp_path / "web.log") as base:
        yield base
