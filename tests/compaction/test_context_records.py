"""Context records (docs/context-records.md): the parts of every model call with their provenance,
written once per turn, rebuilt byte for byte, served to the owner and staff only, swept by age."""

import datetime
import json

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from bots.models import ChatSession, Message
from bots.transitions import session_context_recount
from chat_platform.llm.tokens import count_message_tokens
from compaction import pipeline, records
from compaction.models import ContextRecord, PromptVersion, Summary
from compaction.pipeline import context_build, session_budget
from compaction.provenance import prompt_version, seq_ranges, seqs_of
from compaction.records import (
    context_record_write,
    prompt_version_store,
    record_rebuild,
    records_sweep,
)
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from turns import finished, turn
from turns.services.send import do_message_pair_create

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(params=["whole", "walk"])
def history_read(request, monkeypatch):
    """Both ways history reaches admission (see tests/compaction/test_pipeline.py)."""
    if request.param == "walk":
        monkeypatch.setattr(pipeline, "_fits_whole", lambda measure: False)
    return request.param


def test_seq_ranges_compress_contiguous_runs_and_expand_back():
    assert seq_ranges([1, 2, 3, 5, 7, 8]) == [[1, 3], [5, 5], [7, 8]]
    assert seq_ranges([]) == []
    assert seqs_of([[1, 3], [5, 5], [7, 8]]) == [1, 2, 3, 5, 7, 8]


def test_parts_name_the_trimmed_history_the_pin_and_the_new_message(history_read, owner):
    # REFERENCE: [1000, pinned 50, 1000, 100(new)] at budget 300 -> pinned + new only
    bot = BotFactory(
        owner=owner,
        system_prompt="",
        context_window=1300,
        max_output_tokens=1000,
        compaction_enabled=False,
        memory_index_size=0,
    )
    session = SessionFactory(user=owner, bot=bot)
    m0 = message_add(session, role="user", content="m0", token_count=1000)
    m1 = message_add(session, role="assistant", content="m1", token_count=50, pinned=True)
    message_add(session, role="user", content="m2", token_count=1000)
    m3 = message_add(session, role="user", content="m3", token_count=100)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=m3
    )
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()

    built = context_build(session=session, reply=reply)

    assert list(built.parts) == [
        {
            "kind": "history",
            "ref": {"messages": 2},
            "tokens": 2000,
            "trimmed": True,
        },
        {"kind": "pinned", "ref": {"ids": [m1.pk], "seqs": [2]}, "tokens": 50},
        {"kind": "user", "ref": {"ids": [m3.pk], "seqs": [4]}, "tokens": 100},
    ]
    assert built.admission_info == {
        "budget_tokens": 300,
        "estimated_tokens": 2150,
        "selected_tokens": 150,
        "dropped_messages": 2,
        "decision": "trim",
        "dropped_tokens": 2000,
        "index_lines_kept": 0,
        "index_lines_offered": 0,
        "trimmed": "history",
    }
    assert built.waited_for_compaction is None
    assert m0.pk not in [i for p in built.parts for i in p["ref"].get("ids", [])]


def test_parts_cover_every_token_admission_selected(history_read, owner):
    bot = BotFactory(owner=owner, system_prompt="Be brief.", context_window=2000)
    session = SessionFactory(user=owner, bot=bot, extra_instruction="Answer in English.")
    for i in range(6):
        message_add(session, role="user" if i % 2 == 0 else "assistant", content=f"line {i}")
    failed = message_add(session, role="assistant", content="", status="failed", token_count=0)
    question = message_add(session, role="user", content="And now?")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=question
    )
    session_context_recount(session_id=session.pk)
    session.refresh_from_db()

    built = context_build(session=session, reply=reply)

    kinds = [(p["kind"], p["ref"]) for p in built.parts]
    assert kinds == [
        ("system", {"bot": bot.pk, "version": prompt_version("Be brief.")}),
        ("system", {"chat_instruction": "Answer in English."}),
        ("history", {"seqs": [[1, 6]]}),
        ("user", {"ids": [question.pk], "seqs": [8]}),
    ]
    assert failed.seq == 7  # noqa: PLR2004 - never sent, so not in the history's ranges
    assert sum(p["tokens"] for p in built.parts) == built.admission.selected_tokens
    model = session.chat_model
    assert built.parts[0]["tokens"] == count_message_tokens("Be brief.", model=model)
    assert built.parts[3]["tokens"] == count_message_tokens("And now?", model=model)


def _pair(session, content):
    exchange = do_message_pair_create(session=session, content=content, client_id=None)
    return exchange.user_message, exchange.assistant_message


def test_a_turn_writes_one_record_that_rebuilds_what_the_provider_received(
    fake_session, fake_openai
):
    message_add(fake_session, role="user", content="Earlier question", pinned=True)
    message_add(fake_session, role="assistant", content="Earlier answer")
    session_context_recount(session_id=fake_session.pk)
    fake_session.refresh_from_db()
    fake_openai.script(
        Reply(text="The answer.", usage={"prompt_tokens": 21, "completion_tokens": 3})
    )
    question, reply = _pair(fake_session, "A question")

    turn.turn_run(message_id=reply.pk)

    record = ContextRecord.objects.get(message_id=reply.pk)
    assert (record.session_id, record.bot_id) == (fake_session.pk, fake_session.bot_id)
    [call] = record.calls
    assert (call["round"], call["model"], call["usage"], call["finish_reason"]) == (
        0,
        "openai/fake-model",
        {"prompt_tokens": 21, "completion_tokens": 3},
        "stop",
    )
    assert call["budget"] == session_budget(fake_session).budget == 198_976  # noqa: PLR2004
    assert [(p["kind"], p["ref"]) for p in call["parts"]] == [
        ("system", {"bot": fake_session.bot_id, "version": prompt_version("You are a test bot.")}),
        ("pinned", {"ids": [Message.objects.get(session=fake_session, seq=1).pk], "seqs": [1]}),
        ("history", {"seqs": [[2, 2]]}),
        ("user", {"ids": [question.pk], "seqs": [3]}),
        ("tools", {"names": ["read_records", "search_records", "save_record"]}),
    ]
    assert isinstance(call["latency_ms"], int)
    assert call["waited_for_compaction"] is None
    # The prompt is stored once, as a version, not in the record.
    assert list(
        PromptVersion.objects.filter(bot=fake_session.bot).values_list("text", flat=True)
    ) == ["You are a test bot."]
    assert "You are a test bot." not in json.dumps(record.calls)
    [rebuilt] = record_rebuild(record)
    sent = fake_openai.requests[0]["messages"]
    assert json.dumps(rebuilt) == json.dumps(sent)


def test_the_record_adds_exactly_one_statement_to_a_turn(owner, fake_bot, fake_openai, monkeypatch):
    def turn_statements(session):
        fake_openai.script(Reply(text="Fine."))
        _, reply = _pair(session, "Hello there")
        with CaptureQueriesContext(connection) as queries:
            turn.turn_run(message_id=reply.pk)
        return [q["sql"] for q in queries.captured_queries]

    prompt_version_store(bot_id=fake_bot.pk, text=fake_bot.system_prompt)  # stored on create
    with_record = turn_statements(SessionFactory(user=owner, bot=fake_bot))
    monkeypatch.setattr(finished, "context_record_write", lambda **kwargs: None)
    without = turn_statements(SessionFactory(user=owner, bot=fake_bot))

    assert len(with_record) == len(without) + 1
    added = [s for s in with_record if "compaction_contextrecord" in s]
    assert len(added) == 1 and added[0].startswith("INSERT")  # noqa: PT018


def test_a_failed_call_is_recorded_with_its_error_and_no_usage(fake_session, fake_openai, settings):
    settings.LLM_MAX_RETRIES = 0
    fake_openai.script(Reply(status=500, error_message="boom"))
    _, reply = _pair(fake_session, "Hello")

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.status == "failed"
    [call] = ContextRecord.objects.get(message_id=reply.pk).calls
    assert call["usage"] is None
    assert call["error"].startswith("The model did not answer")
    assert [p["kind"] for p in call["parts"]] == ["system", "user", "tools"]


def test_a_reply_stopped_before_any_call_has_no_record(fake_session, fake_openai):
    _, reply = _pair(fake_session, "Hello")
    Message.objects.filter(pk=reply.pk).update(stop_requested=True)

    turn.turn_run(message_id=reply.pk)

    assert not ContextRecord.objects.filter(message_id=reply.pk).exists()
    assert fake_openai.requests == []


def test_api_serves_the_record_to_the_owner_and_staff_only(
    fake_session, fake_openai, owner_client, other_client, staff_client
):
    fake_openai.script(Reply(text="The answer."))
    question, reply = _pair(fake_session, "A question")
    turn.turn_run(message_id=reply.pk)
    url = f"/api/v1/messages/{reply.pk}/context/"

    answer = owner_client.get(url)
    assert answer.status_code == 200
    body = answer.json()
    assert body["message"] == reply.pk
    assert [p["kind"] for p in body["calls"][0]["parts"]] == ["system", "user", "tools"]
    assert "messages" not in body["calls"][0]

    with_payload = owner_client.get(url, {"payload": "1"}).json()
    assert json.dumps(with_payload["calls"][0]["messages"]) == json.dumps(
        fake_openai.requests[0]["messages"]
    )
    assert staff_client.get(url).json() == body

    denied = other_client.get(url)
    assert denied.status_code == 404
    assert denied.json()["error"]["code"] == "not_found"
    # A message without a record (the user's) and one that does not exist: the same answer.
    for missing in (question.pk, reply.pk + 10_000):
        answer = owner_client.get(f"/api/v1/messages/{missing}/context/")
        assert (answer.status_code, answer.json()["error"]["code"]) == (404, "not_found")
    assert ContextRecord.objects.filter(message_id=reply.pk).count() == 1
    schema = owner_client.get("/api/schema/", HTTP_ACCEPT="application/json").json()
    operation = schema["paths"]["/api/v1/messages/{message_id}/context/"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"message_id", "payload"}
    assert {"200", "404"} <= set(operation["responses"])


def _record_at(session, when):
    message = message_add(session, role="assistant", content="x")
    record = context_record_write(
        reply=message, bot_id=session.bot_id, calls=[{"round": 0, "parts": []}]
    )
    ContextRecord.objects.filter(pk=record.pk).update(created_at=when)
    return record


def test_the_sweep_deletes_records_older_than_the_retention(chat_session, settings, eager_tasks):
    now = timezone.now()
    old = _record_at(chat_session, now - datetime.timedelta(days=31))
    kept = _record_at(chat_session, now - datetime.timedelta(days=29))

    assert records_sweep(older_than_days=0) == 0  # 0 keeps everything
    assert ContextRecord.objects.count() == 2  # noqa: PLR2004

    from compaction.tasks import context_records_sweep

    settings.CONTEXT_RECORD_RETENTION_DAYS = 30
    context_records_sweep.delay()

    assert list(ContextRecord.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not ContextRecord.objects.filter(pk=old.pk).exists()
    assert "compaction.tasks.context_records_sweep" in {
        entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()
    }


def test_deleting_the_session_deletes_its_records(chat_session):
    _record_at(chat_session, timezone.now())
    ChatSession.objects.filter(pk=chat_session.pk).delete()
    assert ContextRecord.objects.count() == 0


def test_a_record_is_never_updated_through_its_admin(chat_session, staff):
    from django.contrib.admin.sites import site
    from django.test import RequestFactory

    record = _record_at(chat_session, timezone.now())
    request = RequestFactory().get("/admin/")
    request.user = staff
    model_admin = site._registry[ContextRecord]
    assert model_admin.has_change_permission(request, record) is False
    assert model_admin.has_add_permission(request) is False
    assert records.record_payload(record)["message"] == record.message_id


def _summary(session, *, first_seq=1, last_seq=2):
    return Summary.objects.create(
        session=session,
        level=1,
        text="The user talked about Lisbon.",
        token_count=20,
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=80,
        model="builtin/extractive",
        trigger="manual",
        retention=1.0,
    )


def test_the_admin_shows_the_record_beside_the_reply_and_the_replies_made_from_a_summary(
    owner, bot
):
    from django.test import Client

    from tests.factories import UserFactory

    session = SessionFactory(user=owner, bot=bot)
    message_add(session, role="user", content="one")
    message_add(session, role="assistant", content="two")
    summary = _summary(session)
    other = _summary(SessionFactory(user=owner, bot=bot))
    made_from = message_add(session, role="assistant", content="three")
    summary_part = {
        "kind": "summary",
        "ref": {"id": summary.pk, "level": 1, "seqs": [1, 2]},
        "tokens": 20,
    }
    context_record_write(
        reply=made_from,
        bot_id=bot.pk,
        calls=[
            {
                "round": 0,
                "model": "builtin/recall",
                "budget": 1000,
                "parts": [
                    summary_part,
                    {"kind": "history", "ref": {"seqs": [[3, 4]]}, "tokens": 9},
                ],
                "admission": {"selected_tokens": 29},
                "usage": {"prompt_tokens": 30, "completion_tokens": 4},
                "latency_ms": 12,
            }
        ],
    )
    not_from = message_add(session, role="assistant", content="four")
    context_record_write(reply=not_from, bot_id=bot.pk, calls=[{"round": 0, "parts": []}])
    admin_web = Client()
    admin_web.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    page = admin_web.get(f"/admin/compaction/summary/{summary.pk}/change/").content.decode()
    assert f"reply #{made_from.pk}" in page
    assert f"reply #{not_from.pk}" not in page
    assert records.records_for_summary(summary=summary) == [made_from.context_record]
    assert records.records_for_summary(summary=other) == []

    page = admin_web.get(f"/admin/bots/message/{made_from.pk}/change/").content.decode()
    assert "what the model saw" in page.lower()
    assert f"summary #{summary.pk} (level 1, messages 1–2) — 20 tokens" in page
    assert "history: messages 3–4 — 9 tokens" in page
    assert "provider 30 in / 4 out" in page


def test_a_rolled_back_prompt_version_is_not_remembered(chat_session):
    """``_known_versions`` remembers a (bot, version) only once its row is committed: a prompt
    saved in a transaction that rolls back leaves no row, so the next store writes it, and a
    record naming that version still finds its system prompt."""
    bot = chat_session.bot
    text = "You answer in haiku, rolled back once."
    version = prompt_version(text)

    class Undone(Exception):
        pass

    with pytest.raises(Undone), transaction.atomic():
        assert prompt_version_store(bot_id=bot.pk, text=text) == version
        assert PromptVersion.objects.filter(bot=bot, version=version).exists()
        raise Undone

    assert not PromptVersion.objects.filter(bot=bot, version=version).exists()
    assert (bot.pk, version) not in records._known_versions

    assert prompt_version_store(bot_id=bot.pk, text=text) == version
    assert list(
        PromptVersion.objects.filter(bot=bot, version=version).values_list("text", flat=True)
    ) == [text]
    assert (bot.pk, version) in records._known_versions
    # stored once: remembered, a second store writes nothing
    with CaptureQueriesContext(connection) as queries:
        prompt_version_store(bot_id=bot.pk, text=text)
    assert len(queries) == 0


def test_the_sweep_keeps_prompt_versions_so_a_later_record_rebuilds(chat_session):
    """The retention sweep deletes records, never prompt versions: a version this process
    remembers still has its row after a sweep."""
    bot = chat_session.bot
    text = "Kept across the sweep."
    version = prompt_version_store(bot_id=bot.pk, text=text)
    _record_at(chat_session, timezone.now() - datetime.timedelta(days=40))
    assert records_sweep(older_than_days=30) == 1
    assert ContextRecord.objects.count() == 0
    assert (bot.pk, version) in records._known_versions
    assert PromptVersion.objects.filter(bot=bot, version=version).exists()
