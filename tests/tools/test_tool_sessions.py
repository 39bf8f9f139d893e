"""One reply, one session per tool server (docs/tools.md, "The tool loop"): the reply's rounds
and parallel calls share it; each call keeps its own deadline, the session none; a timeout or a
stop retires it (the next call opens another); a broken one is reopened once; nothing (thread,
task, HTTP client) outlives the reply."""

import json
import threading
import time

import pytest
from django.db import connection

from bots.models import Message
from bots.transitions import session_context_add
from tests import mcpserver
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tests.mcpserver import FIXED_TIME
from tools import realtime as tool_realtime
from tools.mcp_client import Call, Endpoint, tools_list
from tools.mcp_sessions import ToolSessions
from turns import turn

pytestmark = pytest.mark.django_db(transaction=True)


def _call(name, arguments, call_id):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _session_threads():
    return [t for t in threading.enumerate() if t.name.startswith("tool-sessions")]


@pytest.fixture
def tool_bot(owner, fake_openai, monkeypatch, tool_server):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    monkeypatch.setattr(tool_realtime, "send_frame", lambda sid, frame: None)
    return BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["calc/add", "calc/clock", "calc/slow"],
    )


@pytest.fixture
def made(monkeypatch):
    """Every ``ToolSessions`` a reply makes."""
    found = []
    original = ToolSessions.__init__

    def init(self):
        original(self)
        found.append(self)

    monkeypatch.setattr(ToolSessions, "__init__", init)
    return found


def _ask(bot, content):
    session = SessionFactory(user=bot.owner, bot=bot)
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return session, reply


def test_a_reply_of_three_rounds_of_two_calls_opens_one_session(
    tool_bot, fake_openai, mcp_server, made
):
    fake_openai.script(
        *(
            Reply(
                text="",
                tool_calls=[
                    _call("calc__add", {"a": r, "b": 1}, f"a{r}"),
                    _call("calc__clock", {}, f"c{r}"),
                ],
            )
            for r in range(3)
        ),
        Reply(text="Done."),
    )
    mcp_server.seen_headers.clear()
    session, reply = _ask(tool_bot, "Three rounds")
    turn.turn_run(message_id=reply.pk)
    results = Message.objects.filter(session=session, role="tool").order_by("seq")
    assert [r.content for r in results] == ["1", FIXED_TIME, "2", FIXED_TIME, "3", FIXED_TIME]
    assert len(mcp_server.calls) == 6
    assert mcp_server.sessions_opened() == 1
    [sessions] = made
    assert (sessions.opened, sessions.closed) == (1, True)
    assert all(http.is_closed for http in sessions.http_clients)
    assert _session_threads() == []


def test_two_slow_calls_of_one_round_overlap_on_one_session(mcp_server):
    endpoint = Endpoint(name="calc", url=mcp_server.url)
    calls = [Call(endpoint, "slow", {"seconds": 30}), Call(endpoint, "slow", {"seconds": 30})]
    mcp_server.seen_headers.clear()
    with ToolSessions() as sessions:
        outcomes = []
        worker = threading.Thread(
            target=lambda: outcomes.extend(sessions.run(calls, timeout=60)), daemon=True
        )
        worker.start()
        deadline = time.monotonic() + 30
        while len(mcp_server.calls) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        # Both calls reached the server before either answered (each waits 30 s or the release).
        assert [c for c, _ in mcp_server.calls] == ["slow", "slow"]
        assert outcomes == []
        mcp_server.release.set()
        worker.join(timeout=30)
    assert [(o.ok, o.text) for o in outcomes] == [(True, "slept"), (True, "slept")]
    assert (sessions.opened, mcp_server.sessions_opened()) == (1, 1)


def test_a_timed_out_call_leaves_the_session_usable(mcp_server):
    endpoint = Endpoint(name="calc", url=mcp_server.url)
    mcp_server.seen_headers.clear()
    with ToolSessions() as sessions:
        # Opened first, so the timeout falls on an open session (not on its opening).
        [echoed] = sessions.run([Call(endpoint, "echo", {"text": "open"})], timeout=30)
        [slow] = sessions.run([Call(endpoint, "slow", {"seconds": 30})], timeout=0.5)
        [added] = sessions.run([Call(endpoint, "add", {"a": 2, "b": 3})], timeout=30)
    assert (echoed.ok, echoed.text) == (True, "open")
    assert (slow.ok, slow.text) == (False, "the tool server calc did not answer within 0.5 s")
    assert (added.ok, added.text) == (True, "5")
    # The timed-out call retired its session; the next call opened another.
    assert (sessions.opened, mcp_server.sessions_opened()) == (2, 2)
    assert all(http.is_closed for http in sessions.http_clients)


def test_a_call_keeps_its_own_deadline_on_a_session_another_call_opened(mcp_server):
    endpoint = Endpoint(name="calc", url=mcp_server.url)
    tools_list(endpoint, timeout=30)  # the SDK's first use in this process is not the call's
    mcp_server.seen_headers.clear()
    with ToolSessions() as sessions:
        [added] = sessions.run([Call(endpoint, "add", {"a": 2, "b": 3})], timeout=3)
        # A tool that answers after 3.5 s, past the deadline of the call that opened the session
        # (the session had that deadline for every request: this call failed at 3 s).
        [slept] = sessions.run([Call(endpoint, "slow", {"seconds": 3.5})], timeout=30)
    assert [(o.ok, o.text) for o in (added, slept)] == [(True, "5"), (True, "slept")]
    assert (sessions.opened, mcp_server.sessions_opened()) == (1, 1)


def test_a_cancel_the_server_holds_never_holds_the_next_call(mcp_server):
    # On the older protocols (SSE here) the SDK posts a timed-out call's cancellation ahead of
    # every later message of the session; this server never answers that post.
    endpoint = Endpoint(name="calc", url=mcp_server.sse_url, transport="sse")
    with ToolSessions() as sessions:
        [first] = sessions.run([Call(endpoint, "echo", {"text": "open"})], timeout=30)
        mcp_server.hold_cancels.set()
        [slow] = sessions.run([Call(endpoint, "slow", {"seconds": 30})], timeout=1)
        deadline = time.monotonic() + 30
        while not mcp_server.cancels_held and time.monotonic() < deadline:
            time.sleep(0.02)
        [added] = sessions.run([Call(endpoint, "add", {"a": 2, "b": 3})], timeout=30)
        mcp_server.release.set()
    assert [(o.ok, o.text) for o in (first, slow, added)] == [
        (True, "open"),
        (False, "the tool server calc did not answer within 1 s"),
        (True, "5"),
    ]
    assert (mcp_server.cancels_held, sessions.opened) == (1, 2)


def test_a_stop_cancels_the_call_and_a_new_session_serves_the_next(mcp_server):
    endpoint = Endpoint(name="calc", url=mcp_server.url)
    with ToolSessions() as sessions:
        [stopped] = sessions.run(
            [Call(endpoint, "slow", {"seconds": 30})],
            timeout=60,
            should_stop=lambda: bool(mcp_server.calls),
        )
        [added] = sessions.run([Call(endpoint, "add", {"a": 1, "b": 1})], timeout=30)
    assert (stopped.ok, stopped.text) == (False, "stopped by the user")
    assert (added.ok, added.text, sessions.opened) == (True, "2", 2)
    assert all(http.is_closed for http in sessions.http_clients)
    assert _session_threads() == []


def test_a_server_down_between_rounds_fails_the_call_then_is_reopened():
    server = mcpserver.TestMCPServer().start()
    endpoint = Endpoint(name="calc", url=server.url)
    try:
        with ToolSessions() as sessions:
            [first] = sessions.run([Call(endpoint, "add", {"a": 1, "b": 1})], timeout=5)
            server.stop(wait=True)
            [down] = sessions.run([Call(endpoint, "add", {"a": 1, "b": 2})], timeout=5)
            server.start()
            [back] = sessions.run([Call(endpoint, "add", {"a": 1, "b": 3})], timeout=5)
            [again] = sessions.run([Call(endpoint, "add", {"a": 1, "b": 4})], timeout=5)
    finally:
        server.stop(wait=True)
    assert [(o.ok, o.text) for o in (first, down, back, again)] == [
        (True, "2"),
        (False, "the tool server calc cannot be reached"),
        (True, "4"),
        (True, "5"),
    ]
    # The first session, then the one opened when the server came back; the reopening tried
    # while it was down opened nothing.
    assert (sessions.opened, server.sessions_opened()) == (2, 2)
    assert all(http.is_closed for http in sessions.http_clients)


def test_stop_during_a_call_in_a_reply_closes_its_session(
    owner, tool_bot, fake_openai, mcp_server, made
):
    from turns.services.message import generation_stop

    tool_bot.tools = ["calc/slow"]
    tool_bot.save(update_fields=["tools"])
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__slow", {"seconds": 60}, "s1")]),
        Reply(text="never asked"),
    )
    session, reply = _ask(tool_bot, "Take your time")

    def run():
        try:
            turn.turn_run(message_id=reply.pk)
        finally:
            connection.close()  # the thread's own

    worker = threading.Thread(target=run)
    worker.start()
    deadline = time.monotonic() + 30
    while not mcp_server.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    generation_stop(user=owner, session_id=session.pk)
    worker.join(timeout=30)
    assert not worker.is_alive()
    reply.refresh_from_db()
    assert (reply.status, reply.finish_reason) == ("complete", "stopped")
    [sessions] = made
    assert (sessions.opened, sessions.closed) == (1, True)
    assert all(http.is_closed for http in sessions.http_clients)
    assert _session_threads() == []


def test_a_call_to_a_server_that_redirects_is_refused(mcp_server):
    endpoint = Endpoint(name="moved", url=mcp_server.redirect_url)
    mcp_server.seen_headers.clear()
    with ToolSessions() as sessions:
        outcomes = sessions.run([Call(endpoint, "add", {"a": 1, "b": 1})] * 2, timeout=5)
    assert [(o.ok, o.text) for o in outcomes] == [
        (False, "the tool server moved answered with a redirect (HTTP 307), not followed")
    ] * 2
    # Each call tried to open (a session that could not be opened is not kept); the redirect
    # answered both, the tool never ran.
    assert (sessions.opened, mcp_server.sessions_opened(), mcp_server.calls) == (0, 2, [])
    assert all(http.is_closed for http in sessions.http_clients)
