"""Daily token limits: refused before anything is stored, over REST and the websocket; the
counter is in the database; concurrent turns cannot all pass on one remaining budget."""

import datetime as dt

import pytest
from django.contrib.auth.models import Group

from bots.models import Message
from chat_platform.errors import QuotaExceeded
from connections import usage
from connections.models import GroupQuota, TokenCounter, UserQuota
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

USAGE_20 = {"prompt_tokens": 15, "completion_tokens": 5, "total_tokens": 20}


def _send(client, session, content):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True},
        format="json",
    )


def test_a_user_over_the_limit_gets_quota_exceeded_and_nothing_is_stored(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    UserQuota.objects.create(user=owner, daily_token_limit=20)
    fake_openai.script(Reply(text="ok", usage=USAGE_20))
    assert _send(owner_client, fake_session, "one").status_code == 201
    counter = TokenCounter.objects.get(subject=f"user:{owner.pk}")
    assert (counter.used, counter.reserved, counter.day) == (20, 0, usage.today())

    response = _send(owner_client, fake_session, "two")
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    tomorrow = usage.today() + dt.timedelta(days=1)
    assert error["details"] == {
        "resets_at": f"{tomorrow.isoformat()}T00:00:00+00:00",
        "limit": 20,
        "used": 20,
        "scope": "user",
    }
    assert not Message.objects.filter(content="two").exists()
    assert len(fake_openai.requests) == 1


def test_a_reply_that_runs_past_the_limit_finishes_and_the_next_send_says_so(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    """Issue 32, Deliver 7, "during a reply": what a reply sends is held before its call, its
    output never is (docs/connections.md "The hold rule"), so a reply that writes past the
    limit finishes whole; the limit is then used up, and the next message is refused in words
    that say by how much and when it resets."""
    UserQuota.objects.create(user=owner, daily_token_limit=30)
    fake_openai.script(
        Reply(
            text="A long answer.",
            usage={"prompt_tokens": 15, "completion_tokens": 30, "total_tokens": 45},
        )
    )
    first = _send(owner_client, fake_session, "one")
    assert first.status_code == 201, first.json()
    reply = first.json()["assistant_message"]
    assert (reply["status"], reply["content"]) == ("complete", "A long answer.")
    counter = TokenCounter.objects.get(subject=f"user:{owner.pk}")
    assert (counter.used, counter.reserved) == (45, 0)

    response = _send(owner_client, fake_session, "two")
    assert response.status_code == 429
    error = response.json()["error"]
    tomorrow = (usage.today() + dt.timedelta(days=1)).isoformat()
    assert error["message"] == (
        f"Your daily limit of 30 tokens is spent (45 used); it resets at {tomorrow}T00:00:00+00:00."
    )
    assert error["details"] == {
        "resets_at": f"{tomorrow}T00:00:00+00:00",
        "limit": 30,
        "used": 45,
        "scope": "user",
    }
    assert not Message.objects.filter(content="two").exists()
    assert len(fake_openai.requests) == 1


def test_the_counter_survives_a_restart(owner):
    """The counter is a database row: a new process (no cache, no Redis) reads the same."""
    UserQuota.objects.create(user=owner, daily_token_limit=100)
    TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=100)
    with pytest.raises(QuotaExceeded) as caught:
        usage.quota_check(usage.user_limits(owner.pk))
    assert caught.value.details["used"] == 100


def test_a_group_limit_applies_and_the_users_own_wins(owner):
    team = Group.objects.create(name="team")
    big = Group.objects.create(name="big")
    owner.groups.add(team, big)
    GroupQuota.objects.create(group=team, daily_token_limit=50)
    GroupQuota.objects.create(group=big, daily_token_limit=500)
    assert usage.user_limits(owner.pk) == [usage.Limit(f"user:{owner.pk}", 500)]
    UserQuota.objects.create(user=owner, daily_token_limit=10)
    assert usage.user_limits(owner.pk) == [usage.Limit(f"user:{owner.pk}", 10)]


def test_what_a_call_sends_must_fit_beside_what_is_used():
    """Without an output reserve, everything a call may spend is what it sends: it must fit."""
    limit = [usage.Limit("user:1", 100)]
    TokenCounter.objects.create(subject="user:1", day=usage.today(), used=90)
    with pytest.raises(QuotaExceeded):
        usage.quota_reserve(limit, tokens=50)  # 90 + 50 > 100
    first = usage.quota_reserve(limit, tokens=10)  # 90 + 10 == 100
    with pytest.raises(QuotaExceeded):
        usage.quota_reserve(limit, tokens=1)  # 90 + 10 held + 1 > 100 while the first runs
    usage.quota_settle(first, used=50)
    counter = TokenCounter.objects.get(subject="user:1")
    assert (counter.used, counter.reserved) == (140, 0)
    with pytest.raises(QuotaExceeded):
        usage.quota_reserve(limit, tokens=1)


def test_turns_that_fit_run_side_by_side_and_settle_exactly():
    limit = [usage.Limit("key:7", 100), usage.Limit("user:2", 1000)]
    a = usage.quota_reserve(limit, tokens=40)
    b = usage.quota_reserve(limit, tokens=60)  # 0 + 40 + 60 <= 100
    with pytest.raises(QuotaExceeded):
        usage.quota_reserve(limit, tokens=1)
    # a refusal on one subject reserves on none
    assert TokenCounter.objects.get(subject="user:2").reserved == 100
    usage.quota_settle(a, used=30)
    usage.quota_settle(b, used=10)
    rows = dict(TokenCounter.objects.values_list("subject", "used"))
    assert rows == {"key:7": 40, "user:2": 40}
    assert set(TokenCounter.objects.values_list("reserved", flat=True)) == {0}


def test_a_turn_refused_by_a_concurrent_reservation_fails_visibly(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    UserQuota.objects.create(user=owner, daily_token_limit=1000)
    # another turn of this user holds nearly all of today's budget
    TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=0, reserved=999)
    response = _send(owner_client, fake_session, "hello")
    assert response.status_code == 429
    assert response.json()["error"]["code"] == "quota_exceeded"
    reply = Message.objects.get(pk=response.json()["error"]["details"]["assistant_message"]["id"])
    assert (reply.status, reply.error_code) == ("failed", "quota_exceeded")
    assert fake_openai.requests == []
    assert TokenCounter.objects.get(subject=f"user:{owner.pk}").reserved == 999


@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_the_websocket_answers_quota_exceeded_and_stores_nothing(owner, fake_session):
    import json

    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator
    from rest_framework.authtoken.models import Token

    from chat_platform.asgi import application

    @database_sync_to_async
    def spend():
        UserQuota.objects.create(user=owner, daily_token_limit=10)
        TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=10)
        return Token.objects.get_or_create(user=owner)[0].key

    token = await spend()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{fake_session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await communicator.send_to(json.dumps({"type": "message.send", "content": "hi"}))
    frame = json.loads(await communicator.receive_from(timeout=10))
    assert frame["type"] == "error"
    assert frame["error"]["code"] == "quota_exceeded"
    assert frame["error"]["details"]["limit"] == 10
    await communicator.disconnect()
    count = await database_sync_to_async(Message.objects.filter(session=fake_session).count)()
    assert count == 0


def test_only_the_output_reserve_may_cross_the_limit():
    limit = [usage.Limit("user:3", 100)]
    TokenCounter.objects.create(subject="user:3", day=usage.today(), used=90)
    # context 10 (50 - 40 of output) fits beside 90 used: reserved, though it may end at 140
    first = usage.quota_reserve(limit, tokens=50, may_exceed=40)
    with pytest.raises(QuotaExceeded):
        # context 1 does not fit beside 90 used + the 10 the first sends
        usage.quota_reserve(limit, tokens=5, may_exceed=4)
    usage.quota_settle(first, used=50)
    counter = TokenCounter.objects.get(subject="user:3")
    assert (counter.used, counter.reserved) == (140, 0)  # over by the first turn's output only


def test_a_context_that_does_not_fit_is_refused_even_alone():
    limit = [usage.Limit("user:4", 100)]
    with pytest.raises(QuotaExceeded) as caught:
        usage.quota_reserve(limit, tokens=151, may_exceed=50)  # context 101 > 100
    assert caught.value.details["limit"] == 100
    assert TokenCounter.objects.get(subject="user:4").reserved == 0
    exact = usage.quota_reserve(limit, tokens=150, may_exceed=50)  # context 100 == 100
    # only what the call sends is held: the output reserve never is
    assert TokenCounter.objects.get(subject="user:4").reserved == 100
    usage.quota_settle(exact, used=0)


def test_concurrent_reservations_on_postgres_stop_at_the_limit_whatever_the_order():
    """Eight turns reserve at the same moment, each on its own database connection: the
    conditional UPDATE lets exactly as many through as fit (context 20 each beside what the
    others send: 0+20, 20+20, … 80+20 <= 100, 100+20 > 100; their output reserves of 10 are
    never held), so the day ends over the limit by at most the outputs of the turns that ran
    at once."""
    import threading

    from django.db import connection

    limit = [usage.Limit("user:5", 100)]
    TokenCounter.objects.create(subject="user:5", day=usage.today())
    start = threading.Barrier(8)
    outcomes: list[object] = []
    lock = threading.Lock()

    def turn() -> None:
        try:
            start.wait(timeout=30)
            try:
                result: object = usage.quota_reserve(limit, tokens=30, may_exceed=10)
            except QuotaExceeded:
                result = "refused"
            with lock:
                outcomes.append(result)
        finally:
            connection.close()

    threads = [threading.Thread(target=turn) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    reservations = [o for o in outcomes if isinstance(o, usage.Reservation)]
    assert (len(reservations), outcomes.count("refused")) == (5, 3)
    assert TokenCounter.objects.get(subject="user:5").reserved == 100
    for reservation in reservations:
        usage.quota_settle(reservation, used=30)
    counter = TokenCounter.objects.get(subject="user:5")
    assert (counter.used, counter.reserved) == (150, 0)


def test_a_turn_whose_context_does_not_fit_the_rest_of_the_day_fails_visibly(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    UserQuota.objects.create(user=owner, daily_token_limit=1000)
    # 999 used: under the limit (the message is taken), but no context fits in what is left
    TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=999)
    response = _send(owner_client, fake_session, "hello")
    assert response.status_code == 429
    error = response.json()["error"]
    assert error["code"] == "quota_exceeded"
    fake_session.refresh_from_db()
    needs = fake_session.context_tokens  # the context the turn would have sent
    assert needs > 1
    tomorrow = (usage.today() + dt.timedelta(days=1)).isoformat()
    assert error["message"] == (
        "Your daily limit of 1,000 tokens has 1 left (999 used, some of it held by running "
        f"turns or too little for this turn's context of {needs:,}); "
        f"it resets at {tomorrow}T00:00:00+00:00."
    )
    reply = Message.objects.get(pk=error["details"]["assistant_message"]["id"])
    assert (reply.status, reply.error_code) == ("failed", "quota_exceeded")
    assert fake_openai.requests == []
    counter = TokenCounter.objects.get(subject=f"user:{owner.pk}")
    assert (counter.used, counter.reserved) == (999, 0)
