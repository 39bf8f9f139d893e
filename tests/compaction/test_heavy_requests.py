"""Heavy requests (docs/security.md): a per-user limit on requests that wait on a model, a lease
or a reply (429 ``rate_limited`` with ``Retry-After``, nothing done), and no database connection
held while they wait, so one user repeating ``/compact`` never empties the pool for others."""

import json
import threading
import time
from collections import Counter
from contextlib import contextmanager

import pytest
import redis
from django.conf import settings as django_settings
from django.db import close_old_connections, connection
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from bots.models import Message
from chat_platform.errors import RateLimited
from chat_platform.heavy import heavy_request, slots_key
from compaction.models import CompactionEvent, Summary
from connections.models import Connection
from tests.compaction.test_engine import GOOD, add_history, recount, summariser_requests
from tests.factories import BotFactory, SessionFactory
from tests.fakeopenai import Reply

COMPACT = "/api/v1/sessions/{}/compact/"


@pytest.fixture(autouse=True)
def _fast_llm(settings):
    settings.LLM_MAX_RETRIES = 0
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01


@pytest.fixture
def api_bot(fake_bot):
    # B 19,000: manual compaction of a few thousand tokens, no automatic one.
    fake_bot.context_window = 20_000
    fake_bot.max_output_tokens = 1000
    fake_bot.system_prompt = ""
    fake_bot.memory_index_size = 0
    fake_bot.save()
    return fake_bot


@pytest.fixture
def session(owner, api_bot):
    session = SessionFactory(user=owner, bot=api_bot)
    add_history(session, [3000, 3000, 3000, 3000, 100, 100])
    recount(session)
    return session


@pytest.fixture(autouse=True)
def _no_slots_left_over(owner, other_user, staff):
    def clear():
        if django_settings.REDIS_URL:
            redis.Redis.from_url(django_settings.REDIS_URL).delete(
                *(slots_key(u.pk) for u in (owner, other_user, staff))
            )

    clear()
    yield
    clear()


def client_for(user) -> APIClient:
    client = APIClient()
    token, _ = Token.objects.get_or_create(user=user)
    client.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    return client


@contextmanager
def slot_held_elsewhere(user):
    """One of ``user``'s heavy-request slots held by another request (another thread) meanwhile."""
    entered, leave = threading.Event(), threading.Event()

    def hold():
        with heavy_request(user_id=user.pk, kind="test"):
            entered.set()
            leave.wait(60)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    try:
        yield
    finally:
        leave.set()
        holder.join(10)


def assert_rate_limited(response, *, limit: int) -> None:
    assert response.status_code == 429
    assert response["Retry-After"] == "5"
    error = response.json()["error"]
    assert error["code"] == "rate_limited"
    assert error["details"] == {"retry_after_seconds": 5, "limit": limit}


# --- 50 concurrent /compact from one user --------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_compacts_leave_the_api_to_other_users(
    owner, other_user, session, fake_openai, settings
):
    """20 of them are let in and wait (one on the summariser, 19 on its lease): more than the
    pool's 10 connections, so the others' requests are answered only if no waiter holds one.
    The other 30 are refused at once."""
    assert connection.settings_dict["OPTIONS"]["pool"]["max_size"] == 10
    settings.HEAVY_REQUESTS_PER_USER = 20
    settings.COMPACTION_WAIT_SECONDS = 120
    BotFactory(owner=other_user, name="Bob's bot")
    released = threading.Event()
    fake_openai.script(Reply(text=GOOD, hang=120, until=released))
    tokens = {u.pk: Token.objects.get_or_create(user=u)[0].key for u in (owner, other_user)}
    url = COMPACT.format(session.pk)
    connection.close()  # this thread's connection back to the pool

    answers: list = []
    lock = threading.Lock()

    def compact():
        client = APIClient()
        client.credentials(HTTP_AUTHORIZATION=f"Token {tokens[owner.pk]}")
        try:
            response = client.post(url, {}, format="json")
            with lock:
                answers.append(response)
        finally:
            close_old_connections()
            connection.close()

    threads = [threading.Thread(target=compact) for _ in range(50)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (len(answers) < 30 or not fake_openai.requests):
        time.sleep(0.05)
    assert len(fake_openai.requests) == 1  # the summariser is thinking, under the lease

    bob = APIClient()
    bob.credentials(HTTP_AUTHORIZATION=f"Token {tokens[other_user.pk]}")
    listed = [bob.get("/api/v1/bots/") for _ in range(5)]
    connection.close()
    released.set()
    for thread in threads:
        thread.join(180)

    assert [r.status_code for r in listed] == [200] * 5
    assert all(
        "Bob's bot" in [b["name"] for b in r.json()] for r in listed
    )  # his own answer, in full
    assert Counter(r.status_code for r in answers) == {200: 20, 429: 30}
    for refused in (r for r in answers if r.status_code == 429):
        assert_rate_limited(refused, limit=20)
    outcomes = Counter(r.json()["outcome"] for r in answers if r.status_code == 200)
    assert set(outcomes) <= {"compacted", "noop"} and outcomes["compacted"] >= 1
    assert len(summariser_requests(fake_openai)) == 1
    assert Summary.objects.filter(session=session).count() == 1
    assert CompactionEvent.objects.filter(session=session, outcome="compacted").count() == 1


# --- each heavy request is limited, and a refusal does nothing ----------------------------------


@pytest.mark.django_db
def test_compact_past_the_limit_is_refused_and_nothing_runs(
    owner, owner_client, session, fake_openai, settings
):
    settings.HEAVY_REQUESTS_PER_USER = 1
    with slot_held_elsewhere(owner):
        response = owner_client.post(COMPACT.format(session.pk), {}, format="json")
    assert_rate_limited(response, limit=1)
    assert fake_openai.requests == []
    assert CompactionEvent.objects.filter(session=session).count() == 0
    # The slot is back: the same request now runs.
    fake_openai.script(Reply(text=GOOD))
    assert owner_client.post(COMPACT.format(session.pk), {}, format="json").json()["outcome"] == (
        "compacted"
    )


@pytest.mark.django_db
def test_another_users_heavy_request_is_not_counted(
    owner, other_user, other_client, api_bot, fake_openai, settings
):
    settings.HEAVY_REQUESTS_PER_USER = 1
    their_bot = BotFactory(
        owner=other_user,
        model=api_bot.model,
        api_base=api_bot.api_base,
        api_key_env=api_bot.api_key_env,
        context_window=20_000,
        max_output_tokens=1000,
        memory_index_size=0,
    )
    theirs = SessionFactory(user=other_user, bot=their_bot)
    add_history(theirs, [3000, 3000, 3000, 100, 100])
    recount(theirs)
    fake_openai.script(Reply(text=GOOD))
    with slot_held_elsewhere(owner):
        response = other_client.post(COMPACT.format(theirs.pk), {}, format="json")
    assert response.status_code == 200
    assert response.json()["outcome"] == "compacted"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "body",
    [
        {"content": "/compact keep the dates"},
        {"content": "/compact", "wait": True},
        {"content": "What next?", "wait": True},
    ],
    ids=["compact-command", "compact-command-wait", "send-wait"],
)
def test_heavy_sends_past_the_limit_store_nothing(
    owner, owner_client, session, fake_openai, settings, body
):
    settings.HEAVY_REQUESTS_PER_USER = 1
    before = Message.objects.filter(session=session).count()
    with slot_held_elsewhere(owner):
        response = owner_client.post(
            f"/api/v1/sessions/{session.pk}/messages/", body, format="json"
        )
    assert_rate_limited(response, limit=1)
    assert Message.objects.filter(session=session).count() == before
    assert fake_openai.requests == []
    assert CompactionEvent.objects.filter(session=session).count() == 0


@pytest.mark.django_db
def test_a_waiting_compact_command_takes_one_slot(
    owner, owner_client, session, fake_openai, settings
):
    """``/compact`` sent with ``wait: true`` is one heavy request, not two."""
    settings.HEAVY_REQUESTS_PER_USER = 1
    fake_openai.script(Reply(text=GOOD))
    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "/compact", "wait": True},
        format="json",
    )
    assert response.status_code == 200
    assert response.json()["compaction"]["outcome"] == "compacted"


@pytest.mark.django_db
def test_resummarise_and_revert_past_the_limit_change_nothing(
    owner, owner_client, session, fake_openai, settings
):
    settings.HEAVY_REQUESTS_PER_USER = 1
    fake_openai.script(Reply(text=GOOD))
    assert owner_client.post(COMPACT.format(session.pk), {}, format="json").status_code == 200
    summary = Summary.objects.get(session=session)
    calls = len(fake_openai.requests)
    with slot_held_elsewhere(owner):
        resummarised = owner_client.post(
            f"/api/v1/summaries/{summary.pk}/resummarise/", {"focus": "dates"}, format="json"
        )
        reverted = owner_client.post(f"/api/v1/summaries/{summary.pk}/revert/", {}, format="json")
    assert_rate_limited(resummarised, limit=1)
    assert_rate_limited(reverted, limit=1)
    assert len(fake_openai.requests) == calls
    summary.refresh_from_db()
    assert (summary.status, summary.reverted_at) == ("active", None)
    assert Summary.objects.filter(session=session).count() == 1
    assert CompactionEvent.objects.filter(session=session).count() == 1


@pytest.mark.django_db
def test_model_discovery_past_the_limit_asks_no_server(staff, staff_client, fake_openai, settings):
    settings.HEAVY_REQUESTS_PER_USER = 1
    connection_row = Connection.objects.create(
        name="Fake", kind="openai", base_url=fake_openai.url, public=True
    )
    with slot_held_elsewhere(staff):
        response = staff_client.post(f"/api/v1/connections/{connection_row.pk}/refresh-models/")
    assert_rate_limited(response, limit=1)
    assert fake_openai.requests == []
    connection_row.refresh_from_db()
    assert (connection_row.model_list, connection_row.models_refreshed_at) == ([], None)


# --- the limiter itself --------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("embedded", [False, True], ids=["redis", "in-process"])
def test_slots_are_counted_per_user_and_given_back(owner, other_user, settings, embedded):
    if embedded:
        settings.REDIS_URL = ""
    settings.HEAVY_REQUESTS_PER_USER = 2
    with slot_held_elsewhere(owner), slot_held_elsewhere(owner):
        with pytest.raises(RateLimited) as refused, heavy_request(user_id=owner.pk, kind="test"):
            pytest.fail("a third slot was given")
        assert (refused.value.retry_after, refused.value.details["limit"]) == (5, 2)
        with heavy_request(user_id=other_user.pk, kind="test"):
            pass  # another user's slots are their own
        if not embedded:  # shared by every process through Redis
            client = redis.Redis.from_url(django_settings.REDIS_URL)
            assert client.zcard(slots_key(owner.pk)) == 2
    settings.HEAVY_REQUESTS_PER_USER = 1  # nested in one thread: the same request, one slot
    with (
        heavy_request(user_id=owner.pk, kind="test"),
        heavy_request(user_id=owner.pk, kind="test"),
        heavy_request(user_id=owner.pk, kind="test"),
    ):
        pass


@pytest.mark.django_db
def test_a_dead_processs_slot_lapses(owner, settings):
    settings.HEAVY_REQUESTS_PER_USER = 1
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    seconds, _ = client.time()
    client.zadd(slots_key(owner.pk), {"killed-worker": seconds - 1})  # its expiry has passed
    with heavy_request(user_id=owner.pk, kind="test"):
        assert client.zrange(slots_key(owner.pk), 0, -1) != [b"killed-worker"]


# --- wait: true gives its connection back while it waits --------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_reply_wait_holds_no_database_connection(owner, session, monkeypatch):
    """The waiter gives its connection back after each check: its own thread's connection is
    closed, and the pool has no more connections in use while it waits than before it started
    (a background thread of an earlier test in this process may hold one throughout)."""
    from bots.realtime import publish_reply_finished, reply_finished_channel
    from tests.factories import message_add
    from turns.services import message as message_service

    reply = message_add(session, role="assistant", content="", status="pending", token_count=0)
    connection.close()
    pool = connection.pool
    done: list[Message] = []
    released: list[bool] = []  # after each check: is the waiter's own connection closed?
    release = message_service.connection_release

    def release_and_record():
        release()
        released.append(connection.connection is None)

    monkeypatch.setattr(message_service, "connection_release", release_and_record)

    def in_use() -> int:
        stats = pool.get_stats()
        return stats["pool_size"] - stats["pool_available"]

    before = in_use()

    def wait():
        try:
            done.append(message_service.message_wait_finished(message_id=reply.pk, timeout=60))
        finally:
            connection.close()

    waiter = threading.Thread(target=wait)
    waiter.start()
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    channel = reply_finished_channel(reply.pk)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and not (client.pubsub_numsub(channel)[0][1] and released):
        time.sleep(0.02)
    while time.monotonic() < deadline and in_use() > before:  # the first check's connection back
        time.sleep(0.02)
    waiting = in_use()
    Message.objects.filter(pk=reply.pk).update(status="complete", content="Done.")
    connection.close()
    publish_reply_finished(reply.pk)
    waiter.join(30)
    assert waiting <= before
    assert released and all(released)
    assert [(m.pk, m.status, m.content) for m in done] == [(reply.pk, "complete", "Done.")]


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_compact_over_websocket_past_the_limit_is_an_error_frame(
    owner, api_bot, fake_openai, settings
):
    from channels.db import database_sync_to_async
    from channels.testing import WebsocketCommunicator

    from chat_platform.asgi import application

    settings.HEAVY_REQUESTS_PER_USER = 1

    def setup():
        session = SessionFactory(user=owner, bot=api_bot)
        add_history(session, [3000, 3000, 3000, 100, 100])
        recount(session)
        return session, Token.objects.get_or_create(user=owner)[0].key

    def stored():
        return Message.objects.filter(session=session).count()

    session, token = await database_sync_to_async(setup)()
    before = await database_sync_to_async(stored)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    assert (await communicator.connect(timeout=5))[0]
    with slot_held_elsewhere(owner):
        await communicator.send_to(
            text_data=json.dumps({"type": "message.send", "content": "/compact"})
        )
        frame = json.loads(await communicator.receive_from(timeout=15))
    await communicator.disconnect()
    assert frame["type"] == "error"
    assert frame["error"]["code"] == "rate_limited"
    assert frame["error"]["details"] == {"retry_after_seconds": 5, "limit": 1}
    assert await database_sync_to_async(stored)() == before
    assert fake_openai.requests == []
