"""Compaction as users reach it (docs/compaction.md, §11, §12, §13): ``/compact`` in chat over REST
and the websocket, the compaction endpoints, access isolation and the ``compact_session``
command."""

import json
from io import StringIO

import pytest
import redis
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.core.management import CommandError, call_command
from rest_framework.authtoken.models import Token

from bots.models import Message
from chat_platform.asgi import application
from compaction.lock import lock_key
from compaction.measure import context_measure
from compaction.models import CompactionEvent, Summary
from compaction.payloads import event_payload, summary_payload
from memory.models import MemoryRecord
from tests.compaction.test_engine import (
    GOOD,
    MODEL,
    add_history,
    chat_requests,
    compacted_seqs,
    counters,
    dated,
    message_rows,
    recount,
    summariser_requests,
    tok,
)
from tests.factories import SessionFactory, message_add
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db

SYSTEM = "You are terse."
FACTS = [
    ("user", "Alice booked room 42 for the offsite on 2024-05-01."),
    ("assistant", "Noted: room 42 on 2024-05-01, and Bob approved the budget of 4,500 EUR."),
    ("user", "Thanks."),
    ("assistant", "You are welcome."),
    ("user", "Anything else?"),
    ("assistant", "No."),
]
FACT_SUMMARY = "Alice booked room 42 for the offsite on 2024-05-01; Bob approved the budget."


@pytest.fixture(autouse=True)
def fast_llm(settings):
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01


@pytest.fixture
def api_bot(fake_bot):
    # W 20000, R 1000 -> B 19000: manual compaction of a few thousand tokens, no automatic one
    fake_bot.context_window = 20_000
    fake_bot.max_output_tokens = 1000
    fake_bot.system_prompt = SYSTEM
    fake_bot.memory_index_size = 0
    fake_bot.save()
    return fake_bot


@pytest.fixture
def session(owner, api_bot):
    return SessionFactory(user=owner, bot=api_bot)


def big_history(session):
    """Four 3,000-token messages, then the latest exchange (100 + 100)."""
    add_history(session, [3000, 3000, 3000, 3000, 100, 100])
    recount(session)


def fact_history(session):
    for role, content in FACTS:
        message_add(session, role=role, content=content)
    recount(session)


def post_message(client, session, content, **extra):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": content, **extra}, format="json"
    )


# --- /compact in chat over REST ---------------------------------------------------------------


def test_compact_command_over_rest(owner_client, session, fake_openai):
    big_history(session)
    fake_openai.script(Reply(text=GOOD))

    response = post_message(owner_client, session, "/compact")

    assert response.status_code == 200
    body = response.json()
    assert set(body) == {"notice", "compaction"}
    summary = Summary.objects.get(session=session)
    system = tok(SYSTEM)
    assert system == 8
    before, after = system + 12_200, system + 200 + summary.token_count
    assert before == 12_208
    notice = body["notice"]
    assert notice["content"] == (f"Context compacted: 12,208 -> {after:,} tokens (messages 1–4).")
    assert (notice["role"], notice["kind"], notice["status"], notice["seq"]) == (
        "system",
        "notice",
        "complete",
        8,
    )
    compaction = body["compaction"]
    event = CompactionEvent.objects.get(session=session)
    assert compaction == {
        "outcome": "compacted",
        "reason": "",
        "tokens_before": before,
        "tokens_after": after,
        "summary": summary_payload(summary),
        "event": event_payload(event),
        "stopped": None,  # it finished: nothing ran out part-way
    }
    assert (event.trigger, summary.trigger, summary.first_seq, summary.last_seq) == (
        "manual",
        "manual",
        1,
        4,
    )
    assert compacted_seqs(session) == [1, 2, 3, 4]
    assert counters(session) == (200, 2) == recount(session)
    # the command and its notice stay in the transcript, and count toward nothing
    command = Message.objects.get(session=session, seq=7)
    assert (command.role, command.kind, command.content, command.status) == (
        "user",
        "command",
        "/compact",
        "complete",
    )
    listed = owner_client.get(f"/api/v1/sessions/{session.pk}/messages/?after_seq=6").json()
    assert [(m["seq"], m["kind"], m["compacted"]) for m in listed] == [
        (7, "command", False),
        (8, "notice", False),
    ]
    assert chat_requests(fake_openai) == []  # no bot turn


def test_a_compact_command_sent_again_with_its_client_id_answers_its_first_result(
    owner_client, session, fake_openai
):
    """Same ``client_id`` twice -> the first result (docs/api.md), ``/compact`` included: its
    notice and what it compacted. The repeat answered ``compaction: null``."""
    big_history(session)
    fake_openai.script(Reply(text=GOOD))
    url = f"/api/v1/sessions/{session.pk}/messages/"
    body = {"content": "/compact", "client_id": "c-1"}

    first = owner_client.post(url, body, format="json")
    again = owner_client.post(url, body, format="json")

    assert (first.status_code, again.status_code) == (200, 200)
    assert again.json() == first.json()
    assert again.json()["compaction"]["outcome"] == "compacted"
    assert CompactionEvent.objects.filter(session=session).count() == 1
    assert len(fake_openai.requests) == 1  # compacted once


def test_compact_command_nothing_to_compact(owner_client, session, fake_openai):
    add_history(session, [100, 100])
    recount(session)
    response = post_message(owner_client, session, "/compact")
    assert response.status_code == 200
    body = response.json()
    assert body["notice"]["content"] == "Nothing to compact right now."
    assert (body["compaction"]["outcome"], body["compaction"]["reason"]) == (
        "noop",
        "nothing_to_compact",
    )
    assert body["compaction"]["summary"] is None
    assert fake_openai.requests == []
    assert not Summary.objects.filter(session=session).exists()
    assert counters(session) == (200, 2)


@pytest.mark.parametrize(
    "reply, notice",
    [
        (
            Reply(status=500),
            "Compaction failed: the summariser did not answer. Nothing was changed.",
        ),
        (
            Reply(text=GOOD, finish_reason="length"),
            "Compaction failed: the summary was cut off before it finished. Nothing was changed.",
        ),
        (
            Reply(text="Budget agreed."),
            "Compaction failed: the summary was too short to be useful. Nothing was changed.",
        ),
    ],
    ids=["http_500", "length", "too_short"],
)
def test_compact_command_failure_gives_the_reason(
    owner_client, session, fake_openai, reply, notice
):
    big_history(session)
    before_rows = message_rows(session)
    fake_openai.script(reply)
    response = post_message(owner_client, session, "/compact")
    assert response.status_code == 200
    body = response.json()
    assert body["notice"]["content"] == notice
    assert body["compaction"]["outcome"] in ("failed", "rejected")
    assert body["compaction"]["summary"] is None
    assert not Summary.objects.filter(session=session).exists()
    assert message_rows(session)[:6] == before_rows
    assert counters(session) == (12_200, 6)


def test_compact_command_while_another_compaction_holds_the_lease(
    owner_client, session, fake_openai, settings
):
    settings.COMPACTION_WAIT_SECONDS = 0.5
    big_history(session)
    lease = redis.Redis.from_url(django_settings.REDIS_URL).lock(lock_key(session.pk), timeout=600)
    assert lease.acquire(blocking=False)
    try:
        chat = post_message(owner_client, session, "/compact")
        api = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    finally:
        lease.release()
    assert chat.status_code == 200
    assert chat.json()["notice"]["content"] == (
        "Compaction failed: another compaction of this session did not finish in time. "
        "Nothing was changed."
    )
    assert api.status_code == 409
    assert api.json()["error"]["code"] == "compaction_busy"
    assert fake_openai.requests == []
    assert not Summary.objects.filter(session=session).exists()
    assert compacted_seqs(session) == []


def test_compact_focus_reaches_the_summariser(owner_client, session, fake_openai):
    big_history(session)
    fake_openai.script(Reply(text=GOOD))
    response = post_message(owner_client, session, "/compact keep the budget numbers")
    assert response.status_code == 200
    [request] = summariser_requests(fake_openai)
    assert request["messages"][1]["content"].endswith(
        "\n</transcript>\nFocus: keep the budget numbers"
    )
    summary = Summary.objects.get(session=session)
    assert summary.focus == "keep the budget numbers"
    assert response.json()["compaction"]["summary"]["focus"] == "keep the budget numbers"
    command = Message.objects.get(session=session, kind="command")
    assert command.content == "/compact keep the budget numbers"


@pytest.mark.django_db(transaction=True)
def test_command_and_notice_never_reach_the_model(owner_client, session, fake_openai, eager_tasks):
    big_history(session)
    fake_openai.script(Reply(text=GOOD), Reply(text="4,500 EUR."))
    assert post_message(owner_client, session, "/compact").status_code == 200
    summary = Summary.objects.get(session=session)

    response = post_message(owner_client, session, "What was the budget?", wait=True)

    assert response.status_code == 201
    [chat] = chat_requests(fake_openai)
    assert chat["messages"] == [
        {"role": "system", "content": SYSTEM},
        {"role": "system", "content": f"[Summary of messages 1–4]\n{summary.text}"},
        {"role": "user", "content": "m message 4"},
        {"role": "assistant", "content": "m message 5"},
        {"role": "user", "content": "What was the budget?"},
    ]
    assert not any(
        m["content"].startswith(("/compact", "Context compacted")) for m in chat["messages"]
    )


# --- /compact over the websocket --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_compact_command_over_websocket(owner, api_bot, fake_openai):
    def setup():
        session = SessionFactory(user=owner, bot=api_bot)
        big_history(session)
        return session, Token.objects.get_or_create(user=owner)[0].key

    session, token = await database_sync_to_async(setup)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    assert (await communicator.connect(timeout=5))[0]
    fake_openai.script(Reply(text=GOOD))
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "/compact"})
    )
    frames = []
    while not (
        frames
        and frames[-1]["type"] == "message.created"
        and frames[-1]["message"]["kind"] == "notice"
    ):
        frames.append(json.loads(await communicator.receive_from(timeout=15)))
    await communicator.disconnect()

    assert [f["type"] for f in frames] == [
        "message.created",
        "compaction.started",
        "memory.updated",  # the snapshot joined the index
        "compaction.finished",
        "message.created",
    ]
    command, started, memory, finished, notice = frames
    assert memory["records"] == []  # the index as it stands: this bot's is off (size 0)
    assert (command["message"]["kind"], command["message"]["content"]) == ("command", "/compact")
    assert started == {"type": "compaction.started", "trigger": "manual"}

    def stored():
        event = CompactionEvent.objects.select_related("snapshot").get(session=session)
        return event_payload(event), Summary.objects.get(session=session)

    event, summary = await database_sync_to_async(stored)()
    assert finished == {"type": "compaction.finished", "event": event}
    assert (event["outcome"], event["trigger"], event["summary"]) == (
        "compacted",
        "manual",
        summary.pk,
    )
    assert notice["message"]["role"] == "system"
    assert notice["message"]["content"] == (
        f"Context compacted: 12,208 -> {8 + 200 + summary.token_count:,} tokens (messages 1–4)."
    )
    assert chat_requests(fake_openai) == []


# --- the compaction endpoints -----------------------------------------------------------------


def test_compact_endpoint_summaries_and_events(owner_client, session, fake_openai):
    fact_history(session)
    fake_openai.script(Reply(text=FACT_SUMMARY))

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/compact/", {"focus": "dates"}, format="json"
    )

    assert response.status_code == 200
    body = response.json()
    source = sum(tok(content) for _, content in FACTS[:4])
    assert source == 67
    summary = Summary.objects.get(session=session)
    event = CompactionEvent.objects.select_related("snapshot").get(session=session)
    before = tok(SYSTEM) + sum(tok(content) for _, content in FACTS)
    assert body == {
        "outcome": "compacted",
        "reason": "",
        "tokens_before": before,
        "tokens_after": before - source + summary.token_count,
        "summary": {
            "id": summary.pk,
            "session": session.pk,
            "bot": session.bot_id,
            "level": 1,
            "text": FACT_SUMMARY,
            "token_count": tok(f"[Summary of messages 1–4]\n{FACT_SUMMARY}"),
            "first_seq": 1,
            "last_seq": 4,
            "source_tokens": 67,
            "model": MODEL,
            "trigger": "manual",
            "status": "active",
            "parents": [],
            "retention": 0.5,  # 2024-05-01, Bob kept; "42" alone is no fact
            "missing_facts": ["4,500", "EUR"],
            "focus": "dates",
            "created_at": body["summary"]["created_at"],
            "reverted_at": None,
            "held": False,
            "superseded_by": None,
        },
        "event": {
            "id": event.pk,
            "session": session.pk,
            "bot": session.bot_id,
            "trigger": "manual",
            "outcome": "compacted",
            "reason": "",
            "tokens_before": before,
            "tokens_after": before - source + summary.token_count,
            "source_tokens": 67,
            "summary_tokens": summary.token_count,
            "model": MODEL,
            "duration_ms": event.duration_ms,
            "error": "",
            "snapshot": "snapshot_1_4",
            "summary": summary.pk,
            "created_at": body["event"]["created_at"],
        },
        "stopped": None,
    }
    assert body["summary"]["created_at"].endswith("Z")
    snapshot = MemoryRecord.objects.get(session=session, name="snapshot_1_4")
    assert snapshot.body == "\n".join(
        dated(
            session,
            *(f"[{seq}] {role}: {content}" for seq, (role, content) in enumerate(FACTS[:4], 1)),
        )
    )
    assert snapshot.description.startswith("Pre-compaction snapshot of messages 1–4")

    # a failed second attempt, then a successful third one: lists are newest first
    add_history(session, [300, 300, 300, 300], tag="later")
    recount(session)
    fake_openai.script(Reply(status=500), Reply(text=GOOD))
    failed = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    assert failed.status_code == 200
    assert (failed.json()["outcome"], failed.json()["reason"]) == ("failed", "summariser_error")
    assert failed.json()["summary"] is None
    ok = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json").json()
    assert (ok["outcome"], ok["summary"]["first_seq"], ok["summary"]["last_seq"]) == (
        "compacted",
        5,
        8,
    )

    summaries = owner_client.get(f"/api/v1/sessions/{session.pk}/summaries/").json()
    assert [s["id"] for s in summaries] == [ok["summary"]["id"], summary.pk]
    assert summaries[1] == body["summary"]
    assert set(summaries[0]) == set(body["summary"])
    events = owner_client.get(f"/api/v1/compaction-events/?session={session.pk}").json()
    assert [(e["outcome"], e["reason"]) for e in events] == [
        ("compacted", ""),
        ("failed", "summariser_error"),
        ("compacted", ""),
    ]
    assert [e["id"] for e in events] == sorted((e["id"] for e in events), reverse=True)
    assert events[1]["snapshot"] == "snapshot_5_8"
    assert events[2] == body["event"]


def test_other_users_get_404_and_nothing_is_compacted(
    owner_client, other_client, session, fake_openai
):
    big_history(session)
    before_rows = message_rows(session)
    fake_openai.script(Reply(text=GOOD))
    base = f"/api/v1/sessions/{session.pk}"
    responses = [
        other_client.post(f"{base}/compact/", {}, format="json"),
        post_message(other_client, session, "/compact"),
        other_client.get(f"{base}/summaries/"),
        other_client.get(f"/api/v1/compaction-events/?session={session.pk}"),
    ]
    for response in responses:
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert other_client.get("/api/v1/compaction-events/").json() == []
    assert fake_openai.requests == []
    assert message_rows(session) == before_rows
    assert not Summary.objects.filter(session=session).exists()
    assert not CompactionEvent.objects.filter(session=session).exists()
    assert not MemoryRecord.objects.filter(session=session).exists()
    # the owner sees the same (empty) lists, not a 404
    assert owner_client.get(f"{base}/summaries/").json() == []
    assert owner_client.get(f"/api/v1/compaction-events/?session={session.pk}").json() == []


def test_compact_session_command(session, fake_openai):
    big_history(session)
    fake_openai.script(Reply(text=GOOD))
    out = StringIO()
    call_command("compact_session", str(session.pk), "--focus", "budget", stdout=out)
    summary = Summary.objects.get(session=session)
    assert out.getvalue() == (
        f"Context compacted: 12,208 -> {8 + 200 + summary.token_count:,} tokens (messages 1–4).\n"
    )
    assert summary.focus == "budget"
    assert summariser_requests(fake_openai)[0]["messages"][1]["content"].endswith("Focus: budget")

    out = StringIO()
    call_command("compact_session", str(session.pk), stdout=out)
    assert out.getvalue() == "Nothing to compact right now.\n"

    with pytest.raises(CommandError, match="No session 999999"):
        call_command("compact_session", "999999", stdout=StringIO())
    # Bytes the shell could not decode arrive as lone surrogates: refused before anything runs
    # (two tracebacks and a failed event of internal_error before).
    events = CompactionEvent.objects.count()
    for focus in ("x\udcfe", "a\x00b"):
        with pytest.raises(CommandError, match="--focus: Text may not contain NUL characters"):
            call_command("compact_session", str(session.pk), "--focus", focus, stdout=StringIO())
    assert CompactionEvent.objects.count() == events

    add_history(session, [300, 300, 300, 300], tag="later")
    recount(session)
    fake_openai.script(Reply(status=500))
    out = StringIO()
    with pytest.raises(CommandError, match="compaction failed: summariser_error"):
        call_command("compact_session", str(session.pk), stdout=out)
    assert out.getvalue() == (
        "Compaction failed: the summariser did not answer. Nothing was changed.\n"
    )
    assert Summary.objects.filter(session=session).count() == 1


@pytest.mark.parametrize("path", ["endpoint", "command"])
def test_the_meter_catches_up_after_a_manual_compaction(
    owner_client, session, fake_openai, monkeypatch, path
):
    from chat_platform import realtime

    sent = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: sent.append(frame))
    fact_history(session)
    fake_openai.script(Reply(text=FACT_SUMMARY))

    if path == "endpoint":
        owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    else:
        owner_client.post(
            f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
        )

    summary = Summary.objects.get(session=session)
    [update] = [f for f in sent if f["type"] == "context.updated"]
    assert update["context"]["parts"]["summaries"] == summary.token_count
    assert update["context"] == owner_client.get(f"/api/v1/sessions/{session.pk}/context/").json()


def test_a_summary_no_shorter_is_nothing_worth_compacting_not_a_failure():
    """Issue 18, defect 3: `/compact` two turns after a `/compact` answered "Compaction failed:
    the summary was not shorter than the messages it would replace"; too little is left since
    the last compaction, which is not a failure."""
    from compaction.results import RunResult
    from compaction.services import compaction_notice_text

    assert compaction_notice_text(RunResult(outcome="rejected", reason="not_shorter")) == (
        "Nothing worth compacting yet: a summary would not be shorter than the messages since "
        "the last compaction. Nothing was changed."
    )
    assert compaction_notice_text(RunResult(outcome="rejected", reason="too_short")) == (
        "Compaction failed: the summary was too short to be useful. Nothing was changed."
    )


def test_compact_with_nothing_left_while_due_says_what_fills_the_context(
    owner_client, session, fake_openai
):
    """Issue 18, defect 3: the gauge says compaction is due (pressure past S 9,500) but every
    message before the latest exchange is pinned, so `/compact` finds nothing: the notice says
    what fills the context instead of a bare "nothing to compact"."""
    pinned = add_history(session, [6000, 4000, 100, 100])[:2]
    Message.objects.filter(pk__in=[m.pk for m in pinned]).update(pinned=True)
    recount(session)
    system = context_measure(session=session).parts["system"]

    body = post_message(owner_client, session, "/compact").json()

    assert (body["compaction"]["outcome"], body["compaction"]["reason"]) == (
        "noop",
        "nothing_to_compact",
    )
    assert body["notice"]["content"] == (
        "Nothing to compact right now. Everything before the latest exchange is already "
        f"summarised or pinned. The context is {10_200 + system:,} tokens (compaction is due "
        f"from 9,500): the latest messages 200, pinned messages 10,000, the system prompt "
        f"{system:,}. Unpin messages, shorten the system prompt, or start a new chat to make room."
    )
    assert Summary.objects.filter(session=session).count() == 0
