"""Compaction inside a reply (docs/tools.md, "Compaction inside a reply"): a tool task whose
rounds outgrow the hard threshold compacts its earlier rounds before the next model call —
snapshot, summary, event with trigger ``tool`` — never splits a call from its results, sends
nothing over B, and what it compacted is found again by recall after the task."""

import json

import pytest

from bots.models import Message
from bots.transitions import session_context_add
from chat_platform.llm.tokens import count_message_tokens, count_tools_tokens
from compaction.measure import bot_budget
from compaction.models import CompactionEvent, ContextRecord, Summary
from memory.models import MemoryRecord
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.coverage import messages_covered
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tools import realtime as tool_realtime
from turns import turn

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_stop_polls")]

MODEL = "openai/fake-model"


def _call(name, arguments, call_id):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.fixture(autouse=True)
def _quiet_frames(monkeypatch):
    monkeypatch.setattr(tool_realtime, "send_frame", lambda sid, frame: None)


@pytest.fixture
def task_bot(owner, fake_openai, monkeypatch, tool_server):
    """A tool bot in a 3,000-token window (B 2,500, H 1,875) whose summariser is the built-in
    extractive one: the fake provider answers the task's script only."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    return BotFactory(
        owner=owner,
        model=MODEL,
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["calc/report"],
        context_window=3000,
        max_output_tokens=500,
        compaction_model="builtin/extractive",
    )


def _ask(session, content):
    session.refresh_from_db(fields=["last_seq"])
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return reply


def _sent(request):
    """A request's tokens as sent: every message and every tool schema offered."""
    messages = sum(
        count_message_tokens(
            (m.get("content") or "") + (json.dumps(m["tool_calls"]) if m.get("tool_calls") else ""),
            model=MODEL,
        )
        for m in request["messages"]
    )
    return messages + count_tools_tokens(request.get("tools") or [], model=MODEL)


def _steps(count, words=400):
    return [
        Reply(text="", tool_calls=[_call("calc__report", {"step": n, "words": words}, f"s{n}")])
        for n in range(1, count + 1)
    ]


def test_earlier_rounds_are_compacted_inside_the_reply_and_no_request_exceeds_b(
    task_bot, fake_openai
):
    budget = bot_budget(task_bot).budget
    fake_openai.script(*_steps(4), Reply(text="All four steps done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    reply = _ask(session, "Run the four-step survey.")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "All four steps done.")
    requests = fake_openai.requests
    assert len(requests) == 5  # five model calls, no summariser call to the provider
    assert all(_sent(r) <= budget for r in requests)
    events = list(CompactionEvent.objects.filter(session=session).order_by("id"))
    compacted = [e for e in events if e.outcome == "compacted"]
    assert compacted and {e.trigger for e in compacted} == {"tool"}
    first = compacted[0]
    summary = first.summary
    # The first compaction took step 1's round whole (the call and its result), nothing of the
    # current turn besides it: the user's message stays.
    call_1 = messages_covered(session).get(tool_calls__contains=[{"id": "s1"}])
    result_1 = messages_covered(session).get(tool_call_id="s1")
    assert (summary.first_seq, summary.trigger) == (call_1.seq, "tool")
    assert call_1.compacted_by_id == result_1.compacted_by_id is not None
    assert messages_covered(session).get(role="user").compacted_by_id is None
    # The raw round is kept as the event's snapshot, readable by name.
    snapshot = first.snapshot
    assert snapshot.kind == MemoryRecord.Kind.SNAPSHOT
    assert "(used calc__report: step=1, words=400)" in snapshot.body
    assert "Step 1 report: serial S7919." in snapshot.body
    # What the step tried and what it got are in the summary the next call carries.
    assert "step=1" in summary.text and "S7919" in summary.text
    later = [r for r in requests if any(summary.block == m["content"] for m in r["messages"])]
    assert later
    assert all("s1" not in [m.get("tool_call_id") for m in r["messages"]] for r in later)
    # The newest round is always sent verbatim.
    assert [m.get("tool_call_id") for m in requests[-1]["messages"] if m["role"] == "tool"] == [
        "s4"
    ]
    # No tool result was ever compacted without its call.
    for result in messages_covered(session).filter(role="tool"):
        call = messages_covered(session).get(tool_calls__contains=[{"id": result.tool_call_id}])
        assert call.compacted_by_id == result.compacted_by_id
    # Every round stays in the transcript.
    assert Message.objects.filter(session=session, role="tool", tool_ok=True).count() == 4


def test_a_step_compacted_inside_the_reply_is_found_by_recall_after_the_task(task_bot, fake_openai):
    fake_openai.script(*_steps(5), Reply(text="Done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    turn.turn_run(message_id=_ask(session, "Run the five-step survey.").pk)
    step_2 = messages_covered(session).get(tool_call_id="s2")
    # Compacted inside the reply (its summary may since be fused with a later one).
    assert step_2.compacted_by_id is not None
    assert Summary.objects.filter(session=session, trigger="tool").exists()

    fake_openai.script(
        Reply(text="", tool_calls=[_call("search_records", {"query": "step 2 serial"}, "q1")]),
        Reply(text="S15838."),
    )
    turn.turn_run(message_id=_ask(session, "What was the serial of step 2?").pk)

    found = Message.objects.get(session=session, tool_call_id="q1")
    # (Search marks the query's words in bold.)
    assert "Step 2 report: serial S15838." in found.content.replace("**", "")


def test_each_call_of_the_loop_records_its_tool_rounds_as_tool_parts(task_bot, fake_openai):
    fake_openai.script(*_steps(2, words=20), Reply(text="Two done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    reply = _ask(session, "Run two steps.")
    turn.turn_run(message_id=reply.pk)

    calls = ContextRecord.objects.get(message_id=reply.pk).calls
    assert [c["round"] for c in calls] == [0, 1, 2]
    tool_parts = [[p for p in c["parts"] if p["kind"] == "tool"] for c in calls]
    call_1 = messages_covered(session).get(tool_calls__contains=[{"id": "s1"}])
    result_1 = messages_covered(session).get(tool_call_id="s1")
    call_2 = Message.objects.get(session=session, tool_calls__contains=[{"id": "s2"}])
    result_2 = Message.objects.get(session=session, tool_call_id="s2")
    assert tool_parts[0] == []
    assert tool_parts[1] == [
        {
            "kind": "tool",
            "ref": {
                "round": 1,
                "ids": [call_1.pk, result_1.pk],
                "seqs": [call_1.seq, result_1.seq],
                "calls": ["calc__report"],
            },
            "tokens": call_1.token_count + result_1.token_count,
        }
    ]
    assert [p["ref"]["round"] for p in tool_parts[2]] == [1, 2]
    assert tool_parts[2][1]["ref"]["ids"] == [call_2.pk, result_2.pk]
    assert not any(p["kind"] == "recalled" for c in calls for p in c["parts"])


def test_a_compaction_inside_the_reply_asks_once_which_rounds_it_left(
    task_bot, fake_openai, monkeypatch
):
    """The build reads which of the rounds it sends a compaction left in context; the tool
    loop settles its rounds by that answer, not by a second query (docs/performance.md, "The
    tool task, seventh pass")."""
    from compaction.pipeline import build
    from turns import recall_loop

    asked = []
    original = build.still_in_context

    def counted(measure, messages):
        if messages:
            asked.append(len(messages))
        return original(measure, messages)

    monkeypatch.setattr(build, "still_in_context", counted)
    monkeypatch.setattr(recall_loop, "still_in_context", counted)
    fake_openai.script(*_steps(6), Reply(text="All six steps done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    reply = _ask(session, "Run the six-step survey.")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "All six steps done.")
    events = CompactionEvent.objects.filter(session=session).order_by("id")
    assert list(events.values_list("trigger", "outcome")) == [
        *[("tool", "compacted")] * 3,
        ("fusion", "compacted"),
        ("tool", "compacted"),
    ]
    # One query a compaction, about the rounds the build sent (it was two: the loop asked
    # again about each round's call); then one about the round the last build left out (too
    # large beside the newest), which the build did not send, so did not ask about.
    assert asked == [4, 4, 4, 4, 4, 1]


def test_a_compaction_inside_the_reply_reads_the_held_spans_once(task_bot, fake_openai):
    """Under hard pressure the compaction releases every held span (``holds_release_at_hard``,
    one read): the fusion check and the range after it know none is held, and do not read
    them again (docs/performance.md, "The tool task, seventh pass")."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fake_openai.script(*_steps(6), Reply(text="All six steps done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    reply = _ask(session, "Run the six-step survey.")

    with CaptureQueriesContext(connection) as queries:
        turn.turn_run(message_id=reply.pk)

    events = CompactionEvent.objects.filter(session=session, outcome="compacted")
    assert events.count() == 5  # four passes and a fusion (above)
    held_reads = [
        q["sql"]
        for q in queries.captured_queries
        if '"compaction_summary"."held"' in q["sql"].partition(" WHERE ")[2]
    ]
    # Four compactions found the session past H when measured under the lease: one read each,
    # the release's. The fifth (the session's own measure, without the reply's rounds, under
    # H: nothing released) reads the held spans for its fusion check and its range. It was
    # 13: the fusion check and the range read them again after every release.
    assert len(held_reads) == 6


def test_a_compaction_inside_the_reply_clears_no_failure_state_that_is_clear(task_bot, fake_openai):
    """A success clears the seat's failures (cool-down, back-off) only when one is armed: the
    hard compaction read that state anyway (``seat_failures``), and an UPDATE of a clear row a
    pass was one statement a step of a long tool task (docs/performance.md, "The tool task,
    seventh pass"). ``tests/compaction/test_engine.py`` clears an armed one."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    fake_openai.script(*_steps(6), Reply(text="All six steps done."))
    session = SessionFactory(user=task_bot.owner, bot=task_bot)
    reply = _ask(session, "Run the six-step survey.")

    with CaptureQueriesContext(connection) as queries:
        turn.turn_run(message_id=reply.pk)

    assert CompactionEvent.objects.filter(session=session, outcome="compacted").count() == 5
    clears = [
        q
        for q in queries.captured_queries
        if q["sql"].startswith('UPDATE "compaction_compactionstate"')
    ]
    assert clears == []  # it was one a compaction: 5


def test_a_compaction_inside_the_reply_builds_few_reads_each_time(
    task_bot, fake_openai, monkeypatch
):
    """The reads of a compaction inside a reply that Django's query builder compiles each time,
    not once per process (chat_platform/compiled.py): a change that builds one more on a pass's
    way changes this number (docs/performance.md, "The tool task, eighth pass")."""
    from tests.built import built_reads

    for asked in ("Warm up.", "Run the six-step survey."):
        fake_openai.script(*_steps(6), Reply(text="All six steps done."))
        session = SessionFactory(user=task_bot.owner, bot=task_bot)
        reply = _ask(session, asked)
        with built_reads(monkeypatch) as built:
            turn.turn_run(message_id=reply.pk)

    events = CompactionEvent.objects.filter(session=session).order_by("id")
    assert list(events.values_list("trigger", "outcome")) == [
        *[("tool", "compacted")] * 3,
        ("fusion", "compacted"),
        ("tool", "compacted"),
    ]
    # Compiled once per process: the session re-read with its bot (twice a pass, and the
    # snapshot's index), its totals after the compaction, the current turn, the last pass's
    # ratio, the other records' heads, the held spans and the active summaries (were built
    # every time: 56 more).
    assert len(built) == 63
