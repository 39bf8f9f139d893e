"""What one step of a tool task costs in SQL statements, counted on the reply's thread: a
100-step task makes a hundred of them (docs/performance.md, "The tool task, seventh pass")."""

import json

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from bots.transitions import session_context_add
from tests.built import built_reads
from tests.factories import SessionFactory, message_add
from tests.fakeopenai import Reply
from tools import realtime as tool_realtime
from turns import turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_stop_polls")]


@pytest.fixture(autouse=True)
def _quiet_frames(monkeypatch):
    monkeypatch.setattr(tool_realtime, "send_frame", lambda sid, frame: None)


def _with_tools(bot, tools):
    """The fake provider's bot (``fake_bot``) offering ``tools`` of the test's MCP server."""
    bot.tools = tools
    bot.save(update_fields=["tools"])
    return bot


@pytest.fixture
def tool_bot(fake_bot, tool_server):
    return _with_tools(fake_bot, ["calc/add"])


def _call(name, arguments, call_id):
    return Reply(
        text="",
        tool_calls=[
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
        ],
    )


def _statements(bot, fake_openai, steps, *, calls=None):
    """The statements of one reply of ``steps`` rounds of ``calc__add`` (or of ``calls``, a
    model reply each), then "Done." (no compaction: a wide window)."""
    if calls is None:
        calls = [_call("calc__add", {"a": i, "b": 1}, f"c{i}") for i in range(steps)]
    fake_openai.script(*calls, Reply(text="Done."))
    session = SessionFactory(user=bot.owner, bot=bot)
    new = message_add(session, role="user", content="Add up.")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    with CaptureQueriesContext(connection) as queries:
        turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Done.")
    return [q["sql"] for q in queries.captured_queries]


def test_a_tool_step_stores_its_round_without_reading_the_reply_back(
    tool_bot, fake_openai, mcp_server
):
    _statements(tool_bot, fake_openai, 1)  # the first reply of a process compiles its reads
    two = _statements(tool_bot, fake_openai, 2)
    three = _statements(tool_bot, fake_openai, 3)
    # A step without compaction: the daily limit, the measure (pins and summaries, the
    # index), the history, the admission's row, the bot and its tool servers read again, and
    # the round stored (BEGIN, the seqs and totals, the later messages, the reply's move, one
    # INSERT, COMMIT). It was 16: the totals' own UPDATE, an INSERT per message, the reply's
    # seq read back.
    assert len(three) - len(two) == 13
    reads_of_seq = [
        s for s in three if s.startswith('SELECT "bots_message"."id", "bots_message"."seq" FROM')
    ]
    assert reads_of_seq == []


def test_a_tool_step_builds_few_reads_each_time(tool_bot, fake_openai, mcp_server, monkeypatch):
    _statements(tool_bot, fake_openai, 1)  # the first reply of a process compiles its reads
    with built_reads(monkeypatch) as two:
        _statements(tool_bot, fake_openai, 2)
    with built_reads(monkeypatch) as three:
        _statements(tool_bot, fake_openai, 3)
    # A step builds one read: the bot's tool servers, by name (a list: IN (…)). Compiled once
    # per process: the bot's owner, sharing and retirement before the round, and the messages
    # after the reply in the round's store (docs/performance.md, "The tool task, eighth
    # pass"); it built 3.
    assert len(three) - len(two) == 1


def test_a_slow_call_counts_the_same_statements_as_a_quick_one(
    fake_bot, fake_openai, mcp_server, tool_server
):
    """The counts above do not depend on how long a call runs: a round asks whether the reply
    was stopped each ``STOP_POLL_SECONDS`` while its calls run, and on a loaded CI a quick call
    took long enough for one such statement more (the fixture ``no_stop_polls``)."""
    bot = _with_tools(fake_bot, ["calc/add", "calc/slow"])

    def one_call(name, arguments):
        return _statements(bot, fake_openai, 1, calls=[_call(name, arguments, "c1")])

    one_call("calc__add", {"a": 1, "b": 1})  # the first reply of a process compiles its reads
    quick = one_call("calc__add", {"a": 1, "b": 1})
    slow = one_call("calc__slow", {"seconds": 0.8})

    assert len(slow) == len(quick)
    assert not [s for s in slow if '"bots_message"."stop_requested"' in s]
