"""The tool loop in the turn (docs/tools.md): the fake provider scripts tool calls, the real
test MCP server answers them; the transcript, the requests, the frames and the limits."""

import json

import pytest

from bots.models import Message
from bots.transitions import session_context_add
from compaction.models import CompactionEvent
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tools import realtime as tool_realtime
from turns import turn

pytestmark = pytest.mark.django_db(transaction=True)


def _call(name, arguments, call_id):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.fixture
def tool_bot(owner, fake_openai, monkeypatch, tool_server):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    return BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["calc/add", "calc/boom", "calc/clock"],
    )


@pytest.fixture
def frames(monkeypatch):
    sent = []
    monkeypatch.setattr(tool_realtime, "send_frame", lambda sid, frame: sent.append(frame))
    return sent


def _ask(bot, content):
    session = SessionFactory(user=bot.owner, bot=bot)
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return session, reply


def test_the_model_calls_a_tool_and_answers_with_its_result(
    tool_bot, fake_openai, mcp_server, frames, owner_client
):
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__add", {"a": 2, "b": 40}, "call_1")]),
        Reply(text="The sum is 42."),
    )
    session, reply = _ask(tool_bot, "What is 2 + 40?")

    turn.turn_run(message_id=reply.pk)

    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "kind", "content", "tool_call_id", "tool_name", "tool_ok")
    )
    assert rows == [
        (1, "user", "chat", "What is 2 + 40?", "", "", None),
        (2, "assistant", "tool", "", "", "", None),
        (3, "tool", "tool", "42", "call_1", "calc__add", True),
        (4, "assistant", "chat", "The sum is 42.", "", "", None),
    ]
    call = Message.objects.get(session=session, seq=2)
    assert call.tool_calls == [
        {
            "id": "call_1",
            "type": "function",
            "function": {"name": "calc__add", "arguments": '{"a": 2, "b": 40}'},
        }
    ]
    first, second = fake_openai.requests
    names = [t["function"]["name"] for t in first["tools"]]
    assert names[-3:] == ["calc__add", "calc__boom", "calc__clock"]
    assert second["messages"][-2]["tool_calls"][0]["id"] == "call_1"
    assert second["messages"][-1] == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    assert [(f["type"], f["call_id"], f["name"]) for f in frames] == [
        ("tool.started", "call_1", "calc__add"),
        ("tool.finished", "call_1", "calc__add"),
    ]
    assert frames[1]["ok"] is True and frames[1]["message_id"] == reply.pk
    listed = owner_client.get(f"/api/v1/sessions/{session.pk}/messages/").json()
    result = next(m for m in listed if m["seq"] == 3)
    assert (result["kind"], result["role"], result["ok"], result["name"]) == (
        "tool",
        "tool",
        True,
        "calc__add",
    )
    assert result["tool_call_id"] == "call_1"


def test_a_failing_tool_is_a_result_and_the_reply_completes(
    tool_bot, fake_openai, mcp_server, frames
):
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__boom", {}, "b1")]),
        Reply(text="The tool failed, sorry."),
    )
    session, reply = _ask(tool_bot, "Blow up")
    turn.turn_run(message_id=reply.pk)
    result = Message.objects.get(session=session, seq=3)
    assert (result.tool_ok, result.content) == (
        False,
        "[tool failed: Error executing tool boom: the boom tool exploded]",
    )
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "The tool failed, sorry.")


@pytest.mark.parametrize("nested", ['{"a":' * 3000 + "1" + "}" * 3000, "[" * 5000 + "]" * 5000])
def test_arguments_nested_past_any_reason_are_a_failed_call_not_a_failed_reply(
    tool_bot, fake_openai, mcp_server, frames, nested
):
    """Arguments so deeply nested that parsing them runs out of stack (``RecursionError``, not
    a ``ValueError``) are arguments that are not a JSON object: the tool is not called."""
    call = {"id": "d1", "type": "function", "function": {"name": "calc__add", "arguments": nested}}
    fake_openai.script(Reply(text="", tool_calls=[call]), Reply(text="Those were not arguments."))
    session, reply = _ask(tool_bot, "deep")
    turn.turn_run(message_id=reply.pk)
    result = Message.objects.get(session=session, seq=3)
    assert (result.tool_ok, result.content) == (
        False,
        "[tool failed: the arguments are not a JSON object]",
    )
    assert mcp_server.calls == []
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Those were not arguments.")


def test_a_long_result_in_a_small_window_reaches_the_model_as_a_head_that_fits(
    tool_bot, fake_openai, mcp_server, frames
):
    """B 4,000: a 4,000-token head (``TOOL_RESULT_MAX_TOKENS``) left the round no room beside
    the rest of the call, the whole round was left out, and the model saw neither its call nor
    its result. The head is the round's share of half of B (2,000), the rest a record."""
    tool_bot.tools = ["calc/big"]
    tool_bot.context_window, tool_bot.max_output_tokens = 5000, 1000
    tool_bot.save()
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__big", {"words": 6000}, "c1")]),
        Reply(text="Read its head."),
    )
    session, reply = _ask(tool_bot, "Fetch the big list.")
    turn.turn_run(message_id=reply.pk)

    sent = fake_openai.requests[1]["messages"]
    [result] = [m for m in sent if m["role"] == "tool"]
    assert result["tool_call_id"] == "c1"
    assert "the result is" in result["content"] and "read_records" in result["content"]
    stored = Message.objects.get(session=session, role="tool")
    assert stored.token_count <= 2000
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Read its head.")


def test_after_tool_max_rounds_the_model_must_answer(
    tool_bot, fake_openai, mcp_server, frames, settings
):
    settings.TOOL_MAX_ROUNDS = 2
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__clock", {}, "r1")]),
        Reply(text="", tool_calls=[_call("calc__clock", {}, "r2")]),
        Reply(text="Done."),
    )
    session, reply = _ask(tool_bot, "Time, twice")
    turn.turn_run(message_id=reply.pk)
    requests = fake_openai.requests
    assert len(requests) == 3
    offered = [[t["function"]["name"] for t in r.get("tools") or []] for r in requests]
    assert "calc__clock" in offered[0] and "calc__clock" in offered[1]
    assert "calc__clock" not in offered[2]
    reply.refresh_from_db()
    assert (reply.content, reply.seq) == ("Done.", 6)
    assert [c for c, _ in mcp_server.calls] == ["clock", "clock"]


def test_a_server_that_is_down_never_fails_the_reply(tool_bot, tool_server, fake_openai, frames):
    type(tool_server).objects.filter(pk=tool_server.pk).update(url="http://127.0.0.1:9/mcp")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__add", {"a": 1, "b": 1}, "d1")]),
        Reply(text="The calculator is down."),
    )
    session, reply = _ask(tool_bot, "1+1?")
    turn.turn_run(message_id=reply.pk)
    result = Message.objects.get(session=session, seq=3)
    assert result.content == "[tool failed: the tool server calc cannot be reached]"
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "The calculator is down.")


def test_stop_during_a_tool_call_ends_the_reply_stopped(
    owner, tool_bot, fake_openai, mcp_server, frames
):
    import threading
    import time

    from turns.services.message import generation_stop

    tool_bot.tools = ["calc/slow"]
    tool_bot.save(update_fields=["tools"])
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__slow", {"seconds": 60}, "s1")]),
        Reply(text="never asked"),
    )
    session, reply = _ask(tool_bot, "Take your time")
    worker = threading.Thread(target=turn.turn_run, kwargs={"message_id": reply.pk})
    worker.start()
    deadline = time.monotonic() + 30
    while not mcp_server.calls and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [c for c, _ in mcp_server.calls] == ["slow"]
    generation_stop(user=owner, session_id=session.pk)
    worker.join(timeout=30)
    assert not worker.is_alive()
    reply.refresh_from_db()
    assert (reply.status, reply.finish_reason, reply.content) == ("complete", "stopped", "")
    result = Message.objects.get(session=session, seq=3)
    assert (result.tool_ok, result.content) == (False, "[tool failed: stopped by the user]")
    assert len(fake_openai.requests) == 1


def test_a_server_closed_to_the_owner_during_a_reply_is_not_called_again(
    tool_bot, tool_server, fake_openai, mcp_server, monkeypatch
):
    """Staff close the server after the first round: the rounds that follow are told it is no
    longer available, and it is not called again (the offer was read as the reply began)."""
    from tools.models import ToolServer

    def closed_after_the_first(session_id, frame):
        if frame["type"] == "tool.finished" and frame["call_id"] == "r1":
            ToolServer.objects.filter(pk=tool_server.pk).update(public=False)

    monkeypatch.setattr(tool_realtime, "send_frame", closed_after_the_first)
    fake_openai.script(
        *(
            Reply(text="", tool_calls=[_call("calc__add", {"a": n, "b": n}, f"r{n}")])
            for n in (1, 2, 3)
        ),
        Reply(text="Done."),
    )
    session, reply = _ask(tool_bot, "Add three times")
    turn.turn_run(message_id=reply.pk)

    assert mcp_server.calls == [("add", {"a": 1, "b": 1})]
    results = Message.objects.filter(session=session, role="tool").order_by("seq")
    assert [(m.tool_ok, m.content) for m in results] == [
        (True, "2"),
        (False, "[tool failed: the tool server calc is no longer available to this bot]"),
        (False, "[tool failed: the tool server calc is no longer available to this bot]"),
    ]
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Done.")


def test_tools_of_a_server_closed_to_the_owner_are_never_offered(
    owner, staff, fake_openai, monkeypatch, mcp_server, frames
):
    from tools.services import tool_server_create, tool_server_tools_refresh

    server = tool_server_create(user=staff, name="secret", url=mcp_server.url)
    tool_server_tools_refresh(user=staff, server_id=server.pk)
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["secret/*"],  # written past the checks, as if the server was closed later
    )
    fake_openai.script(
        Reply(text="", tool_calls=[_call("secret__add", {"a": 1, "b": 1}, "x1")]),
        Reply(text="ok"),
    )
    session, reply = _ask(bot, "add")
    turn.turn_run(message_id=reply.pk)
    first = fake_openai.requests[0]
    assert not any("secret" in t["function"]["name"] for t in first.get("tools") or [])
    assert mcp_server.calls == []


def test_without_compaction_rounds_that_outgrow_b_are_left_out_oldest_first(
    owner, fake_openai, monkeypatch, tool_server, mcp_server, frames, settings
):
    from chat_platform.llm.tokens import count_message_tokens, count_tools_tokens
    from compaction.measure import bot_budget

    settings.TOOL_RESULT_MAX_TOKENS = 100_000
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["calc/big"],
        context_window=3000,
        max_output_tokens=500,
        memory_index_size=0,
        # Compaction off: nothing can be compacted inside the reply (docs/tools.md), so the
        # oldest rounds are left out of a call rather than exceeding B.
        compaction_enabled=False,
    )
    budget = bot_budget(bot).budget
    fake_openai.script(
        *[
            Reply(text="", tool_calls=[_call("calc__big", {"words": 500}, f"b{i}")])
            for i in (1, 2, 3)
        ],
        Reply(text="Read them all."),
    )
    session, reply = _ask(bot, "Read three long pages")
    turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Read them all.")

    def sent(request):
        messages = sum(
            count_message_tokens(
                (m.get("content") or "")
                + (json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""),
                model="openai/fake-model",
            )
            for m in request["messages"]
        )
        return messages + count_tools_tokens(request.get("tools") or [], model="openai/fake-model")

    requests = fake_openai.requests
    assert len(requests) == 4
    assert all(sent(r) <= budget for r in requests)
    last_ids = [m.get("tool_call_id") for m in requests[-1]["messages"] if m["role"] == "tool"]
    assert "b1" not in last_ids and "b3" in last_ids
    # Every round stays in the transcript.
    assert Message.objects.filter(session=session, role="tool").count() == 3
    assert not CompactionEvent.objects.filter(session=session).exists()


def test_the_built_in_model_calls_a_tool_the_user_names_and_quotes_its_result(
    owner, tool_server, mcp_server, frames
):
    """``builtin/recall`` understands no request: a message that starts with a tool's name calls
    it (docs/models.md, "A tool by name"), so the demo bot shows tools with no provider."""
    bot = BotFactory(owner=owner, model="builtin/recall", tools=["calc/*"])
    session, reply = _ask(bot, "add 2 40")

    turn.turn_run(message_id=reply.pk)

    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "kind", "content", "tool_name", "tool_ok", "status")
    )
    assert rows == [
        (1, "user", "chat", "add 2 40", "", None, "complete"),
        (2, "assistant", "tool", "", "", None, "complete"),
        (3, "tool", "tool", "42", "calc__add", True, "complete"),
        (4, "assistant", "chat", "add returned:\n> 42", "", None, "complete"),
    ]
    call = Message.objects.get(session=session, seq=2).tool_calls[0]["function"]
    assert (call["name"], json.loads(call["arguments"])) == ("calc__add", {"a": 2, "b": 40})
    assert [(f["type"], f["name"]) for f in frames] == [
        ("tool.started", "calc__add"),
        ("tool.finished", "calc__add"),
    ]


def test_the_built_in_model_says_a_named_tool_failed(owner, tool_server, mcp_server, frames):
    bot = BotFactory(owner=owner, model="builtin/recall", tools=["calc/*"])
    session, reply = _ask(bot, "Boom")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    result = Message.objects.get(session=session, role="tool")
    assert result.tool_ok is False and result.content.startswith("[tool failed: ")
    reason = result.content[len("[tool failed: ") : -1]
    assert (reply.status, reply.content) == ("complete", f"boom failed: {reason}")


def test_a_call_to_a_name_nobody_offers_fails_as_a_tool_result(
    tool_bot, fake_openai, mcp_server, frames
):
    """Models shorten names (``add`` for ``calc__add``): recall answered such a call with
    "[unknown tool: add; the tools are read_records, search_records and save_record]", as if
    the bot had no other tools, and stored its arguments as {}."""
    fake_openai.script(
        Reply(text="", tool_calls=[_call("add", {"a": 2, "b": 40}, "call_1")]),
        Reply(text="I will use calc__add next time."),
    )
    session, reply = _ask(tool_bot, "What is 2 + 40?")

    turn.turn_run(message_id=reply.pk)

    call = Message.objects.get(session=session, seq=2)
    assert call.tool_calls[0]["function"] == {"name": "add", "arguments": '{"a": 2, "b": 40}'}
    result = Message.objects.get(session=session, seq=3)
    assert (result.role, result.content, result.tool_name, result.tool_ok) == (
        "tool",
        "[tool failed: no tool named add]",
        "add",
        False,
    )
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "I will use calc__add next time.")


def test_a_tool_loop_stops_at_a_spent_daily_limit_and_says_so(
    tool_bot, fake_openai, mcp_server, frames, owner
):
    """Each call of the loop sends the context again: what the calls so far spent is counted
    before the next one, and once the limit is spent the next call is refused
    (``quota_exceeded``), the rounds already run kept. Twenty calls ran past a limit of 5,000
    before, 21,210 tokens in one request."""
    from connections.models import TokenCounter, UserQuota

    UserQuota.objects.create(user=owner, daily_token_limit=2_500)
    spend = {"prompt_tokens": 990, "completion_tokens": 10, "total_tokens": 1_000}
    fake_openai.script(
        *[
            Reply(text="", tool_calls=[_call("calc__clock", {}, f"r{i}")], usage=spend)
            for i in range(6)
        ],
        Reply(text="Done.", usage=spend),
    )
    session, reply = _ask(tool_bot, "Time, again and again")
    turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "quota_exceeded")
    assert len(fake_openai.requests) == 3  # 1,000 and 2,000 counted: the third spends it
    assert [c for c, _ in mcp_server.calls] == ["clock"] * 3
    counter = TokenCounter.objects.get(subject=f"user:{owner.pk}")
    assert (counter.used, counter.reserved) == (3_000, 0)
    stored = Message.objects.filter(session=session, kind="tool").count()
    assert stored == 6  # three rounds: a call and its result each


def test_a_replys_usage_is_every_call_of_its_tool_loop(tool_bot, fake_openai, mcp_server, frames):
    """The reply's prompt and completion tokens add up every call of its loop (they were the
    last call's alone: a twentieth of a long tool task on the usage page and in /v1's usage)."""
    spend = {"prompt_tokens": 900, "completion_tokens": 10, "total_tokens": 910}
    fake_openai.script(
        Reply(text="", tool_calls=[_call("calc__clock", {}, "u1")], usage=spend),
        Reply(text="", tool_calls=[_call("calc__clock", {}, "u2")], usage=spend),
        Reply(text="Twice.", usage={"prompt_tokens": 950, "completion_tokens": 5}),
    )
    session, reply = _ask(tool_bot, "Time, twice")
    turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.content, reply.prompt_tokens, reply.completion_tokens) == ("Twice.", 2_750, 25)
