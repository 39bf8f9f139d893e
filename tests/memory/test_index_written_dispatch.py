"""Which just-written messages a turn's indexing hands on to be embedded
(``memory.services.messages_index_written``): the ones indexed now, read with the messages
themselves, and any indexed earlier still without a vector, read apart; none for a bot that
searches by words only."""

import pytest

from bots.models import Message
from memory import embeddings
from memory.models import MessageIndex
from memory.services import messages_index_written
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def dispatched(monkeypatch):
    calls = []
    monkeypatch.setattr(
        embeddings, "messages_embed_dispatch", lambda sid, ids=None: calls.append((sid, ids))
    )
    return calls


def _pair(session, seq, words="tea in the garden"):
    question = Message.objects.create(
        session=session, seq=seq, role="user", content=f"Where is the {words}?", status="complete"
    )
    reply = Message.objects.create(
        session=session,
        seq=seq + 1,
        role="assistant",
        content=f"The {words} is by the gate.",
        status="complete",
        reply_to=question,
    )
    return question, reply


def test_both_indexed_now_are_handed_on_in_two_statements(
    owner, dispatched, django_capture_on_commit_callbacks, django_assert_num_queries
):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner))
    question, reply = _pair(session, 1)
    with django_capture_on_commit_callbacks(execute=True), django_assert_num_queries(2):
        assert messages_index_written(message_ids=[question.pk, reply.pk]) == 2
    assert dispatched == [(session.pk, sorted([question.pk, reply.pk]))]


def test_one_indexed_earlier_without_a_vector_is_handed_on_too(
    owner, dispatched, django_capture_on_commit_callbacks
):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner))
    question, reply = _pair(session, 1)
    with django_capture_on_commit_callbacks(execute=True):
        messages_index_written(message_ids=[question.pk])
    dispatched.clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert messages_index_written(message_ids=[question.pk, reply.pk]) == 1
    assert dispatched == [(session.pk, sorted([question.pk, reply.pk]))]
    MessageIndex.objects.filter(message_id=question.pk).update(
        embedding=b"x", embedding_model="builtin/embed"
    )
    _, answer = _pair(session, 3)
    with django_capture_on_commit_callbacks(execute=True):
        messages_index_written(message_ids=[question.pk, answer.pk])
    assert dispatched[-1] == (session.pk, [answer.pk])


def test_a_bot_without_an_embedding_model_hands_on_nothing(
    owner, dispatched, django_capture_on_commit_callbacks
):
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner, embedding_model=""))
    question, reply = _pair(session, 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert messages_index_written(message_ids=[question.pk, reply.pk]) == 2
    assert dispatched == []
