"""A key's daily limit holds for the replies it asks for on /api/v1/ (issue 30, deliver 9;
docs/openai-api.md "Keys", docs/connections.md "Daily token limits"): the turn that
answers a message sent (or a reply regenerated, a message edited) with a key reserves against the
key's limit before the provider call and settles the provider-reported usage to it, exactly as a
``/v1/chat/completions`` turn does; once spent the next send is refused with nothing stored and
no provider call; a send signed in otherwise is charged to no key."""

import datetime as dt
import time

import pytest
from rest_framework.test import APIClient

from bots.models import ChatSession, Message
from connections import usage
from connections.models import TokenCounter
from memory.models import MemoryRecord, MessageIndex
from openai_api.keys import key_create
from tests.bots.test_rooms import _fake_bot
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.fakeopenai import Reply
from turns import hooks as turn_hooks

# Real commits: the turn is handed over on commit and, with eager tasks, runs in the request.
pytestmark = pytest.mark.django_db(transaction=True)

USAGE = {"prompt_tokens": 500, "completion_tokens": 150, "total_tokens": 650}


def _key_client(user, **fields) -> tuple[object, APIClient]:
    key, text = key_create(user=user, name="script", **fields)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {text}")
    return key, client


def _counter(subject: str) -> tuple[int, int]:
    row = TokenCounter.objects.filter(subject=subject, day=usage.today()).first()
    return (row.used, row.reserved) if row else (0, 0)


def _send(client, session, content, **body):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True, **body},
        format="json",
    )


def _tomorrow() -> str:
    return f"{(usage.today() + dt.timedelta(days=1)).isoformat()}T00:00:00+00:00"


def test_a_reply_sent_with_a_key_is_charged_to_the_key_and_a_spent_key_is_refused(
    owner, fake_session, fake_openai, eager_tasks
):
    key, client = _key_client(owner, daily_token_limit=600)
    fake_openai.script(Reply(text="Charged.", usage=USAGE))

    first = _send(client, fake_session, "one")

    assert first.status_code == 201
    assert first.json()["assistant_message"]["content"] == "Charged."
    # Exactly what the provider reported, nothing left held.
    assert _counter(f"key:{key.pk}") == (650, 0)
    assert len(fake_openai.requests) == 1
    stored = Message.objects.filter(session=fake_session).count()

    second = _send(client, fake_session, "two")

    assert second.status_code == 429
    error = second.json()["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {"resets_at": _tomorrow(), "limit": 600, "used": 650, "scope": "key"}
    assert Message.objects.filter(session=fake_session).count() == stored
    assert not Message.objects.filter(content="two").exists()
    assert len(fake_openai.requests) == 1
    assert _counter(f"key:{key.pk}") == (650, 0)


def test_a_reply_sent_without_wait_is_charged_to_the_key_too(
    owner, fake_session, fake_openai, eager_tasks
):
    key, client = _key_client(owner, daily_token_limit=10_000)
    fake_openai.script(Reply(text="Later.", usage=USAGE))

    response = _send(client, fake_session, "one", wait=False)

    assert response.status_code in (201, 202)
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert (reply.status, reply.content) == ("complete", "Later.")
    assert _counter(f"key:{key.pk}") == (650, 0)


def test_a_session_send_is_charged_to_no_key(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    key, client = _key_client(owner, daily_token_limit=10_000)
    fake_openai.script(Reply(text="By key.", usage=USAGE), Reply(text="By page.", usage=USAGE))
    assert _send(client, fake_session, "with the key").status_code == 201
    assert _counter(f"key:{key.pk}") == (650, 0)

    signed_in = _send(owner_client, fake_session, "signed in")

    assert signed_in.status_code == 201
    assert signed_in.json()["assistant_message"]["content"] == "By page."
    assert _counter(f"key:{key.pk}") == (650, 0)
    assert list(TokenCounter.objects.values_list("subject", flat=True)) == [f"key:{key.pk}"]
    assert len(fake_openai.requests) == 2


def test_a_reply_regenerated_with_a_key_is_charged_to_the_key(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="First.", usage=USAGE), Reply(text="Second.", usage=USAGE))
    sent = _send(owner_client, fake_session, "question")
    assert sent.status_code == 201
    key, client = _key_client(owner, daily_token_limit=10_000)

    response = client.post(
        f"/api/v1/messages/{sent.json()['assistant_message']['id']}/regenerate/", format="json"
    )

    assert response.status_code == 201
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert (reply.status, reply.content) == ("complete", "Second.")
    assert _counter(f"key:{key.pk}") == (650, 0)


def test_a_message_edited_with_a_key_is_charged_to_the_key(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="First.", usage=USAGE), Reply(text="Edited.", usage=USAGE))
    sent = _send(owner_client, fake_session, "question")
    assert sent.status_code == 201
    key, client = _key_client(owner, daily_token_limit=10_000)

    response = client.post(
        f"/api/v1/messages/{sent.json()['user_message']['id']}/edit/",
        {"content": "a better question"},
        format="json",
    )

    assert response.status_code == 201
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert (reply.status, reply.content) == ("complete", "Edited.")
    assert _counter(f"key:{key.pk}") == (650, 0)


def test_a_spent_key_cannot_regenerate_or_edit(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="First.", usage=USAGE))
    sent = _send(owner_client, fake_session, "question").json()
    key, client = _key_client(owner, daily_token_limit=600)
    TokenCounter.objects.create(subject=f"key:{key.pk}", day=usage.today(), used=600)
    stored = Message.objects.count()

    regenerate = client.post(
        f"/api/v1/messages/{sent['assistant_message']['id']}/regenerate/", format="json"
    )
    edit = client.post(
        f"/api/v1/messages/{sent['user_message']['id']}/edit/", {"content": "again"}, format="json"
    )

    for response in (regenerate, edit):
        assert response.status_code == 429
        error = response.json()["error"]
        assert error["code"] == "quota_exceeded"
        assert error["details"] == {
            "resets_at": _tomorrow(),
            "limit": 600,
            "used": 600,
            "scope": "key",
        }
    assert Message.objects.count() == stored
    assert fake_session.user.chat_sessions.count() == 1
    assert len(fake_openai.requests) == 1


@pytest.fixture
def room(owner, owner_client, fake_openai, monkeypatch):
    """Planner (the default bot) and Critic, made through the API (as tests/bots/test_rooms.py)."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _fake_bot(owner, fake_openai, "Planner", context_window=4000, max_output_tokens=500)
    critic = _fake_bot(owner, fake_openai, "Critic", context_window=8000, max_output_tokens=500)
    session_id = owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json").json()[
        "id"
    ]
    added = owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": critic.pk}, format="json"
    )
    assert added.status_code == 201
    return ChatSession.objects.get(pk=session_id), planner, critic


def test_a_hand_over_a_key_send_sets_off_is_charged_to_the_key_too(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, _planner, _critic = room
    key, client = _key_client(owner, daily_token_limit=10_000)
    fake_openai.script(
        Reply(text="Over to you, @critic.", usage=USAGE),
        Reply(text="Done.", usage={"prompt_tokens": 40, "completion_tokens": 2}),
    )

    with django_capture_on_commit_callbacks(execute=True):
        response = _send(client, session, "Start")

    assert response.status_code == 201
    replies = Message.objects.filter(session=session, role="assistant").order_by("seq")
    assert [(m.content, m.status, m.hop) for m in replies] == [
        ("Over to you, @critic.", "complete", 0),
        ("Done.", "complete", 1),
    ]
    assert len(fake_openai.requests) == 2
    assert _counter(f"key:{key.pk}") == (650 + 42, 0)


def test_the_turns_options_hook_reads_nothing_for_a_reply_without_a_key(
    owner, owner_client, fake_session, fake_openai, eager_tasks, django_assert_num_queries
):
    """The claim loads the reply whole: a reply asked for without a key costs the hook no
    statement, one with a key exactly one (its limit as it stands now)."""
    key, client = _key_client(owner, daily_token_limit=600)
    plain = owner_client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/", {"content": "a"}, format="json"
    )
    keyed = client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/", {"content": "b"}, format="json"
    )
    plain_reply = Message.objects.select_related("reply_to").get(
        pk=plain.json()["assistant_message"]["id"]
    )
    keyed_reply = Message.objects.select_related("reply_to").get(
        pk=keyed.json()["assistant_message"]["id"]
    )
    assert (plain_reply.charged_to, keyed_reply.charged_to) == ("", f"key:{key.pk}")

    with django_assert_num_queries(0):
        assert turn_hooks.options_for(plain_reply) == turn_hooks.TurnOptions()
    with django_assert_num_queries(1):
        options = turn_hooks.options_for(keyed_reply)
    assert options == turn_hooks.TurnOptions(quota=(usage.Limit(f"key:{key.pk}", 600),))


def test_the_soft_compaction_a_keys_turn_set_off_is_charged_to_the_key_too(
    owner, fake_session, fake_openai, eager_tasks
):
    """The summariser call of the soft compaction after a turn asked for with a key counts on
    the key as on its user (it counted on the user alone: a key's limit missed every summary)."""
    from bots.transitions import session_context_recount
    from compaction.models import CompactionEvent
    from connections.models import UserQuota
    from tests.factories import message_add

    bot = fake_session.bot
    bot.context_window, bot.max_output_tokens = 3_000, 500
    bot.compaction_model = "builtin/extractive"
    bot.save(update_fields=["context_window", "max_output_tokens", "compaction_model"])
    for i in range(16):
        message_add(
            fake_session, role="user", content=f"Fact {i}: the code of box {i} is Z-{i:03d}. " * 6
        )
        message_add(fake_session, role="assistant", content=f"Noted: box {i} is Z-{i:03d}.")
    session_context_recount(session_id=fake_session.pk)
    key, client = _key_client(owner, daily_token_limit=1_000_000)
    UserQuota.objects.create(user=owner, daily_token_limit=1_000_000)
    fake_openai.script(Reply(text="Fine.", usage=USAGE))
    assert _send(client, fake_session, "And box 3?").status_code == 201
    soft = CompactionEvent.objects.filter(session=fake_session, trigger="soft")
    assert soft.filter(outcome="compacted").exists()
    user_used, key_used = _counter(f"user:{owner.pk}")[0], _counter(f"key:{key.pk}")[0]
    assert user_used > 650  # the reply and the summariser's call
    assert key_used == user_used


def test_the_embedding_of_a_keys_turn_is_charged_to_the_key(
    owner, fake_session, fake_openai, inprocess_tasks
):
    """The turn's question and reply are embedded after it, on another thread (embedded mode)
    or a worker: the key the turn came through pays for that call too."""
    fake_session.bot.embedding_model = "openai/fake-embedding"
    fake_session.bot.save()
    key, client = _key_client(owner, daily_token_limit=10_000)
    fake_openai.script(Reply(text="Charged reply.", usage=USAGE))

    sent = _send(client, fake_session, "one two three")

    assert sent.status_code == 201
    deadline = time.monotonic() + 30
    while not fake_openai.embedding_requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert inprocess_tasks(30)
    deadline = time.monotonic() + 10
    while _counter(f"key:{key.pk}")[0] == 650 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [r["input"] for r in fake_openai.embedding_requests] == [
        ["one two three", "Charged reply."]
    ]
    # The turn's 650, then the embedding's 5 (the fake counts the inputs' words: 3 + 2).
    assert _counter(f"key:{key.pk}") == (655, 0)

    # Taken into a snapshot, as a compaction would, so that the web's search compares vectors.
    snapshot = MemoryRecord.objects.create(
        session=fake_session,
        name="snapshot_1_2",
        kind="snapshot",
        body="[1] user: one two three",
        first_seq=1,
        last_seq=2,
        indexed=True,
    )
    MessageIndex.objects.filter(session=fake_session).update(record=snapshot)
    # A search through the key: its question is embedded on a task thread, for the key too.
    found = client.get(f"/api/v1/sessions/{fake_session.pk}/records/", {"q": "four five"})

    assert found.status_code == 200
    assert [r["input"] for r in fake_openai.embedding_requests][1:] == [["four five"]]
    assert _counter(f"key:{key.pk}") == (657, 0)
