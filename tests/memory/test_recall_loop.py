"""The index in the context and the recall loop of the turn (docs/compaction.md, §10), through a
real turn against the local fake OpenAI-compatible server (tool calls and the JSON protocol)."""

import json

import pytest

from bots.models import Message
from bots.transitions import session_context_add, session_context_recount
from chat_platform.llm.tokens import count_message_tokens
from compaction.pipeline import bot_budget
from memory import services
from memory.models import MemoryRecord, RecallEvent
from memory.queries import memory_index_lines
from memory.recall import INDEX_HEADER, INDEX_HELP
from tests.factories import SessionFactory, message_add
from tests.fakeopenai import Reply
from turns import turn

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai/fake-model"


def _turn(session, content):
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return new, reply


def _call(name, arguments, call_id="call_1"):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _index_block(request):
    blocks = [
        m["content"]
        for m in request["messages"]
        if m["role"] == "system" and m["content"].startswith(INDEX_HEADER)
    ]
    assert len(blocks) <= 1
    return blocks[0] if blocks else None


def _save(session, name, body, *, description=None, scope="session"):
    return services.record_save(
        session=session,
        name=name,
        description=description or f"About {name.replace('_', ' ')}",
        body=body,
        scope=scope,
    )


def _sent_tokens(request):
    return sum(
        count_message_tokens(
            (m.get("content") or "") + (json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""),
            model=MODEL,
        )
        for m in request["messages"]
    )


# --- the index block ------------------------------------------------------------------------


def test_index_is_a_system_block_after_summaries_and_before_history(fake_session, fake_openai):
    _save(fake_session, "locker_code", "My locker code is 4471.", description="Locker code")
    _save(fake_session, "sister", "My sister plays the cello.", description="Sister's instrument")
    MemoryRecord.objects.create(
        session=fake_session,
        name="snapshot_1_2",
        kind="snapshot",
        description="Pre-compaction snapshot of messages 1–2: garden",
        body="[1] user: the garden",
        first_seq=1,
        last_seq=2,
        indexed=True,
    )
    MemoryRecord.objects.create(
        session=fake_session,
        name="snapshot_3_4",
        kind="snapshot",
        description="Pre-compaction snapshot of messages 3–4: failed",
        body="[3] user: nothing",
        first_seq=3,
        last_seq=4,
        indexed=False,  # its compaction failed: not listed
    )
    message_add(fake_session, role="user", content="earlier")
    session_context_recount(session_id=fake_session.pk)
    _, reply = _turn(fake_session, "hello")
    fake_openai.script(Reply(text="Hi."))

    turn.turn_run(message_id=reply.pk)

    request = fake_openai.requests[0]
    roles = [(m["role"], m["content"][:20]) for m in request["messages"]]
    assert roles == [
        ("system", "You are a test bot."),
        ("system", INDEX_HEADER[:20]),
        ("user", "earlier"),
        ("user", "hello"),
    ]
    assert _index_block(request) == (
        f"{INDEX_HEADER}\n{INDEX_HELP}\n"
        "- snapshot_1_2 (snapshot, messages 1–2): Pre-compaction snapshot of messages 1–2: garden\n"
        "- sister (info): Sister's instrument\n"
        "- locker_code (info): Locker code"
    )
    assert [t["function"]["name"] for t in request["tools"]] == [
        "read_records",
        "search_records",
        "save_record",
    ]


def test_index_size_limits_lines_newest_first_and_counts_in_pressure(
    fake_session, fake_openai, owner_client
):
    for i in range(5):
        _save(fake_session, f"fact_{i}", f"Fact number {i}.")
    fake_session.bot.memory_index_size = 2
    fake_session.bot.save()
    _, reply = _turn(fake_session, "hello")
    fake_openai.script(Reply(text="Hi."))

    turn.turn_run(message_id=reply.pk)

    block = _index_block(fake_openai.requests[0])
    assert block.splitlines()[2:] == [
        "- fact_4 (info): About fact 4",
        "- fact_3 (info): About fact 3",
    ]
    report = owner_client.get(f"/api/v1/sessions/{fake_session.pk}/context/").json()
    # what admission reserves for the block: its header and overhead plus each line
    lines = memory_index_lines(session=fake_session, limit=2)
    header = count_message_tokens(f"{INDEX_HEADER}\n{INDEX_HELP}\n", model=MODEL)
    assert report["parts"]["memory_index"] == header + sum(line.tokens for line in lines)
    assert report["parts"]["memory_index"] >= count_message_tokens(block, model=MODEL)


def test_index_is_shortened_from_the_oldest_line_under_pressure(fake_session, fake_openai):
    for i in range(30):
        _save(fake_session, f"fact_{i:02d}", "x", description=f"A long description {i} " * 5)
    bot = fake_session.bot
    bot.context_window = 700
    bot.max_output_tokens = 100
    bot.save()
    _, reply = _turn(fake_session, "hello")
    fake_openai.script(Reply(text="Hi."))

    turn.turn_run(message_id=reply.pk)

    request = fake_openai.requests[0]
    lines = _index_block(request).splitlines()[2:]
    assert 0 < len(lines) < 30
    assert lines[0].startswith("- fact_29 ")  # the newest stays
    expected = [f"- fact_{i:02d} " for i in range(29, 29 - len(lines), -1)]
    assert [line[: len(expected[0])] for line in lines] == expected
    assert _sent_tokens(request) <= bot_budget(bot).budget


def test_index_size_zero_disables_index_and_recall(fake_session, fake_openai):
    _save(fake_session, "locker_code", "My locker code is 4471.")
    fake_session.bot.memory_index_size = 0
    fake_session.bot.save()
    _, reply = _turn(fake_session, "hello")
    fake_openai.script(Reply(text='{"read_files": {"files": ["locker_code"]}}'))

    turn.turn_run(message_id=reply.pk)

    request = fake_openai.requests[0]
    assert _index_block(request) is None
    assert "tools" not in request
    reply.refresh_from_db()
    # not intercepted: with recall off, that text is simply the answer
    assert reply.content == '{"read_files": {"files": ["locker_code"]}}'
    assert len(fake_openai.requests) == 1


def test_recall_disabled_keeps_the_index_but_offers_no_tools(fake_session, fake_openai):
    _save(fake_session, "locker_code", "My locker code is 4471.")
    fake_session.bot.recall_enabled = False
    fake_session.bot.save()
    _, reply = _turn(fake_session, "hello")
    fake_openai.script(Reply(text="Hi."))

    turn.turn_run(message_id=reply.pk)

    assert _index_block(fake_openai.requests[0]) is not None
    assert "tools" not in fake_openai.requests[0]


# --- recall through tools ---------------------------------------------------------------------


def test_read_records_tool_call_is_answered_stored_and_audited(
    fake_session, fake_openai, other_user
):
    _save(fake_session, "locker_code", "My locker code is 4471.")
    elsewhere = SessionFactory(user=fake_session.user, bot=fake_session.bot)
    _save(elsewhere, "other_chat", "Said in another chat.")  # session scope: not readable here
    strangers = SessionFactory(user=other_user, bot=fake_session.bot)
    _save(strangers, "their_secret", "Another user's secret.", scope="bot")
    new, reply = _turn(fake_session, "What is my locker code?")
    fake_openai.script(
        Reply(
            text="",
            tool_calls=[
                _call(
                    "read_records",
                    {"names": ["locker_code", "nope", "other_chat", "their_secret", "../etc"]},
                )
            ],
        ),
        Reply(text="Your locker code is 4471."),
    )

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Your locker code is 4471.")
    second = fake_openai.requests[1]["messages"]
    assert second[-3]["role"] == "user"
    assert second[-2]["role"] == "assistant"
    assert second[-2]["tool_calls"][0]["function"]["name"] == "read_records"
    assert second[-1] == {
        "role": "tool",
        "tool_call_id": "call_1",
        "content": "[record locker_code]\nMy locker code is 4471.\n\n[not found: nope]\n\n"
        "[not found: other_chat]\n\n[not found: their_secret]\n\n[not found: ../etc]",
    }
    # the transcript shows what was looked up, in order, the reply last
    rows = list(
        Message.objects.filter(session=fake_session, seq__gte=new.seq)
        .order_by("seq")
        .values_list("seq", "role", "kind", "tool_name")
    )
    assert rows == [
        (new.seq, "user", "chat", ""),
        (new.seq + 1, "assistant", "tool", ""),
        (new.seq + 2, "tool", "tool", "read_records"),
        (new.seq + 3, "assistant", "chat", ""),
    ]
    event = RecallEvent.objects.get(session=fake_session)
    assert (event.message_id, event.round, event.tool) == (reply.pk, 1, "read")
    assert event.names == ["locker_code", "nope", "other_chat", "their_secret", "../etc"]
    assert event.found == ["locker_code"]
    # the running totals include the stored exchange, exactly as a recount says
    fake_session.refresh_from_db()
    assert fake_session.context_tokens == session_context_recount(session_id=fake_session.pk)[0]


def test_bot_scoped_record_is_readable_from_the_same_users_other_chat(fake_session, fake_openai):
    _save(fake_session, "home_town", "I live in Tromsø.", scope="bot")
    sibling = SessionFactory(user=fake_session.user, bot=fake_session.bot)
    _, reply = _turn(sibling, "Where do I live?")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("read_records", {"names": ["home_town"]})]),
        Reply(text="Tromsø."),
    )

    turn.turn_run(message_id=reply.pk)

    assert "- home_town (info)" in _index_block(fake_openai.requests[0])
    assert fake_openai.requests[1]["messages"][-1]["content"] == (
        "[record home_town]\nI live in Tromsø."
    )


def test_search_records_tool_call_returns_ranked_excerpts(fake_session, fake_openai):
    _save(fake_session, "pets", "My dog is called Biscuit and my cat is called Pixel.")
    _save(fake_session, "car", "I drive a green Volvo from 2009.")
    _, reply = _turn(fake_session, "What's my dog's name?")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("search_records", {"query": "dog"})]),
        Reply(text="Biscuit."),
    )

    turn.turn_run(message_id=reply.pk)

    result = fake_openai.requests[1]["messages"][-1]["content"]
    assert result.startswith("[record pets]\n")
    assert "**dog**" in result
    assert "[record car]" not in result
    event = RecallEvent.objects.get(session=fake_session)
    assert (event.tool, event.query, event.found) == ("search", "dog", ["pets"])


def test_save_record_tool_saves_a_bot_scoped_record(fake_session, fake_openai):
    _, reply = _turn(fake_session, "Remember that my locker code is 4471")
    fake_openai.script(
        Reply(
            text="",
            tool_calls=[
                _call(
                    "save_record",
                    {
                        "name": "locker_code",
                        "description": "The user's locker code",
                        "body": "The locker code is 4471.",
                        "scope": "bot",
                    },
                )
            ],
        ),
        Reply(text="Saved."),
    )

    turn.turn_run(message_id=reply.pk)

    record = MemoryRecord.objects.get(name="locker_code")
    assert (record.kind, record.scope, record.body) == ("info", "bot", "The locker code is 4471.")
    assert fake_openai.requests[1]["messages"][-1]["content"] == "[saved: locker_code]"


# --- the JSON protocol -----------------------------------------------------------------------


def test_a_json_read_request_is_intercepted_and_never_shown_as_the_answer(
    fake_session, fake_openai, monkeypatch
):
    from bots import realtime

    deltas = []
    monkeypatch.setattr(realtime, "notify_message_delta", lambda m, d, **_: deltas.append(d))
    _save(fake_session, "locker_code", "My locker code is 4471.")
    _, reply = _turn(fake_session, "What is my locker code?")
    fake_openai.script(
        Reply(text='{"read_files": {"files": ["locker_code"]}}'),
        Reply(text="It is 4471."),
    )

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.content == "It is 4471."
    assert "".join(deltas) == "It is 4471."  # the request was never streamed to the user
    assert fake_openai.requests[1]["messages"][-1]["content"] == (
        "[record locker_code]\nMy locker code is 4471."
    )
    assert RecallEvent.objects.get(session=fake_session).found == ["locker_code"]


def test_a_json_search_request_is_intercepted(fake_session, fake_openai):
    _save(fake_session, "pets", "My dog is called Biscuit.")
    _, reply = _turn(fake_session, "dog?")
    fake_openai.script(Reply(text='{"search_records": {"query": "dog"}}'), Reply(text="Biscuit."))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.content == "Biscuit."
    assert fake_openai.requests[1]["messages"][-1]["content"].startswith("[record pets]\n")


# --- limits -------------------------------------------------------------------------------------


def test_at_most_two_rounds_then_the_model_must_answer(fake_session, fake_openai):
    _save(fake_session, "locker_code", "My locker code is 4471.")
    _, reply = _turn(fake_session, "What is my locker code?")
    ask = Reply(text="", tool_calls=[_call("read_records", {"names": ["locker_code"]})])
    fake_openai.script(ask, ask, Reply(text="4471."))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "4471.")
    assert len(fake_openai.requests) == 3
    assert "tools" in fake_openai.requests[0] and "tools" in fake_openai.requests[1]
    assert "tools" not in fake_openai.requests[2]  # no third round: it must answer
    assert list(
        RecallEvent.objects.filter(session=fake_session)
        .order_by("round")
        .values_list("round", flat=True)
    ) == [1, 2]


def test_recalled_text_never_pushes_a_request_over_the_budget(fake_session, fake_openai):
    bot = fake_session.bot
    bot.context_window = 1500
    bot.max_output_tokens = 200
    bot.compaction_enabled = False  # admission alone keeps every request inside B
    bot.save()
    budget = bot_budget(bot).budget
    big = " ".join(f"word{i}" for i in range(3000))
    _save(fake_session, "big_one", big)
    _save(fake_session, "big_two", big)
    for i in range(20):
        message_add(fake_session, role="user", content=f"history line {i} " * 10)
    session_context_recount(session_id=fake_session.pk)
    _, reply = _turn(fake_session, "read both")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("read_records", {"names": ["big_one", "big_two"]})]),
        Reply(text="Read."),
    )

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Read.")
    assert len(fake_openai.requests) == 2
    for request in fake_openai.requests:
        assert _sent_tokens(request) <= budget
    recalled = fake_openai.requests[1]["messages"][-1]["content"]
    assert recalled.startswith("[record big_one]\n")
    assert recalled.endswith("[cut: no room left in the context budget]") or (
        "[not sent: no room left in the context budget]" in recalled
    )


def test_builtin_recall_with_recall_disabled_never_shows_a_request(chat_session):
    """The index stays visible but recall is closed: the block carries no invitation, no tools
    are offered, so builtin/recall answers instead of replying with a JSON request."""
    _save(chat_session, "diet", "I am vegetarian and allergic to peanuts.", description="Diet")
    chat_session.bot.recall_enabled = False
    chat_session.bot.save()
    _, reply = _turn(chat_session, "Do I have food allergies?")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.status == "complete"
    assert not reply.content.lstrip().startswith("{")
    assert not RecallEvent.objects.filter(session=chat_session).exists()
    assert not Message.objects.filter(session=chat_session, kind="tool").exists()


def test_builtin_recall_reads_a_listed_record_through_the_loop(chat_session):
    _save(
        chat_session,
        "diet",
        "I am vegetarian and allergic to peanuts.",
        description="Food allergies and diet",
    )
    _, reply = _turn(chat_session, "Do I have food allergies?")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.status == "complete"
    assert "allergic to peanuts" in reply.content
    event = RecallEvent.objects.get(session=chat_session)
    assert (event.tool, event.found) == ("read", ["diet"])


def test_a_successful_compaction_puts_its_snapshot_in_the_index_and_says_so(
    chat_session, monkeypatch
):
    from compaction.engine import compaction_manual
    from memory import realtime as memory_realtime

    sent = []
    monkeypatch.setattr(memory_realtime, "send_frame", lambda session_id, frame: sent.append(frame))
    filler = (
        "It was a quiet afternoon and we talked about this and that for a while. "
        "Nothing much happened, and the weather was fine as it usually is around here. "
    )
    for i in range(6):
        message_add(chat_session, role="user", content=f"{filler}My locker code is {i}{i}{i}{i}.")
    _turn(chat_session, "latest")
    session_context_recount(session_id=chat_session.pk)

    result = compaction_manual(session=chat_session, focus="")

    assert result.outcome == "compacted"
    [frame] = [f for f in sent if f["type"] == "memory.updated"]
    assert [r["name"] for r in frame["records"]] == [f"snapshot_1_{result.last_seq}"]
