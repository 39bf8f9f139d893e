"""A recall or tool round stored before its reply (``bots.exchanges.recall_exchange_store``) is
written in few statements: a long tool task stores one per step (docs/performance.md, "The
tool task, seventh pass")."""

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from bots import exchanges, transitions
from bots.models import ChatSession, Message
from turns.services.send import do_message_pair_create

pytestmark = pytest.mark.django_db(transaction=True)


def _round(reply, results=1):
    return exchanges.recall_exchange_store(
        reply=reply,
        call={"content": "", "tool_calls": [{"id": "c1"}], "token_count": 5, "model": "m"},
        results=[
            {"content": f"r{i}", "tool_call_id": "c1", "tool_name": "t", "token_count": 3}
            for i in range(results)
        ],
    )


def test_a_round_is_four_statements_whatever_its_results_and_the_reply_knows_its_new_seq(
    fake_session,
):
    pair = do_message_pair_create(session=fake_session, content="go", client_id=None)
    reply = transitions.reply_claim(message_id=pair.assistant_message.pk)
    before = ChatSession.objects.values_list("context_tokens", "context_messages").get(
        pk=fake_session.pk
    )
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        stored, moved = _round(reply, results=2)
    # the seqs and the running totals (one UPDATE), the later messages' read, the reply's
    # move, the call and its results (one INSERT); the transaction's own BEGIN/COMMIT aside
    statements = [q["sql"] for q in queries.captured_queries if q["sql"] not in ("BEGIN", "COMMIT")]
    assert len([s for s in statements if not s.startswith(("SAVEPOINT", "RELEASE"))]) == 4
    assert moved == []
    assert [m.seq for m in stored] == [2, 3, 4]
    assert reply.seq == 5  # no read back: the store moved it
    assert Message.objects.get(pk=reply.pk).seq == 5
    assert ChatSession.objects.values_list("context_tokens", "context_messages").get(
        pk=fake_session.pk
    ) == (before[0] + 11, before[1] + 3)
    assert [(m.role, m.kind, m.content, m.bot_id) for m in stored] == [
        ("assistant", "tool", "", reply.bot_id),
        ("tool", "tool", "r0", reply.bot_id),
        ("tool", "tool", "r1", reply.bot_id),
    ]
    assert all(m.pk and m.created_at for m in stored)
