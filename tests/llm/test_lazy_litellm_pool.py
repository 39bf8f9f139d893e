"""Waiting on litellm's one-time import holds no pooled database connection
(``chat_platform/llm/gateway/lazy_litellm.py``): a CI run's bench saw a web process's first
sends wait on it with their connections, the pool run dry, and other requests fail after
DATABASE_POOL_TIMEOUT (``ws_send_unavailable``, ``couldn't get a connection after 10.00 sec``)."""

import pytest
from django.db import connection, transaction

from chat_platform.llm.gateway import lazy_litellm, model_info
from tests.pooled import pooled_only

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pooled_only,
]


@pytest.fixture
def unloaded(monkeypatch):
    """As in a process whose litellm is not imported yet; ``held`` records, at the import's
    configuration step, whether this thread still held a pooled connection."""
    held: list[bool] = []
    configure = lazy_litellm.configure_lean

    def recording(litellm):
        held.append(connection.connection is not None)
        configure(litellm)

    monkeypatch.setattr(lazy_litellm, "_module", None)
    monkeypatch.setattr(lazy_litellm, "configure_lean", recording)
    monkeypatch.setattr(model_info, "_max_input_cache", {})
    return held


def _borrow() -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert connection.connection is not None


def test_the_import_runs_with_the_thread_s_connection_given_back(unloaded):
    _borrow()
    idle_before = connection.pool.get_stats().get("pool_available", 0)
    lazy_litellm.get()
    assert unloaded == [False]
    assert connection.pool.get_stats().get("pool_available", 0) == idle_before + 1
    lazy_litellm.get()  # loaded: nothing is released again
    assert unloaded == [False]


def test_inside_a_transaction_the_connection_stays(unloaded):
    with transaction.atomic():
        _borrow()
        lazy_litellm.get()
        assert unloaded == [True]  # closing it would roll the transaction back
        assert connection.in_atomic_block


def test_a_send_s_fit_check_waits_for_the_import_without_a_connection(
    unloaded, owner, fake_session, django_capture_on_commit_callbacks
):
    from turns.services.send import session_message_send

    _borrow()
    with django_capture_on_commit_callbacks(execute=False):
        result = session_message_send(user=owner, session_id=fake_session.pk, content="hi")
    assert result.created
    assert unloaded == [False]
