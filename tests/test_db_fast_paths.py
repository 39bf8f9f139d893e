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


def _columns(message: Message) -> dict:
    """What a message row stores, but the columns that differ between any two writes."""
    row = Message.objects.filter(pk=message.pk).values().get()
    return {k: v for k, v in row.items() if k not in ("id", "created_at", "updated_at")}


@pytest.mark.parametrize("fast", [True, False])
def test_a_send_writes_its_question_and_reply_in_one_statement_storing_the_same(
    fast, fake_session, settings
):
    """A send's question and its pending reply (the outbox row, ``reply_to`` the question): one
    ``INSERT`` on PostgreSQL (the question's in a CTE, the reply selecting its id), one each
    through the plain ORM; the same rows either way (docs/performance.md "A turn's CPU and
    latency, seventh pass (web)")."""
    settings.DB_FAST_PATHS = fast
    with CaptureQueriesContext(connection) as queries:
        exchange = do_message_pair_create(
            session=fake_session, content="A question", client_id="c1"
        )
    question, reply = exchange.user_message, exchange.assistant_message

    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    one = fast and connection.vendor == "postgresql"
    assert len(inserts) == (1 if one else 2)
    assert question.pk < reply.pk  # the question's id first, as two inserts give it
    assert (reply.reply_to_id, reply.prompted_by_id) == (question.pk, question.pk)
    assert reply.reply_to is question and reply.bot == fake_session.bot
    assert not question._state.adding and not reply._state.adding
    stored_question, stored_reply = (
        Message.objects.get(pk=question.pk),
        Message.objects.get(pk=reply.pk),
    )
    assert stored_question.created_at == question.created_at
    assert stored_reply.created_at == reply.created_at
    assert _columns(question) == {
        **_columns(question),
        "session_id": fake_session.pk,
        "seq": 1,
        "role": "user",
        "kind": "chat",
        "content": "A question",
        "status": "complete",
        "client_id": "c1",
        "reply_to_id": None,
        "prompted_by_id": None,
        "bot_id": None,
        "tool_calls": [],
        "charged_to": "",
        "dispatched_at": None,
    }
    assert _columns(reply) == {
        **_columns(reply),
        "session_id": fake_session.pk,
        "seq": 2,
        "role": "assistant",
        "kind": "chat",
        "content": "",
        "status": "pending",
        "token_count": 0,
        "client_id": "",
        "reply_to_id": question.pk,
        "prompted_by_id": question.pk,
        "bot_id": fake_session.bot_id,
        "model": fake_session.bot.model,
        "tool_calls": [],
        "charged_to": "",
        "dispatched_at": None,
    }
    assert _columns(question)["token_count"] > 0


def test_a_room_send_writes_the_question_and_every_reply_in_one_statement(
    owner, fake_session, settings
):
    """In a room, every answering bot's pending reply with the question, in answer order: the
    first answers it (``reply_to``), each was prompted by it."""
    from tests.factories import BotFactory

    settings.DB_FAST_PATHS = True
    second = BotFactory(owner=owner, name="Critic")
    with CaptureQueriesContext(connection) as queries:
        exchange = do_message_pair_create(
            session=fake_session,
            content="Both of you",
            client_id=None,
            answering=[fake_session.bot, second],
        )
    inserts = [q["sql"] for q in queries.captured_queries if "INSERT" in q["sql"]]
    assert len(inserts) == (1 if connection.vendor == "postgresql" else 3)
    question = exchange.user_message
    rows = list(
        Message.objects.filter(session=fake_session)
        .order_by("seq")
        .values_list("seq", "role", "bot_id", "reply_to_id", "prompted_by_id", "model")
    )
    assert rows == [
        (1, "user", None, None, None, ""),
        (2, "assistant", fake_session.bot_id, question.pk, question.pk, fake_session.bot.model),
        (3, "assistant", second.pk, None, question.pk, second.model),
    ]
    assert [r.pk for r in exchange.replies] == sorted(r.pk for r in exchange.replies)
    assert question.pk < exchange.replies[0].pk
