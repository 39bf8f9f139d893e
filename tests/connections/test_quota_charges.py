"""Every provider call counts (issue 30 items 4 and 10, docs/connections.md "Daily token limits"):
summaries (soft, hard, manual), re-summaries, fusion and embeddings are charged to the session's
user (and the API key the action came through), checked before the call like a chat turn; a
spent limit refuses them with ``quota_exceeded`` and no provider call. An output reserve never
makes a limit with room refuse; a key's limit holds on ``/api/v1/`` too.

Budget (``small_bot``): W 2200, R 200 -> B 2000, S 1000, H 1500, T 800."""

import datetime as dt

import pytest
from rest_framework.test import APIClient

from bots.models import Message
from chat_platform.errors import QuotaExceeded
from compaction import engine
from compaction.models import CompactionEvent, Summary
from compaction.pipeline import context_build
from connections import usage
from connections.models import TokenCounter, UserQuota
from memory import embeddings
from openai_api.keys import key_create
from tests.compaction.test_engine import GOOD, add_history, add_turn, recount
from tests.factories import SessionFactory
from tests.fakeopenai import Reply
from turns.turn import turn_run

pytestmark = pytest.mark.django_db

SUMMARY_USAGE = {"prompt_tokens": 70, "completion_tokens": 30, "total_tokens": 100}


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """One attempt per summariser call: request counts stay exact."""


@pytest.fixture
def fast_llm(settings):
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01


@pytest.fixture
def small_bot(fake_bot):
    fake_bot.context_window = 2200
    fake_bot.max_output_tokens = 200
    fake_bot.system_prompt = ""
    fake_bot.memory_index_size = 0
    fake_bot.save()
    return fake_bot


@pytest.fixture
def session(owner, small_bot):
    return SessionFactory(user=owner, bot=small_bot)


def spend(subject: str, *, limit_used: int) -> None:
    TokenCounter.objects.update_or_create(
        subject=subject, day=usage.today(), defaults={"used": limit_used, "reserved": 0}
    )


def counter(subject: str) -> tuple[int, int]:
    row = TokenCounter.objects.filter(subject=subject, day=usage.today()).first()
    return (row.used, row.reserved) if row else (0, 0)


def tomorrow() -> str:
    return f"{(usage.today() + dt.timedelta(days=1)).isoformat()}T00:00:00+00:00"


def compacted(session, fake_openai):
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    result = engine.compaction_manual(session=session)
    assert result.outcome == "compacted", result
    return result.summary


def key_client(user, **fields) -> tuple[object, APIClient]:
    key, text = key_create(user=user, name="editor", **fields)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {text}")
    return key, client


# --- refused before the call ------------------------------------------------------------------


def test_resummarise_with_a_spent_quota_is_refused_and_calls_no_model(
    owner, owner_client, session, fake_openai
):
    summary = compacted(session, fake_openai)
    UserQuota.objects.create(user=owner, daily_token_limit=600)
    spend(f"user:{owner.pk}", limit_used=600)
    calls = len(fake_openai.requests)

    response = owner_client.post(
        f"/api/v1/summaries/{summary.pk}/resummarise/", {"focus": "the budget"}, format="json"
    )

    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {
        "resets_at": tomorrow(),
        "limit": 600,
        "used": 600,
        "scope": "user",
    }
    assert len(fake_openai.requests) == calls
    assert not CompactionEvent.objects.filter(trigger="resummarise").exists()
    assert list(Summary.objects.filter(session=session).values_list("pk", "status")) == [
        (summary.pk, "active")
    ]
    assert counter(f"user:{owner.pk}") == (600, 0)


def test_compact_with_a_spent_quota_is_refused_and_calls_no_model(
    owner, owner_client, session, fake_openai
):
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=600)
    spend(f"user:{owner.pk}", limit_used=600)
    messages = Message.objects.filter(session=session).count()

    api = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    command = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
    )

    for response in (api, command):
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "quota_exceeded"
        assert response.json()["error"]["details"]["resets_at"] == tomorrow()
    assert fake_openai.requests == []
    assert not CompactionEvent.objects.filter(session=session).exists()
    assert not Summary.objects.filter(session=session).exists()
    assert Message.objects.filter(session=session).count() == messages  # no command stored


def test_compact_in_chat_that_the_limit_cannot_fit_says_what_ran_out_and_when_it_resets(
    owner, owner_client, session, fake_openai
):
    """Issue 32, Deliver 7: a limit with room (599 of 600) takes the command, but not the
    summariser's input; its notice says whose limit, how much is used and when it resets (it
    said "Compaction failed: your daily token limit has no room for the summariser's input")."""
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=600)
    spend(f"user:{owner.pk}", limit_used=599)

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["compaction"]["outcome"], body["compaction"]["reason"]) == (
        "failed",
        "quota_exceeded",
    )
    reset = usage.today() + dt.timedelta(days=1)
    assert body["notice"]["content"] == (
        "Compaction did not run: your daily token limit has too little left for the "
        "summariser's input (599 of 600 tokens used today); it resets at 00:00 UTC on "
        f"{reset:%a} {reset.day} {reset:%b}. Nothing was changed."
    )
    assert fake_openai.requests == []
    assert not Summary.objects.filter(session=session).exists()
    assert counter(f"user:{owner.pk}") == (599, 0)


def test_a_summary_is_charged_to_the_user_who_asked_for_it(
    owner, owner_client, session, fake_openai
):
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=100_000)
    fake_openai.script(Reply(text=GOOD, usage=SUMMARY_USAGE))

    response = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")

    assert response.status_code == 200
    assert response.json()["outcome"] == "compacted"
    assert len(fake_openai.requests) == 1
    assert counter(f"user:{owner.pk}") == (100, 0)


def test_soft_compaction_with_a_spent_quota_is_skipped_and_calls_no_model(
    owner, session, fake_openai
):
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=600)
    spend(f"user:{owner.pk}", limit_used=600)

    result = engine.compaction_soft(session_id=session.pk)

    assert (result.outcome, result.reason) == ("skipped", "quota_exceeded")
    assert fake_openai.requests == []
    assert list(CompactionEvent.objects.values_list("trigger", "outcome", "reason")) == [
        ("soft", "skipped", "quota_exceeded")
    ]
    assert not Summary.objects.exists()


def test_a_hard_compaction_the_quota_refuses_fails_the_turn_visibly(owner, session, fake_openai):
    """The turn was admitted (its context fits), but the summariser's input does not fit beside
    what other running calls hold: quota_exceeded, not a silent overspend, no call."""
    add_history(session, [300, 300, 300, 300, 300])
    _, reply = add_turn(session, tokens=100)
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=2000)
    subject = f"user:{owner.pk}"
    spend(subject, limit_used=0)
    TokenCounter.objects.filter(subject=subject).update(reserved=1950)  # another call sends

    with pytest.raises(QuotaExceeded):
        context_build(session=session, reply=reply)

    assert fake_openai.requests == []
    assert not Summary.objects.exists()
    assert counter(subject) == (0, 1950)


def test_a_hard_compaction_in_a_turn_is_charged_to_the_turns_user(owner, session, fake_openai):
    """The turn holds its context (1,600); the summariser it needs fits in that hold and is
    charged to the same user as the reply."""
    add_history(session, [300, 300, 300, 300, 300])
    _, reply = add_turn(session, tokens=100)
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=2000)
    fake_openai.script(
        Reply(text=GOOD, usage=SUMMARY_USAGE),
        Reply(
            text="Done.", usage={"prompt_tokens": 40, "completion_tokens": 2, "total_tokens": 42}
        ),
    )

    turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert reply.status == "complete"
    assert [bool(r.get("stream")) for r in fake_openai.requests] == [False, True]
    assert list(CompactionEvent.objects.values_list("trigger", "outcome")) == [
        ("hard", "compacted")
    ]
    assert counter(f"user:{owner.pk}") == (100 + 42, 0)


# --- embeddings --------------------------------------------------------------------------------


def test_embedding_calls_are_counted_in_the_users_usage(owner, session, small_bot, fake_openai):
    small_bot.embedding_model = "openai/fake-embedding"
    small_bot.save()
    UserQuota.objects.create(user=owner, daily_token_limit=100_000)

    vectors = embeddings.embed_texts(
        small_bot, ["one two three", "four five"], user_id=session.user_id
    )

    assert len(vectors) == 2
    assert len(fake_openai.embedding_requests) == 1
    # the fake provider reports its usage as the words of the inputs: 3 + 2
    assert counter(f"user:{owner.pk}") == (5, 0)


def test_an_embedding_with_a_spent_quota_is_not_sent(owner, session, small_bot, fake_openai):
    small_bot.embedding_model = "openai/fake-embedding"
    small_bot.save()
    UserQuota.objects.create(user=owner, daily_token_limit=10)
    spend(f"user:{owner.pk}", limit_used=10)

    with pytest.raises(QuotaExceeded):
        embeddings.embed_texts(small_bot, ["one two three"], user_id=session.user_id)
    assert embeddings.query_vector(small_bot, "one two", user_id=session.user_id) is None

    assert fake_openai.embedding_requests == []
    assert counter(f"user:{owner.pk}") == (10, 0)


# --- API keys on /api/v1/ ----------------------------------------------------------------------


def test_a_key_whose_daily_limit_is_spent_is_refused_on_an_api_v1_send(owner, session, fake_openai):
    key, client = key_client(owner, daily_token_limit=50)
    spend(f"key:{key.pk}", limit_used=50)

    response = client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "hello"}, format="json"
    )

    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"resets_at": tomorrow(), "limit": 50, "used": 50, "scope": "key"}
    assert not Message.objects.filter(session=session).exists()
    assert fake_openai.requests == []


def test_a_key_whose_daily_limit_is_spent_cannot_compact_or_resummarise(
    owner, session, fake_openai
):
    summary = compacted(session, fake_openai)
    key, client = key_client(owner, daily_token_limit=50)
    spend(f"key:{key.pk}", limit_used=50)
    calls = len(fake_openai.requests)

    compact = client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    resummarise = client.post(f"/api/v1/summaries/{summary.pk}/resummarise/", {}, format="json")

    for response in (compact, resummarise):
        assert response.status_code == 429
        assert response.json()["error"]["details"]["scope"] == "key"
    assert len(fake_openai.requests) == calls


def test_a_summary_asked_for_with_a_key_is_charged_to_the_key_too(owner, session, fake_openai):
    add_history(session, [300, 300, 300, 300, 50, 50])
    recount(session)
    key, client = key_client(owner, daily_token_limit=10_000)
    fake_openai.script(Reply(text=GOOD, usage=SUMMARY_USAGE))

    response = client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")

    assert response.status_code == 200
    assert counter(f"key:{key.pk}") == (100, 0)


# --- the output reserve ------------------------------------------------------------------------


def test_two_concurrent_reservations_with_nothing_used_both_run():
    """Quota 1,000, nothing used: two turns, each sending 100 with an output reserve of 1,024
    (reserves summing to 2,248), both start; while they run a send is still taken."""
    limits = [usage.Limit("user:41", 1000)]
    first = usage.quota_reserve(limits, tokens=100 + 1024, may_exceed=1024)
    second = usage.quota_reserve(limits, tokens=100 + 1024, may_exceed=1024)
    usage.quota_check(limits)  # not spent: 0 used, 200 being sent
    assert counter("user:41") == (0, 200)
    usage.quota_settle(first, used=400)
    usage.quota_settle(second, used=300)
    assert counter("user:41") == (700, 0)


def test_what_running_calls_send_still_holds_the_budget():
    """Only inputs hold: 950 being sent leaves room for 50, not 51."""
    limits = [usage.Limit("user:42", 1000)]
    running = usage.quota_reserve(limits, tokens=950 + 500, may_exceed=500)
    with pytest.raises(QuotaExceeded):
        usage.quota_reserve(limits, tokens=51 + 500, may_exceed=500)
    fits = usage.quota_reserve(limits, tokens=50 + 500, may_exceed=500)
    assert counter("user:42") == (0, 1000)
    usage.quota_settle(running, used=0)
    usage.quota_settle(fits, used=0)
    assert counter("user:42") == (0, 0)


@pytest.mark.django_db(transaction=True)  # the turn runs after the send's commit
def test_a_reply_a_keys_limit_stops_says_when_it_resets_on_a_rest_wait(
    owner, session, fake_openai, eager_tasks
):
    """A key whose limit is too small for the reply (the send is accepted, the turn is
    refused): the 429 of a ``wait`` says when it resets (``details.resets_at``), as a send
    refused at once does. It carried only the two messages."""
    key, client = key_client(owner, daily_token_limit=5)

    response = client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "hello there, a question", "wait": True},
        format="json",
    )

    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"]["resets_at"] == tomorrow()
    assert (error["details"]["limit"], error["details"]["scope"]) == (5, "key")
    assert error["details"]["assistant_message"]["status"] == "failed"
    assert error["details"]["user_message"]["content"] == "hello there, a question"
    assert fake_openai.requests == []
