"""One round of MCP tool calls inside a reply (turns/tool_round.py) against the real test MCP
server: parallel calls, failures as results, big results as records, frames, the stored
exchange (docs/tools.md)."""

import json
from functools import partial

import pytest
from django.db import connection

from bots.models import Message
from memory.models import MemoryRecord
from tests.factories import BotFactory, SessionFactory, message_add
from tools import realtime as tool_realtime
from tools.mcp_sessions import ToolSessions
from turns.liveness import TurnHandle
from turns.recall_loop import _stop_asked
from turns.tool_round import tool_round_run, tool_round_store, turn_tools

pytestmark = pytest.mark.django_db
MODEL = "openai/fake-model"


def _call(name, arguments, call_id):
    raw = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": raw}}


def _round(reply, calls, **options):
    """One round of ``calls`` to the reply's bot's tools."""
    offered = turn_tools(reply.session.bot)
    return tool_round_run(
        reply=reply, calls=calls, offered=offered, model=MODEL, tool_round=1, **options
    )


@pytest.fixture
def frames(monkeypatch):
    sent = []
    monkeypatch.setattr(tool_realtime, "send_frame", lambda sid, frame: sent.append(frame))
    return sent


@pytest.fixture
def reply(owner, tool_server):
    bot = BotFactory(owner=owner, tools=["calc/*"])
    session = SessionFactory(user=owner, bot=bot)
    question = message_add(session, role="user", content="add please")
    return message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=question
    )


def test_the_bot_offers_its_tools_under_their_function_names(reply):
    offered = turn_tools(reply.session.bot, taken=("read_records",))
    assert [t.function for t in offered] == [
        "calc__add",
        "calc__echo",
        "calc__clock",
        "calc__boom",
        "calc__big",
        "calc__slow",
        "calc__report",
        "calc__note_save",
        "calc__note_read",
    ]
    assert offered[0].schema["function"]["parameters"]["required"] == ["a", "b"]


def test_a_round_runs_every_call_and_failures_are_results(reply, mcp_server, frames, settings):
    offered = turn_tools(reply.session.bot)
    calls = [
        _call("calc__add", {"a": 2, "b": 40}, "c1"),
        _call("calc__boom", {}, "c2"),
        _call("calc__nope", {}, "c3"),
        _call("calc__echo", "not json", "c4"),
        _call("calc__clock", {}, "c5"),
    ]
    outcomes = tool_round_run(reply=reply, calls=calls, offered=offered, model=MODEL, tool_round=1)
    assert [(o.call_id, o.ok, o.content) for o in outcomes] == [
        ("c1", True, "42"),
        ("c2", False, "[tool failed: Error executing tool boom: the boom tool exploded]"),
        ("c3", False, "[tool failed: no tool named calc__nope]"),
        ("c4", False, "[tool failed: the arguments are not a JSON object]"),
        ("c5", True, "2026-01-02T03:04:05Z"),
    ]
    assert sorted(name for name, _ in mcp_server.calls) == ["add", "boom", "clock"]
    started = [f for f in frames if f["type"] == "tool.started"]
    assert started[0] == {
        "type": "tool.started",
        "message_id": reply.pk,
        "call_id": "c1",
        "name": "calc__add",
        "arguments": '{"a": 2, "b": 40}',
    }
    assert [f["call_id"] for f in started] == ["c1", "c2", "c3", "c4", "c5"]
    finished = {f["call_id"]: f for f in frames if f["type"] == "tool.finished"}
    assert set(finished) == {"c1", "c2", "c3", "c4", "c5"}
    assert finished["c1"] == {
        "type": "tool.finished",
        "message_id": reply.pk,
        "call_id": "c1",
        "name": "calc__add",
        "ok": True,
        "tokens": outcomes[0].tokens,
    }
    assert finished["c2"]["ok"] is False
    # every started frame comes before any finished frame of the round
    kinds = [f["type"] for f in frames]
    assert kinds.index("tool.finished") > max(i for i, k in enumerate(kinds) if k == "tool.started")

    stored = tool_round_store(reply=reply, text="", outcomes=outcomes, model=MODEL)
    call, *results = stored
    assert (call.role, call.kind, call.seq) == ("assistant", "tool", 2)
    assert [c["id"] for c in call.tool_calls] == ["c1", "c2", "c3", "c4", "c5"]
    assert [
        (m.role, m.kind, m.seq, m.tool_call_id, m.tool_name, m.tool_ok, m.content) for m in results
    ][:2] == [
        ("tool", "tool", 3, "c1", "calc__add", True, "42"),
        (
            "tool",
            "tool",
            4,
            "c2",
            "calc__boom",
            False,
            "[tool failed: Error executing tool boom: the boom tool exploded]",
        ),
    ]
    reply.refresh_from_db()
    assert reply.seq == 8


def test_parallel_calls_run_at_once(reply, mcp_server, frames):
    """Two slow calls of 2 s each: the second starts before the first ends (the server saw both
    before either answered), so the round is concurrent."""
    offered = turn_tools(reply.session.bot)
    seen_at_first_finish = []

    original = tool_realtime.send_frame

    def spy(sid, frame):
        if frame["type"] == "tool.finished" and not seen_at_first_finish:
            seen_at_first_finish.append(len(mcp_server.calls))
        frames.append(frame)

    tool_realtime.send_frame = spy
    try:
        outcomes = tool_round_run(
            reply=reply,
            calls=[
                _call("calc__slow", {"seconds": 2}, "a"),
                _call("calc__slow", {"seconds": 2}, "b"),
            ],
            offered=offered,
            model=MODEL,
            tool_round=1,
        )
    finally:
        tool_realtime.send_frame = original
    assert [o.content for o in outcomes] == ["slept", "slept"]
    assert seen_at_first_finish == [2]


def test_a_slow_tool_times_out_as_a_failed_result(reply, mcp_server, frames, settings):
    settings.TOOL_CALL_TIMEOUT_SECONDS = 0.5
    outcomes = tool_round_run(
        reply=reply,
        calls=[_call("calc__slow", {"seconds": 30}, "s")],
        offered=turn_tools(reply.session.bot),
        model=MODEL,
        tool_round=1,
    )
    assert [(o.ok, o.content) for o in outcomes] == [
        (False, "[tool failed: the tool server calc did not answer within 0.5 s]")
    ]


def test_a_stop_ends_the_calls_still_running(reply, mcp_server, frames):
    asked = []

    def should_stop():
        asked.append(1)
        return len(asked) >= 2

    outcomes = _round(
        reply,
        [_call("calc__slow", {"seconds": 30}, "s"), _call("calc__add", {"a": 1, "b": 1}, "t")],
        should_stop=should_stop,
    )
    assert [(o.ok, o.content) for o in outcomes] == [
        (False, "[tool failed: stopped by the user]"),
        (True, "2"),
    ]


def test_a_server_that_is_down_fails_its_calls_not_the_reply(reply, tool_server, frames):
    type(tool_server).objects.filter(pk=tool_server.pk).update(url="http://127.0.0.1:9/mcp")
    outcomes = tool_round_run(
        reply=reply,
        calls=[_call("calc__add", {"a": 1, "b": 1}, "x")],
        offered=turn_tools(reply.session.bot),
        model=MODEL,
        tool_round=1,
    )
    assert [(o.ok, o.content) for o in outcomes] == [
        (False, "[tool failed: the tool server calc cannot be reached]")
    ]


def _big_result(reply):
    """One round calling ``big`` for 1,000 words: its one outcome."""
    [outcome] = tool_round_run(
        reply=reply,
        calls=[_call("calc__big", {"words": 1000}, "b")],
        offered=turn_tools(reply.session.bot),
        model=MODEL,
        tool_round=1,
    )
    return outcome


def test_a_big_result_is_kept_whole_as_a_record_and_the_model_gets_its_head(
    reply, mcp_server, frames, settings
):
    settings.TOOL_RESULT_MAX_TOKENS = 200
    outcome = _big_result(reply)
    whole = " ".join(f"w{i}" for i in range(1000))
    record = MemoryRecord.objects.get(session=reply.session, name="tool_3")
    assert record.body == whole and record.kind == "info"
    assert outcome.record == "tool_3"
    assert outcome.content.startswith("w0 w1 w2")
    assert outcome.content.endswith(
        'The whole result is the record tool_3: read_records(["tool_3"]) reads it, '
        "search_records finds any part of it.]"
    )
    assert outcome.tokens <= 200 + 8
    stored = tool_round_store(reply=reply, text="", outcomes=[outcome], model=MODEL)
    assert stored[1].seq == 3 and stored[1].content == outcome.content
    assert Message.objects.get(pk=reply.pk).seq == 4


def test_a_big_result_never_rewrites_a_record_it_did_not_make(reply, mcp_server, frames, settings):
    """``tool_3`` taken by a record this chat reads (the user's bot-wide note, and then a
    session one): the result is kept as the first free ``tool_3_<n>``; the notes are as they
    were, in their scope. It used to be rewritten in place, and a bot-wide one then carried the
    tool's output into every chat with the bot."""
    from memory.services import record_create

    settings.TOOL_RESULT_MAX_TOKENS = 200
    other = SessionFactory(user=reply.session.user, bot=reply.session.bot)
    record_create(session=other, name="tool_3", description="mine", body="keep me", scope="bot")
    record_create(session=reply.session, name="tool_3_2", description="also", body="and me")
    outcome = _big_result(reply)
    assert outcome.record == "tool_3_3"
    assert outcome.content.endswith(
        'The whole result is the record tool_3_3: read_records(["tool_3_3"]) reads it, '
        "search_records finds any part of it.]"
    )
    rows = MemoryRecord.objects.filter(name__startswith="tool_3").order_by("name")
    assert [(r.name, r.scope, r.session_id, r.body[:7]) for r in rows] == [
        ("tool_3", "bot", None, "keep me"),
        ("tool_3_2", "session", reply.session_id, "and me"),
        ("tool_3_3", "session", reply.session_id, "w0 w1 w"),
    ]


def test_a_result_with_a_nul_is_stored_without_it_and_the_reply_goes_on(reply, mcp_server, frames):
    """A server's text may hold what the database cannot store (a NUL): the result is stored
    without it, like a model's text; it failed the whole reply (PostgreSQL refused the row)."""
    calls = [_call("calc__echo", {"text": "a\u0000b"}, "e\u0000")]  # the model's call id too
    [outcome] = tool_round_run(
        reply=reply, calls=calls, offered=turn_tools(reply.session.bot), model=MODEL, tool_round=1
    )
    assert mcp_server.calls[-1] == ("echo", {"text": "a\x00b"})
    assert (outcome.ok, outcome.content) == (True, "ab")
    stored = tool_round_store(reply=reply, text="", outcomes=[outcome], model=MODEL)
    assert Message.objects.get(pk=stored[1].pk).content == "ab"
    assert (stored[1].tool_call_id, stored[0].tool_calls[0]["id"]) == ("e", "e")


def test_each_result_is_tokenised_once(reply, mcp_server, frames, settings, monkeypatch):
    """A result is counted once for the limit, its frame and its stored message (a long tool
    task counted every result twice; a big one three times), with the same counts."""
    from chat_platform.llm.tokens import count_message_tokens, count_tokens
    from turns import tool_round

    counted: list[str] = []

    def counting(text, *, model=""):
        counted.append(text)
        return count_tokens(text, model=model)

    monkeypatch.setattr(tool_round, "count_tokens", counting)
    monkeypatch.setattr(
        tool_round,
        "count_message_tokens",
        lambda text, *, model="": counting(text, model=model) + 4,
    )
    settings.TOOL_RESULT_MAX_TOKENS = 200
    calls = [
        _call("calc__report", {"step": 7, "words": 60}, "r"),
        _call("calc__big", {"words": 1000}, "b"),
    ]
    small, big = tool_round_run(
        reply=reply, calls=calls, offered=turn_tools(reply.session.bot), model=MODEL, tool_round=1
    )
    report = "Step 7 report: serial S55433. " + " ".join(f"w{i}" for i in range(60))
    whole = " ".join(f"w{i}" for i in range(1000))
    assert small.content == report and small.tokens == count_message_tokens(report, model=MODEL)
    assert big.tokens == count_message_tokens(big.content, model=MODEL)
    assert counted.count(report) == 1
    assert counted.count(whole) == 1
    assert counted.count(big.content) == 1
    finished = {f["call_id"]: f["tokens"] for f in frames if f["type"] == "tool.finished"}
    assert finished == {"r": small.tokens, "b": big.tokens}


def test_a_server_closed_to_the_owner_offers_nothing(owner, staff, mcp_server):
    from tools.services import tool_server_create

    tool_server_create(user=staff, name="secret", url=mcp_server.url)
    bot = BotFactory(owner=owner, tools=["secret/*"])
    assert turn_tools(bot) == []


def test_a_server_that_grew_offers_only_the_tools_that_fit_the_share_of_b(reply, caplog):
    """The bot was saved with a server of nine tools; the server, refreshed, now lists sixty
    large ones: every message of a small bot was refused (context_too_large, naming the system
    prompt). A turn offers the tools in order while their schemas fit in
    ``TOOL_SCHEMAS_MAX_PERCENT`` of B, and logs what it left out."""
    from chat_platform.llm.tokens import count_tools_tokens
    from tools.models import ToolServer

    bot = reply.session.bot
    bot.context_window, bot.max_output_tokens = 4000, 1000  # B 3000: 750 for the schemas
    bot.save()
    grown = [
        {
            "name": f"tool_{n}",
            "description": "Looks a thing up in the company handbook. " * 6,
            "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
        }
        for n in range(60)
    ]
    ToolServer.objects.filter(name="calc").update(tool_list=grown)

    offered = turn_tools(bot)

    assert 0 < len(offered) < 60
    assert [t.tool for t in offered] == [f"tool_{n}" for n in range(len(offered))]
    kept = count_tools_tokens([t.schema for t in offered], model=bot.model)
    more = count_tools_tokens([t.schema for t in turn_tools_all(bot)[: len(offered) + 1]])
    assert kept <= 750 < more
    [left] = [
        r
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "turn_tools_left_out"
    ]
    assert left.msg["left_out"] == 60 - len(offered)


def turn_tools_all(bot):
    from tools.offer import entry_servers, tools_offered
    from tools.queries import tool_servers_usable_named

    servers = tool_servers_usable_named(user=bot.owner, names=entry_servers(bot.tools))
    return tools_offered(bot.tools, servers)


# --- waiting without a database connection (docs/security.md, "Heavy work") --------------------
# A round borrowed a pooled connection for its whole wait and asked the database whether the
# reply was stopped every 0.25 s: ten replies waiting on one slow server took all ten of a
# worker's pooled connections, and its other replies' queries failed after the pool's 10 s.


@pytest.mark.django_db(transaction=True)
def test_a_round_holds_no_connection_and_runs_no_statement_while_its_calls_wait(
    reply, mcp_server, frames, monkeypatch, settings
):
    if not settings.DATABASES["default"].get("OPTIONS", {}).get("pool"):
        pytest.skip("the pool lends and takes back connections: PostgreSQL with its pool")
    held, statements = [], []
    run = ToolSessions.run

    def watched(self, calls, **kwargs):
        held.append(connection.connection is not None)

        def note(execute, sql, params, many, context):
            statements.append(sql)
            return execute(sql, params, many, context)

        with connection.execute_wrapper(note):
            return run(self, calls, **kwargs)

    monkeypatch.setattr(ToolSessions, "run", watched)
    handle = TurnHandle(reply.pk)
    outcomes = _round(
        reply,
        [_call("calc__slow", {"seconds": 1.5}, "s"), _call("calc__slow", {"seconds": 1}, "t")],
        should_stop=partial(_stop_asked, reply, handle),
    )
    assert [(o.ok, o.content) for o in outcomes] == [(True, "slept"), (True, "slept")]
    # Before: [True] and ~10 reads of the reply's stop flag during the 1.5 s.
    assert held == [False]
    stop_reads = [s for s in statements if "stop_requested" in s]
    assert stop_reads == []


def test_a_stop_the_watcher_saw_ends_the_calls(reply, mcp_server, frames):
    """The watcher (one per process, turns/liveness.py) reads stop requests for every turn it
    runs and sets the handle's flag: the round asks the flag, not the database."""
    handle = TurnHandle(reply.pk)
    handle.stopped.set()
    outcomes = _round(
        reply,
        [_call("calc__slow", {"seconds": 30}, "s")],
        should_stop=partial(_stop_asked, reply, handle),
    )
    assert [(o.ok, o.content) for o in outcomes] == [(False, "[tool failed: stopped by the user]")]


def test_a_round_runs_the_first_calls_and_answers_the_rest_unrun(
    reply, mcp_server, frames, settings
):
    """A round of 500 calls ran them all at once (audit: 4.9 s, 1,000 frames, 501 stored
    messages): a round runs ``TOOL_CALLS_PER_ROUND`` calls at most; the model is told of the
    rest, which never reach the server."""
    settings.TOOL_CALLS_PER_ROUND = 2
    outcomes = _round(reply, [_call("calc__add", {"a": i, "b": 1}, f"c{i}") for i in range(4)])
    too_many = "[tool failed: a round runs 2 calls at most: call it again in the next round]"
    assert [(o.call_id, o.ok, o.content) for o in outcomes] == [
        ("c0", True, "1"),
        ("c1", True, "2"),
        ("c2", False, too_many),
        ("c3", False, too_many),
    ]
    assert sorted(args["a"] for name, args in mcp_server.calls) == [0, 1]


def test_an_answer_past_the_size_cap_fails_its_call_unread(
    reply, mcp_server, frames, settings, monkeypatch
):
    """A tool's answer had no size limit: a 30 MB result was read and parsed whole (457 MB of
    the worker's memory, 6 s; audit). Past ``RESPONSE_MAX_BYTES`` it is cut off and the call
    fails; the server's other calls go on."""
    from structlog.testing import capture_logs

    from tools import mcp_client

    monkeypatch.setattr(mcp_client, "RESPONSE_MAX_BYTES", 100_000, raising=False)
    settings.TOOL_CALL_TIMEOUT_SECONDS = 20
    with capture_logs() as logs:
        outcomes = _round(
            reply,
            [_call("calc__big", {"words": 50_000}, "b"), _call("calc__add", {"a": 1, "b": 2}, "a")],
        )
    # The SDK words the cut as a closed connection; the log names the cause.
    assert [(o.ok, o.content) for o in outcomes] == [
        (False, "[tool failed: the tool server calc refused: Connection closed]"),
        (True, "3"),
    ]
    assert [e["server"] for e in logs if e["event"] == "tool_server_answer_too_large"] == ["calc"]
