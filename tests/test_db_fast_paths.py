"""The hand-written fast paths (UPDATE … RETURNING, the PostgreSQL CTEs of ``bots.fast_paths``,
queries compiled once) and their reference, the plain ORM of ``bots.transitions`` behind
``DB_FAST_PATHS`` (issue 17, item 6): a turn through either stores the same thing and sends the
provider the same request, and either loses a race the same way."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.models import ChatSession, Message
from bots.transitions import message_finish, reply_claim, session_context_recount
from chat_platform.dbwrite import update_returning
from tests.factories import message_add
from tests.fakeopenai import Reply
from turns import turn
from turns.services.send import do_message_pair_create

pytestmark = pytest.mark.django_db(transaction=True)


def _turn(session, fake_openai):
    message_add(session, role="user", content="Earlier question", pinned=True)
    message_add(session, role="assistant", content="Earlier answer")
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()
    fake_openai.script(Reply(text="The answer, streamed.", chunks=["The answer, ", "streamed."]))
    exchange = do_message_pair_create(session=session, content="A question", client_id=None)
    reply = exchange.assistant_message
    with CaptureQueriesContext(connection) as queries:
        turn.turn_run(message_id=reply.pk)
    stored = Message.objects.get(pk=reply.pk)
    session.refresh_from_db()
    return stored, session, [q["sql"] for q in queries.captured_queries]


@pytest.mark.parametrize("fast", [True, False])
def test_a_turn_through_either_path_stores_and_sends_the_same(
    fast, fake_session, fake_openai, settings
):
    settings.DB_FAST_PATHS = fast

    stored, session, sqls = _turn(fake_session, fake_openai)

    assert (stored.status, stored.content, stored.finish_reason) == (
        "complete",
        "The answer, streamed.",
        "stop",
    )
    assert (session.context_tokens, session.context_messages) == session_context_recount(
        session_id=session.pk
    )
    assert session.context_messages == 4  # noqa: PLR2004
    assert [(m["role"], m["content"]) for m in fake_openai.requests[-1]["messages"]] == [
        ("system", "You are a test bot."),
        ("user", "Earlier question"),
        ("assistant", "Earlier answer"),
        ("user", "A question"),
    ]
    # An ORM INSERT returns its id (the context record's) and is not hand-written.
    hand_written = [
        s
        for s in sqls
        if s.startswith("WITH") or (" RETURNING " in s and not s.startswith("INSERT"))
    ]
    if fast and connection.vendor == "postgresql":
        assert len(hand_written) == 2  # noqa: PLR2004 - the claim and the finish
    elif not fast:
        assert hand_written == []


@pytest.mark.parametrize("fast", [True, False])
def test_the_conditional_writes_lose_their_race_the_same_way(fast, fake_session, settings):
    settings.DB_FAST_PATHS = fast
    exchange = do_message_pair_create(session=fake_session, content="hi", client_id=None)
    reply = exchange.assistant_message

    claimed = reply_claim(message_id=reply.pk)
    assert (claimed.pk, claimed.status, claimed.session.bot.pk) == (
        reply.pk,
        "streaming",
        fake_session.bot.pk,
    )
    assert claimed.reply_to.pk == exchange.user_message.pk
    assert reply_claim(message_id=reply.pk) is None  # claimed already

    before = ChatSession.objects.get(pk=fake_session.pk).context_tokens
    finished = message_finish(
        message_id=reply.pk,
        from_status="streaming",
        counted=True,
        status="complete",
        content="hello",
        token_count=7,
    )
    assert (finished.status, finished.content) == ("complete", "hello")
    assert ChatSession.objects.get(pk=fake_session.pk).context_tokens == before + 7
    # a second finish loses: nothing changes, nothing is counted twice
    assert (
        message_finish(message_id=reply.pk, from_status="streaming", counted=True, status="failed")
        is None
    )
    assert ChatSession.objects.get(pk=fake_session.pk).context_tokens == before + 7
    assert Message.objects.get(pk=reply.pk).status == "complete"


def test_the_plain_update_returning_returns_the_updated_rows_or_none(fake_session, settings):
    settings.DB_FAST_PATHS = False
    first = message_add(fake_session, role="user", content="one")
    second = message_add(fake_session, role="user", content="two")

    rows = update_returning(Message.objects.filter(session=fake_session, pinned=False), pinned=True)

    assert [(m.pk, m.pinned) for m in rows] == [(first.pk, True), (second.pk, True)]
    assert update_returning(Message.objects.filter(pk=first.pk, pinned=False), pinned=False) == []
    assert Message.objects.get(pk=first.pk).pinned is True
