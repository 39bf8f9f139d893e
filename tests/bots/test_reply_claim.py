"""The turn's claim: ``pending -> streaming`` and everything the turn reads, in one statement."""

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.models import Bot, ChatSession, Message
from bots.transitions import reply_claim, session_context_recount
from compaction.records import prompt_version_store
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from turns import stream as turn_stream
from turns import turn
from turns.services.participants import participant_add
from turns.services.session import session_create

pytestmark = pytest.mark.django_db


def _values(instance):
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


@pytest.fixture
def exchange(owner):
    session = SessionFactory(user=owner, bot__owner=owner, bot__system_prompt="Be brief.")
    ChatSession.objects.filter(pk=session.pk).update(
        last_admission={"decision": "admit", "selected_tokens": 12}
    )
    new = message_add(
        session, role="user", content="hello", tool_calls=[{"id": "c1", "type": "function"}]
    )
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    return session, new, reply


@pytest.mark.skipif(connection.vendor != "postgresql", reason="one statement on PostgreSQL")
def test_the_claim_is_one_statement_that_loads_what_the_turn_reads(
    exchange, django_assert_num_queries
):
    session, new, reply = exchange
    with django_assert_num_queries(1):
        claimed = reply_claim(message_id=reply.pk)
    with django_assert_num_queries(0):
        loaded = (claimed, claimed.session, claimed.session.bot, claimed.reply_to)

    fresh = Message.objects.select_related("session__bot", "reply_to").get(pk=reply.pk)
    assert fresh.status == "streaming" and fresh.heartbeat_at is not None
    expected = (fresh, fresh.session, fresh.session.bot, fresh.reply_to)
    assert [type(x) for x in loaded] == [Message, ChatSession, Bot, Message]
    assert [_values(x) for x in loaded] == [_values(x) for x in expected]
    # converted as the ORM converts: JSON decoded
    assert claimed.session.last_admission == {"decision": "admit", "selected_tokens": 12}
    assert claimed.reply_to.tool_calls == [{"id": "c1", "type": "function"}]
    assert (claimed.reply_to.pk, claimed.session.bot.system_prompt) == (new.pk, "Be brief.")
    assert not claimed._state.adding and claimed._state.db == "default"


@pytest.mark.skipif(connection.vendor != "postgresql", reason="one statement on PostgreSQL")
def test_the_claim_s_statement_is_built_once_per_process(exchange, monkeypatch):
    """Django builds the claim's UPDATE once, not on every turn (chat_platform/dbwrite.py,
    ``CompiledStatement``); each claim still stamps its own time and claims only its reply."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    session, new, reply = exchange
    other = message_add(session, role="assistant", content="", status="pending", token_count=0)
    reply_claim(message_id=other.pk + 1000)  # built here, if not yet: claims nothing
    builds = []
    real_as_sql = SQLUpdateCompiler.as_sql
    monkeypatch.setattr(
        SQLUpdateCompiler, "as_sql", lambda self: builds.append(1) or real_as_sql(self)
    )

    claimed = reply_claim(message_id=reply.pk)

    assert builds == []
    fresh = Message.objects.get(pk=reply.pk)
    assert (claimed.pk, claimed.status, claimed.heartbeat_at) == (
        reply.pk,
        "streaming",
        fresh.heartbeat_at,
    )
    assert fresh.heartbeat_at > reply.updated_at
    # the other pending reply waits: an earlier reply of its session is unfinished
    assert reply_claim(message_id=other.pk) is None
    assert Message.objects.get(pk=other.pk).status == "pending"


def test_a_reply_that_is_not_pending_is_not_claimed_and_not_changed(exchange):
    _, _, reply = exchange
    Message.objects.filter(pk=reply.pk).update(status="complete", content="done")
    before = _values(Message.objects.get(pk=reply.pk))

    assert reply_claim(message_id=reply.pk) is None
    assert reply_claim(message_id=reply.pk + 1000) is None
    assert _values(Message.objects.get(pk=reply.pk)) == before


def test_a_claimed_reply_cannot_be_claimed_twice(exchange):
    _, _, reply = exchange
    assert reply_claim(message_id=reply.pk).status == "streaming"
    assert reply_claim(message_id=reply.pk) is None


def test_a_reply_without_a_user_message_is_claimed_with_none(owner, django_assert_num_queries):
    session = SessionFactory(user=owner, bot__owner=owner)
    reply = message_add(session, role="assistant", content="", status="pending", token_count=0)

    claimed = reply_claim(message_id=reply.pk)

    with django_assert_num_queries(0):
        assert claimed.reply_to is None
    assert (claimed.pk, claimed.session.pk, claimed.status) == (reply.pk, session.pk, "streaming")


@pytest.mark.skipif(connection.vendor != "postgresql", reason="the statements PostgreSQL is sent")
@pytest.mark.django_db(transaction=True)  # the prompt version is known once committed
def test_a_turn_on_the_plain_orm_path_costs_its_own_fixed_set_of_statements(
    fake_session, fake_openai, monkeypatch, settings
):
    """The same turn with ``DB_FAST_PATHS`` off (issue 17, item 6: the statement counts through
    both paths): the claim and the finish become ORM reads and conditional updates, nothing is
    hand-written, and the count is as fixed as the fast path's."""
    settings.DB_FAST_PATHS = False
    before_the_call, queries = _one_bot_turn_counted(fake_session, fake_openai, monkeypatch)

    sqls = [q["sql"] for q in queries.captured_queries]
    assert not any(sql.startswith("WITH") for sql in sqls)
    assert before_the_call == [6]  # the fast path's 5, with the claim in two statements
    assert [sql.split()[0] for sql in sqls] == [
        "UPDATE",  # the claim: pending -> streaming, conditional
        "SELECT",  # ... and the reply with its session, bot and user message
        "SELECT",  # the user's daily token limit
        "(SELECT",  # pins and summaries
        "SELECT",  # memory index
        "SELECT",  # history with its text
        "UPDATE",  # last_admission, once the provider answered
        # the finish: conditional write of the reply, re-read, then the running totals, atomic
        *["BEGIN", "SAVEPOINT", "SELECT", "UPDATE", "SELECT", "RELEASE", "UPDATE", "COMMIT"],
        "SELECT",  # the reply and its message, for search
        "INSERT",  # the context record
        *["SELECT", "(SELECT", "SELECT", "SELECT"],  # the context meter
        "SELECT",  # a reply queued behind this one, to hand over
    ]
    assert "connections_userquota" in sqls[2] and '"content"' in sqls[5]
    assert sqls[16].startswith('INSERT INTO "compaction_contextrecord"')


@pytest.mark.skipif(connection.vendor != "postgresql", reason="one-statement claim and finish")
@pytest.mark.django_db(transaction=True)
def test_a_turn_costs_a_fixed_set_of_statements(fake_session, fake_openai, monkeypatch):
    """Five statements before the provider is called (the claim with its reads, the user's daily
    token limit, pins with summaries, the memory index, the history that fits with its text),
    the admission record
    once the provider answered, one to finish, the context record; then the context meter's
    reads."""
    before_the_call, queries = _one_bot_turn_counted(fake_session, fake_openai, monkeypatch)

    assert before_the_call == [5]
    sqls = [q["sql"] for q in queries.captured_queries]
    assert [sql.split()[0] for sql in sqls] == [
        "WITH",  # claim + reply, session, bot, user message
        "SELECT",  # the user's daily token limit (none: nothing reserved)
        "(SELECT",  # pins and summaries
        "SELECT",  # memory index
        "SELECT",  # history with its text
        "UPDATE",  # last_admission, once the provider answered
        "WITH",  # finish + running totals
        "SELECT",  # the reply and its message, for search (no term here: nothing to insert)
        "INSERT",  # the context record: what the model saw (docs/context-records.md)
        # the context meter, on the turn's own session: its running totals re-read, pins and
        # summaries, memory index, cool-down
        *["SELECT", "(SELECT", "SELECT", "SELECT"],
        "SELECT",  # a reply queued behind this one, to hand over
    ]
    assert "connections_userquota" in sqls[1]
    assert "memory_memoryrecord" in sqls[3] and '"content"' in sqls[4]
    assert sqls[8].startswith('INSERT INTO "compaction_contextrecord"')


@pytest.mark.skipif(connection.vendor != "postgresql", reason="one-statement claim and finish")
@pytest.mark.django_db(transaction=True)
def test_a_room_reply_costs_a_fixed_set_of_statements(owner, fake_bot, fake_openai, monkeypatch):
    """A room reply of a participant that is not the room's default bot, in steady state (its
    seat's row exists): the room's participants and user name are read once for the turn
    (``bots.queries.room_snapshot_take``) and reused by both context measures; the seat's row
    is read once per measure, with its totals, last admission and cool-down; the admission is
    one UPDATE of that row; the meter reuses the turn's seat. Nothing grows with the number of
    participants."""

    critic = BotFactory(
        owner=owner,
        name="Critic",
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=fake_bot.api_key_env,
        system_prompt="You are Critic.",
    )
    third = BotFactory(owner=owner, name="Third", model="openai/fake-model")
    room = session_create(user=owner, bot_id=fake_bot.pk)
    participant_add(user=owner, session_id=room.pk, bot_id=critic.pk)
    participant_add(user=owner, session_id=room.pk, bot_id=third.pk)
    room.refresh_from_db()
    assert room.is_room

    def exchange(text):
        new = message_add(room, role="user", content=text)
        reply = message_add(
            room,
            role="assistant",
            content="",
            status="pending",
            token_count=0,
            reply_to=new,
            bot=critic,
            prompted_by=new,
        )
        session_context_recount(session_id=room.pk)
        return reply

    message_add(room, role="assistant", content="The default bot's answer.", bot=fake_bot)
    fake_openai.script(Reply(text="First."), Reply(text="Done."))
    turn.turn_run(message_id=exchange("earlier").pk)  # the seat's first turn creates its row
    reply = exchange("now")
    prompt_version_store(bot_id=critic.pk, text=critic.system_prompt)
    before_the_call, queries = _turn_counted(monkeypatch, reply)

    assert Message.objects.get(pk=reply.pk).content == "Done."
    sent = fake_openai.requests[-1]["messages"]
    assert [(m["role"], m.get("name")) for m in sent][-4:] == [
        ("user", fake_bot.slug),  # the default bot's answer, as the critic sees it
        ("user", owner.username),
        ("assistant", None),  # the critic's own first reply
        ("user", owner.username),
    ]
    assert before_the_call == [7]
    sqls = [q["sql"] for q in queries.captured_queries]
    assert [sql.split()[0] for sql in sqls] == [
        "WITH",  # claim + reply, session, default bot, user message
        "SELECT",  # the room's participants with their bots and the user's name, once
        "SELECT",  # the user's daily token limit
        "SELECT",  # the seat's row: totals (with last admission and cool-down)
        "(SELECT",  # pins, this bot's summaries and the seat's coverage
        "SELECT",  # memory index
        "SELECT",  # history with its text
        "UPDATE",  # the seat's last_admission, once the provider answered
        "WITH",  # finish + running totals (its frame names the turn's bot: no read)
        "SELECT",  # the reply and its message, for search (no term here: nothing to insert)
        "INSERT",  # the context record
        # the context meter, on the turn's seat: running totals, the seat's row, pins and
        # summaries, memory index
        *["SELECT", "SELECT", "(SELECT", "SELECT"],
        "SELECT",  # a reply queued behind this one, to hand over
    ]
    assert "bots_sessionparticipant" in sqls[1] and "auth_user" in sqls[1]
    assert sum("bots_sessionparticipant" in sql for sql in sqls) == 1
    assert not any(sql.startswith('SELECT "auth_user"') for sql in sqls)  # the name came along
    # the room's view of the seat twice, its last admission, and its coverage read in the two
    # pins-and-summaries statements (a branch of their UNION, no statement of its own)
    assert sum("compaction_seatstate" in sql for sql in sqls) == 5
    assert sum(sql.startswith("(SELECT") and "compaction_seatstate" in sql for sql in sqls) == 2
    assert sqls[7].startswith('UPDATE "compaction_seatstate" SET "last_admission"')
    assert not any(sql.startswith('SELECT "bots_bot"') for sql in sqls)
    assert not any(
        sql.startswith('SELECT "bots_chatsession"."id", "bots_chatsession"."user_id"')
        for sql in sqls
    )


def _one_bot_turn_counted(fake_session, fake_openai, monkeypatch):
    """Two stored messages, a new one and its pending reply answered "Done.": the turn run
    through ``_turn_counted``."""
    message_add(fake_session, role="user", content="earlier")
    message_add(fake_session, role="assistant", content="answer")
    new = message_add(fake_session, role="user", content="now")
    reply = message_add(
        fake_session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_recount(session_id=fake_session.pk)
    # The bot's prompt version is stored when the prompt is saved (``bot_update``), not by a turn.
    prompt_version_store(bot_id=fake_session.bot_id, text=fake_session.bot.system_prompt)
    fake_openai.script(Reply(text="Done."))
    before_the_call, queries = _turn_counted(monkeypatch, reply)
    assert Message.objects.get(pk=reply.pk).content == "Done."
    return before_the_call, queries


def _turn_counted(monkeypatch, reply):
    """Run the turn of ``reply`` capturing its statements; (statements issued before each model
    call, the capture). No partial-text checkpoint: on a loaded machine the stream can outlast
    its interval."""
    before_the_call: list[int] = []
    real_stream = turn_stream.gateway.stream

    def stream(*args, **kwargs):
        before_the_call.append(len(queries.captured_queries))
        return real_stream(*args, **kwargs)

    monkeypatch.setattr(turn_stream.gateway, "stream", stream)
    monkeypatch.setattr(turn_stream, "CHECKPOINT_SECONDS", 3600)
    with CaptureQueriesContext(connection) as queries:
        turn.turn_run(message_id=reply.pk)
    return before_the_call, queries


@pytest.mark.skipif(connection.vendor != "postgresql", reason="compiled on PostgreSQL")
def test_a_checkpoint_s_statement_is_built_once_per_process(
    exchange, monkeypatch, django_assert_num_queries
):
    """The partial text's checkpoint (twice a second of a stream) runs a statement Django built
    once per process; it still saves only a streaming reply's text, with its own time."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    from bots.transitions import reply_checkpoint

    session, new, reply = exchange
    reply_claim(message_id=reply.pk)
    reply_checkpoint(message_id=new.pk, content="built here, if not yet")  # not streaming
    builds = []
    real_as_sql = SQLUpdateCompiler.as_sql
    monkeypatch.setattr(
        SQLUpdateCompiler, "as_sql", lambda self: builds.append(1) or real_as_sql(self)
    )
    before = Message.objects.get(pk=reply.pk).updated_at

    with django_assert_num_queries(1):
        reply_checkpoint(message_id=reply.pk, content="Once upon")
    with django_assert_num_queries(1):
        reply_checkpoint(message_id=new.pk, content="not a streaming reply")

    assert builds == []
    fresh = Message.objects.get(pk=reply.pk)
    assert (fresh.content, fresh.status) == ("Once upon", "streaming")
    assert fresh.updated_at > before
    assert Message.objects.get(pk=new.pk).content == "hello"
    Message.objects.filter(pk=reply.pk).update(status="complete")
    reply_checkpoint(message_id=reply.pk, content="too late")
    assert Message.objects.get(pk=reply.pk).content == "Once upon"
