"""A turn's embeddings are stored without the ORM building a ``CASE WHEN pk = … THEN …`` per
row and field (``chat_platform.dbwrite.rows_update``): still one UPDATE for the batch."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from memory.embeddings import messages_embed_pending
from memory.models import MessageIndex
from memory.services import messages_index_written
from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db


def test_a_batch_of_vectors_is_one_update_and_no_case_per_row(owner, case_whens_built):
    bot = BotFactory(owner=owner, embedding_model="builtin/embed")
    session = SessionFactory(user=owner, bot=bot)
    ids = [
        message_add(session, role=role, content=text, status="complete").pk
        for role, text in [("user", "Where is the ferry?"), ("assistant", "At pier nine.")]
    ]
    messages_index_written(message_ids=ids)
    MessageIndex.objects.update(embedding=None, embedding_model="")
    built = case_whens_built
    with CaptureQueriesContext(connection) as queries:
        assert messages_embed_pending(session_id=session.pk) == 2
    assert built == []
    updates = [q["sql"] for q in queries if q["sql"].startswith("UPDATE")]
    assert len(updates) == 1 and "FROM (VALUES" in updates[0]
    stored = {
        pk: (model, len(bytes(vector)))
        for pk, vector, model in MessageIndex.objects.values_list(
            "message_id", "embedding", "embedding_model"
        )
    }
    assert stored == {pk: ("builtin/embed", 384 * 4) for pk in ids}


def test_a_turns_embedding_builds_no_statement(owner, monkeypatch, django_assert_num_queries):
    """The pending texts are read by a statement compiled once per process and number of ids
    (``memory.embeddings._PENDING_TEXTS``), as the session's model already was: a turn's
    embedding builds none (was 1, every turn); still 3 statements."""
    from django.db.models.sql.compiler import SQLCompiler

    bot = BotFactory(owner=owner, embedding_model="builtin/embed")
    turns = []
    for question, reply in [
        ("Where is the ferry?", "At pier nine."),
        ("Which platform for the Leeds train?", "Platform four, at noon."),
    ]:
        session = SessionFactory(user=owner, bot=bot)
        ids = [
            message_add(session, role=role, content=text, status="complete").pk
            for role, text in [("user", question), ("assistant", reply)]
        ]
        messages_index_written(message_ids=ids)
        turns.append((session, ids))
    MessageIndex.objects.update(embedding=None, embedding_model="")
    (first, first_ids), (second, second_ids) = turns
    assert messages_embed_pending(session_id=first.pk, message_ids=first_ids) == 2  # compiles
    built = []
    real_as_sql = SQLCompiler.as_sql
    monkeypatch.setattr(
        SQLCompiler, "as_sql", lambda self, *a, **k: built.append(1) or real_as_sql(self, *a, **k)
    )

    with django_assert_num_queries(3):
        assert messages_embed_pending(session_id=second.pk, message_ids=second_ids) == 2

    assert built == []
    stored = MessageIndex.objects.filter(session_id=second.pk)
    assert sorted(stored.values_list("message_id", "embedding_model")) == [
        (pk, "builtin/embed") for pk in sorted(second_ids)
    ]
    # a message not of the session, and one already embedded, are not read again
    assert (
        messages_embed_pending(session_id=second.pk, message_ids=[*second_ids, first_ids[0]]) == 0
    )
