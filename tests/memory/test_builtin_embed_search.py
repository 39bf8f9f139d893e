"""Search by meaning out of the box (issue 33; docs/memory.md "Hybrid search"): a bot left at its
default ``embedding_model`` (``builtin/embed``, the built-in model run in-process) has its
messages embedded as they are written — live ones by the task a turn's indexing hands on, after
commit, compacted ones after the compaction — and search finds a paraphrase that shares no word
with the question, where word search finds nothing. A blank ``embedding_model`` searches by
words only and embeds nothing. SQLite gives the same hits:
tests/memory/test_builtin_embed_sqlite.py."""

import numpy as np
import pytest

from bots.models import Message
from chat_platform.llm.builtin import embedding as builtin_embedding
from memory import embeddings
from memory.models import MessageIndex, RecallEvent
from memory.services import messages_index_written
from tests.factories import BotFactory
from tests.memory import builtin_embed_data as data
from tests.memory import message_search_data as talks
from turns.services.send import session_message_send

pytestmark = pytest.mark.django_db

VECTOR_BYTES = builtin_embedding.DIMENSIONS * 4


@pytest.fixture
def default_bot(owner):
    bot = BotFactory(owner=owner)
    assert bot.embedding_model == "builtin/embed"  # the model field's default
    return bot


def test_a_stopping_process_embeds_no_further_batch_and_leaves_the_rows_pending(
    owner, default_bot, monkeypatch
):
    # The process is stopping (a worker's warm shutdown, the interpreter's exit): the embedding
    # ends before its next batch, so no ONNX run is left going while the interpreter exits
    # (chat_platform/foreground.py); the rows stay pending for a later run.
    from chat_platform import foreground

    session = data.build(owner, default_bot)
    monkeypatch.setattr(foreground, "_stopping", True)
    assert embeddings.messages_embed_pending(session_id=session.pk) == 0
    monkeypatch.setattr(foreground, "_stopping", False)
    assert embeddings.messages_embed_pending(session_id=session.pk) == 8


def test_hybrid_search_finds_the_paraphrase_word_search_misses(owner, default_bot):
    session = data.build(owner, default_bot)
    assert embeddings.messages_embed_pending(session_id=session.pk) == 8

    answers = data.answers(session)

    assert answers["hybrid"] == dict(data.QUESTIONS)
    assert answers["lexical"] == {q: [] for q, _ in data.QUESTIONS}


def test_a_written_message_is_embedded_by_the_background_task(
    owner, default_bot, eager_tasks, django_capture_on_commit_callbacks
):
    session = data.build(owner, default_bot)
    role, text = data.LIVE
    message = talks.said(session, role, text, data.TALKS[-1][0])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        assert messages_index_written(message_ids=[message.pk]) == 1

    assert len(callbacks) == 1  # the embedding task, handed on after commit
    row = MessageIndex.objects.get(message_id=message.pk)
    assert (row.record_id, row.embedding_model, len(bytes(row.embedding))) == (
        None,
        "builtin/embed",
        VECTOR_BYTES,
    )
    # the task embedded the message it was given, not the session's compacted backlog
    assert MessageIndex.objects.filter(session=session).exclude(embedding=None).count() == 1
    vector = np.frombuffer(bytes(row.embedding), dtype="<f4")
    assert vector.tolist() == pytest.approx(builtin_embedding.embed_matrix([text])[0].tolist())
    # a live message is found by meaning in the history the request does not show
    found = data.hits(session, data.LIVE_QUESTION, live_before=message.seq + 1)
    assert found == [["(history)", [message.seq]]]
    default_bot.embedding_model = ""
    assert data.hits(session, data.LIVE_QUESTION, live_before=message.seq + 1) == []


def test_blank_means_words_only_and_nothing_is_embedded(
    owner, eager_tasks, django_capture_on_commit_callbacks
):
    bot = BotFactory(owner=owner, embedding_model="")
    session = data.build(owner, bot)
    message = talks.said(session, *data.LIVE, data.TALKS[-1][0])

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        messages_index_written(message_ids=[message.pk])

    assert callbacks == []
    assert embeddings.messages_embed_pending(session_id=session.pk) == 0
    assert MessageIndex.objects.exclude(embedding=None).count() == 0
    assert {q: data.hits(session, q) for q, _ in data.QUESTIONS} == {
        q: [] for q, _ in data.QUESTIONS
    }


def test_the_builtin_pair_quotes_the_turn_search_found_by_meaning(
    owner, default_bot, eager_tasks, django_capture_on_commit_callbacks
):
    """builtin/recall with builtin/embed through the real turn: the question shares no word with
    the message that answers it; the index names nothing to read, so the model searches, and
    quotes the dated turn hybrid search found (issue 33, item 3)."""
    session = data.build(owner, default_bot)
    embeddings.messages_embed_pending(session_id=session.pk)

    with django_capture_on_commit_callbacks(execute=True):
        sent = session_message_send(
            user=owner, session_id=session.pk, content="When does my flight depart?"
        )

    reply = Message.objects.get(pk=sent.assistant_message.pk)
    assert (reply.status, reply.content) == (
        "complete",
        "From earlier in our conversation:\n"
        "> My plane to Tokyo takes off at nine on Saturday morning. "
        "— you said in message 1, on 2024-03-08",
    )
    events = RecallEvent.objects.filter(session=session).order_by("round")
    assert [(e.tool, e.query, e.found) for e in events] == [
        ("search", "flight depart", ["snapshot_1_4"])
    ]
