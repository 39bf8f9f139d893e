"""The records API's ``?q=`` never embeds the question in the request (docs/memory.md, "Hybrid
search"; memory/query_embedding.py): it hands it to the ``memory.tasks.query_embed`` task — an
in-process task thread in embedded mode, the ``chat`` queue's workers in real mode — and waits at
most ``EMBEDDING_TIMEOUT_SECONDS`` holding no database connection. No answer in time, or no
broker, is a word search with a warning; a session with no vectors asks no one."""

import logging
import threading

import pytest
from django.db import connections
from redis.exceptions import ConnectionError as RedisConnectionError

from chat_platform.celery_app import app as celery_app
from chat_platform.celery_app import task_named
from chat_platform.llm import builtin
from memory import embeddings, query_embedding
from tests.factories import BotFactory
from tests.memory import builtin_embed_data as data

QUESTION, HYBRID = data.QUESTIONS[0]  # "When does my flight depart?": no word in common


def _url(session):
    return f"/api/v1/sessions/{session.pk}/records/"


def _hits(client, session, question=QUESTION):
    response = client.get(_url(session), {"q": question})
    assert response.status_code == 200
    return [[h["name"], h["seqs"]] for h in response.json()]


@pytest.fixture
def embedded(owner):
    """A default bot's session (``builtin/embed``), every message embedded."""
    session = data.build(owner, BotFactory(owner=owner))
    assert embeddings.messages_embed_pending(session_id=session.pk) == 8
    return session


@pytest.fixture
def embed_calls(monkeypatch):
    """Each built-in embedding call: (its thread, whether the asking thread held a database
    connection meanwhile), recorded, then run."""
    calls = []
    asking = connections["default"]  # the test thread's: the client runs the view here
    real = builtin.embed

    def recording(model, texts):
        calls.append((threading.current_thread().name, asking.connection is not None))
        return real(model, texts)

    monkeypatch.setattr(builtin, "embed", recording)
    return calls


@pytest.mark.django_db(transaction=True)
def test_embedded_mode_embeds_the_question_on_a_task_thread_holding_no_connection(
    embedded, owner_client, embed_calls, inprocess_tasks
):
    assert _hits(owner_client, embedded) == HYBRID

    assert len(embed_calls) == 1
    thread, request_held_a_connection = embed_calls[0]
    assert thread.startswith("task-")
    assert thread != threading.current_thread().name
    assert request_held_a_connection is False


@pytest.mark.django_db(transaction=True)
def test_no_answer_in_time_is_a_word_search_with_a_warning(
    embedded, owner_client, monkeypatch, settings, caplog, inprocess_tasks
):
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.2
    release = threading.Event()
    real = builtin.embed

    def stuck(model, texts):
        release.wait(10)
        return real(model, texts)

    monkeypatch.setattr(builtin, "embed", stuck)

    with caplog.at_level(logging.WARNING):
        hits = _hits(owner_client, embedded)
    release.set()

    assert hits == []  # the words alone find nothing for this question
    assert "memory_search_embedding_failed" in caplog.text
    assert "TimeoutError" in caplog.text


@pytest.mark.django_db
def test_real_mode_asks_the_chat_queue_and_reads_the_answer(
    embedded, owner_client, embed_calls, eager_tasks
):
    route = celery_app.amqp.router.route({}, query_embedding.QUERY_TASK)

    assert route["queue"].name == "chat"
    assert _hits(owner_client, embedded) == HYBRID
    assert len(embed_calls) == 1


@pytest.mark.django_db
def test_a_broker_that_is_down_is_a_word_search_with_a_warning(
    embedded, owner_client, embed_calls, monkeypatch, caplog
):
    task = task_named(query_embedding.QUERY_TASK)

    def down(*args, **kwargs):
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379")

    monkeypatch.setattr(task, "apply_async", down)

    with caplog.at_level(logging.WARNING):
        assert _hits(owner_client, embedded) == []

    assert embed_calls == []
    assert "memory_search_embedding_failed" in caplog.text


@pytest.mark.django_db
def test_a_session_without_vectors_asks_no_one(owner, owner_client, embed_calls, monkeypatch):
    session = data.build(owner, BotFactory(owner=owner))  # nothing embedded yet
    task = task_named(query_embedding.QUERY_TASK)
    dispatched = []
    monkeypatch.setattr(task, "apply_async", lambda *a, **k: dispatched.append(a))

    assert _hits(owner_client, session) == []

    assert (embed_calls, dispatched) == ([], [])
