"""Which just-written messages a turn's indexing hands on to be embedded
(``memory.services.messages_index_written``): the ones indexed now, read with the messages
themselves, and any indexed earlier still without a vector, read apart; none for a bot that
searches by words only."""

import importlib

import pytest

from bots.models import Message
from memory import embed_after_turns, embeddings
from memory.models import MessageIndex
from memory.services import messages_index_written
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db

# The module (the package exports its Celery app under the same name).
celery_app = importlib.import_module("chat_platform.celery_app")


@pytest.fixture
def dispatched(monkeypatch):
    calls = []
    monkeypatch.setattr(
        embeddings,
        "messages_embed_dispatch",
        lambda sid, ids=None, quota=None: calls.append((sid, ids)),
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


@pytest.fixture
def eager():
    """Set the Celery app's ``task_always_eager`` (given back after the test)."""
    before = celery_app.app.conf.task_always_eager

    def set_to(value: bool) -> None:
        celery_app.app.conf.task_always_eager = value

    yield set_to
    celery_app.app.conf.task_always_eager = before


@pytest.fixture
def queued_here(monkeypatch):
    calls = []
    monkeypatch.setattr(
        embed_after_turns,
        "messages_embed_after_turns",
        lambda *, session_id, message_ids=None, quota=None: calls.append((session_id, message_ids)),
    )
    return calls


@pytest.mark.parametrize(
    ("here", "worker_queues", "in_place"),
    [
        (True, {"chat", "compaction", "heavy"}, True),  # the default fleet: no broker hop
        (True, {"chat"}, False),  # a chat-only fleet leaves it to the compaction fleet
        (False, {"chat", "compaction", "heavy"}, False),  # an import: the task, as before
        (True, None, False),  # not a worker (a web process of real mode)
    ],
)
def test_a_turn_on_a_worker_that_runs_the_embedding_queues_it_in_its_own_process(
    owner,
    dispatched,
    queued_here,
    monkeypatch,
    eager,
    django_capture_on_commit_callbacks,
    here,
    worker_queues,
    in_place,
):
    """A turn's written messages go straight to its process's after-turns thread when the
    process consumes the embedding task's queue, where the task would have put them; otherwise
    (another fleet runs that queue, or an import indexes) the task is dispatched as before."""
    eager(False)
    monkeypatch.setattr(
        celery_app, "_consumed", None if worker_queues is None else frozenset(worker_queues)
    )
    session = SessionFactory(user=owner, bot=BotFactory(owner=owner))
    question, reply = _pair(session, 1)
    with django_capture_on_commit_callbacks(execute=True):
        assert messages_index_written(message_ids=[question.pk, reply.pk], here=here) == 2
    ids = sorted([question.pk, reply.pk])
    assert queued_here == ([(session.pk, ids)] if in_place else [])
    assert dispatched == ([] if in_place else [(session.pk, ids)])


def test_tasks_run_inline_are_never_queued_in_place(monkeypatch, eager, settings):
    """Tests that run tasks inline keep the task (it embeds at once there); an embedded server
    runs every task in its own process."""
    monkeypatch.setattr(celery_app, "_consumed", frozenset({"compaction"}))
    eager(True)
    assert celery_app.runs_task(embeddings.EMBED_TASK) is False
    eager(False)
    assert celery_app.runs_task(embeddings.EMBED_TASK) is True
    assert celery_app.runs_task("bots.tasks.turn_run") is False  # the chat queue
    monkeypatch.setattr(celery_app, "_consumed", None)
    settings.TASKS_IN_PROCESS = True
    assert celery_app.runs_task("bots.tasks.turn_run") is True
