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
