"""The OpenAI-compatible API against the real stack: uvicorn (ASGI) + a Celery worker on Redis
+ PostgreSQL, driven by the real ``openai`` SDK; bots talk to the local fake provider."""

import datetime as dt

import openai
import pytest

from openai_api.keys import key_create


@pytest.fixture
def stack(real_stack):
    """The test process's shared uvicorn and Celery worker on the test database
    (``tests/realstack.py``, docs/testing.md "Shared processes"); its base URL."""
    return real_stack


def sdk(stack: str, key: str, **kwargs) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{stack}/v1", api_key=key, max_retries=0, timeout=60, **kwargs)


def completion_post(key: str, body: dict):
    """``POST /v1/chat/completions`` in this process (Django's test client, no stack), with the
    key as a bearer token: for what the view answers before or without a worker."""
    from django.test import Client

    return Client().post(
        "/v1/chat/completions",
        body,
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {key}",
    )


def new_key(user, **fields):
    """(row, key text)."""
    return key_create(user=user, name=fields.pop("name", "editor"), **fields)


def tiny_bot(user, fake_openai):
    """A bot of B 500 (window 600, output 100) on the fake provider: model id ``tiny``."""
    from tests.factories import BotFactory

    return BotFactory(
        owner=user,
        name="Tiny",
        model="openai/fake-model",
        api_base=fake_openai.url,
        context_window=600,
        max_output_tokens=100,
    )


def tomorrow():
    from django.utils import timezone

    return timezone.now() + dt.timedelta(days=1)
