"""The OpenAI-compatible API against the real stack: uvicorn (ASGI) + a Celery worker on Redis
+ PostgreSQL, driven by the real ``openai`` SDK; bots talk to the local fake provider."""

import datetime as dt

import openai
import pytest

from openai_api.keys import key_create
from tests.integration.processes import celery_worker, database_url, process_env, web_server


@pytest.fixture(scope="module")
def stack(django_db_setup, tmp_path_factory):
    """uvicorn and a Celery worker on the test database for this module's tests."""
    env = process_env(DATABASE_URL=database_url(), DEBUG="false", LOG_JSON="true")
    logs = tmp_path_factory.mktemp("openai-stack")
    with celery_worker(env, logs / "worker.log"), web_server(env, logs / "web.log") as base:
        yield base


def sdk(stack: str, key: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack}/v1", api_key=key, max_retries=0, timeout=60, **kwargs)


def new_key(user, **fields):
    """(row, key text)."""
    return key_create(user=user, name=fields.pop("name", "editor"), **fields)


def tomorrow():
    from django.utils import timezone

    return timezone.now() + dt.timedelta(days=1)
