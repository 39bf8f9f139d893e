"""Fixtures of the cross-process tests."""

import pytest
from django.conf import settings

from tests.integration.processes import celery_worker, process_env, web_server


@pytest.fixture
def real_stack(django_db_setup, tmp_path):
    """uvicorn and a Celery worker (``processes.celery_worker``) on the test database; yields
    the web server's base URL."""
    db = settings.DATABASES["default"]
    url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"
    env = process_env(DATABASE_URL=url, DEBUG="false", LOG_JSON="true")
    with celery_worker(env, tmp_path / "worker.log"), web_server(env, tmp_path / "web.log") as base:
        yield base
