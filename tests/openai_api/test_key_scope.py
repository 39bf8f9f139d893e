"""Keys mean what they say (issue 30, item 10; docs/openai-api.md, "What a key may do"): a read
key posts nothing, on /v1/ as on /api/v1/; a key limited to some bots reaches only those bots and
their sessions on /api/v1/ (another bot's are not_found), and nothing that spans every chat."""

import pytest
from django.test import Client
from rest_framework.test import APIClient

from bots.models import ChatSession, Message
from openai_api.keys import key_create
from openai_api.models import ApiSession
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tests.openai_api.conftest import completion_post


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.mark.django_db(transaction=True)
def test_a_read_key_cannot_post_a_chat_completion_and_nothing_is_stored(
    owner, fake_openai, settings
):
    settings.CHAT_WAIT_TIMEOUT_SECONDS = 1  # where the call is let through (main), it returns
    bot = BotFactory(
        owner=owner, name="Writer", model="openai/fake-model", api_base=fake_openai.url
    )
    _key, raw = key_create(user=owner, name="reader", access="read")
    response = completion_post(
        raw, {"model": bot.slug, "messages": [{"role": "user", "content": "Write to the log."}]}
    )
    assert response.status_code == 403
    assert response.json() == {
        "error": {
            "message": "This API key is read-only.",
            "type": "invalid_request_error",
            "code": "permission_denied",
            "param": None,
        }
    }
    assert not ChatSession.objects.exists()
    assert not Message.objects.exists()
    assert not ApiSession.objects.exists()
    assert fake_openai.requests == []
    # It still reads.
    listed = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert [m["id"] for m in listed.json()["data"]] == [bot.slug]


def test_a_read_key_cannot_send_a_message_on_api_v1(owner, chat_session):
    _key, raw = key_create(user=owner, name="reader", access="read")
    refused = _bearer(raw).post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "hi"}, format="json"
    )
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    assert chat_session.messages.count() == 0


@pytest.fixture
def two_bots(owner):
    mine = BotFactory(owner=owner, name="Alpha")
    other = BotFactory(owner=owner, name="Beta")
    allowed = SessionFactory(user=owner, bot=mine, title="alpha chat")
    hidden = SessionFactory(user=owner, bot=other, title="beta chat")
    message_add(allowed, role="user", content="alpha notes")
    secret = message_add(hidden, role="user", content="the beta merger closes on Friday")
    _key, raw = key_create(user=owner, name="alpha only", bots=[mine.pk])
    return _bearer(raw), mine, other, allowed, hidden, secret


def test_a_bot_scoped_key_sees_and_uses_only_its_bots_sessions(two_bots):
    client, mine, other, allowed, hidden, secret = two_bots
    assert [s["id"] for s in client.get("/api/v1/sessions/").json()] == [allowed.pk]
    assert [b["id"] for b in client.get("/api/v1/bots/").json()] == [mine.pk]
    assert client.get(f"/api/v1/sessions/{allowed.pk}/messages/").status_code == 200

    for path in (
        f"/api/v1/sessions/{hidden.pk}/",
        f"/api/v1/sessions/{hidden.pk}/messages/",
        f"/api/v1/sessions/{hidden.pk}/summaries/",
        f"/api/v1/sessions/{hidden.pk}/records/",
        f"/api/v1/messages/{secret.pk}/context/",
        f"/api/v1/bots/{other.pk}/",
    ):
        response = client.get(path)
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
        assert "merger" not in response.content.decode()

    sent = client.post(
        f"/api/v1/sessions/{hidden.pk}/messages/", {"content": "more"}, format="json"
    )
    assert sent.status_code == 404
    pinned = client.post(f"/api/v1/messages/{secret.pk}/pin/")
    assert pinned.status_code == 404
    made = client.post("/api/v1/sessions/", {"bot": other.pk}, format="json")
    assert made.status_code == 404
    assert list(hidden.messages.values_list("content", "pinned")) == [
        ("the beta merger closes on Friday", False)
    ]
    assert ChatSession.objects.filter(bot=other).count() == 1


def test_a_bot_scoped_key_is_refused_what_spans_every_chat(two_bots):
    client, *_ = two_bots
    for path in ("/api/v1/search/?q=merger", "/api/v1/compaction-events/", "/api/v1/export/"):
        response = client.get(path)
        assert response.status_code == 403, path
        assert response.json()["error"] == {
            "code": "permission_denied",
            "message": (
                "This API key is limited to some bots; it cannot use what spans all of your chats."
            ),
            "details": {},
        }


def test_a_bot_scoped_key_cannot_make_bots_connections_or_tool_servers(owner, two_bots):
    """It made a tool server (201), repointed one (200: its headers then went to the new
    address), made a connection with a key and a bot: all beyond the bots it is limited to."""
    from connections.models import Connection
    from tools.models import ToolServer

    owner.is_staff = True
    owner.save()
    client, mine, *_ = two_bots
    server = ToolServer.objects.create(name="calc", url="http://127.0.0.1:9/mcp")
    connection = Connection.objects.create(name="Local", kind="openai", base_url="http://x.test/v1")
    writes = [
        ("post", "/api/v1/bots/", {"name": "New"}),
        ("post", "/api/v1/tool-servers/", {"name": "mine", "url": "http://127.0.0.1:9/mcp"}),
        ("patch", f"/api/v1/tool-servers/{server.pk}/", {"url": "http://127.0.0.1:18107/mcp"}),
        ("delete", f"/api/v1/tool-servers/{server.pk}/", None),
        ("post", f"/api/v1/tool-servers/{server.pk}/refresh-tools/", None),
        ("post", "/api/v1/connections/", {"name": "X", "kind": "openai", "api_key": "sk-1"}),
        ("patch", f"/api/v1/connections/{connection.pk}/", {"base_url": "http://y.test/v1"}),
        ("post", f"/api/v1/connections/{connection.pk}/refresh-models/", None),
    ]
    for method, path, body in writes:
        response = getattr(client, method)(path, body, format="json")
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["message"] == (
            "This API key is limited to some bots; it cannot create bots or change "
            "connections or tool servers."
        )
    assert list(ToolServer.objects.values_list("name", "url")) == [
        ("calc", "http://127.0.0.1:9/mcp")
    ]
    assert Connection.objects.filter(name="X").count() == 0
    # Its own bot it may still change.
    assert (
        client.patch(f"/api/v1/bots/{mine.pk}/", {"name": "Alpha 2"}, format="json").status_code
        == 200
    )


def test_a_key_for_all_bots_reaches_all_of_them(owner, two_bots):
    _client, _mine, _other, allowed, hidden, _secret = two_bots
    _key, raw = key_create(user=owner, name="everything")
    client = _bearer(raw)
    assert sorted(s["id"] for s in client.get("/api/v1/sessions/").json()) == sorted(
        [allowed.pk, hidden.pk]
    )
    assert client.get(f"/api/v1/sessions/{hidden.pk}/messages/").status_code == 200
    assert client.get("/api/v1/search/?q=merger").status_code == 200


# --- a room reached through a key limited to some of its bots -----------------------------------


@pytest.fixture
def scoped_room(owner, owner_client, fake_openai, monkeypatch):
    """A room of Planner (default) and Critic, and a key limited to Planner."""
    from tests.bots.test_rooms import _fake_bot
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _fake_bot(owner, fake_openai, "Planner")
    critic = _fake_bot(owner, fake_openai, "Critic")
    made = owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json")
    session = ChatSession.objects.get(pk=made.json()["id"])
    added = owner_client.post(
        f"/api/v1/sessions/{session.pk}/participants/", {"bot": critic.pk}, format="json"
    )
    assert added.status_code == 201
    _key, raw = key_create(user=owner, name="planner only", bots=[planner.pk])
    return _bearer(raw), session, planner, critic


@pytest.mark.django_db(transaction=True)
def test_a_bot_scoped_key_cannot_make_another_bot_of_a_room_answer(
    scoped_room, owner_client, fake_openai, eager_tasks
):
    client, session, planner, critic = scoped_room
    refused = client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "hi", "reply_as": critic.pk},
        format="json",
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "reply_as": ["Must be the id of a bot in this chat."]
    }
    assert session.messages.count() == 0
    assert fake_openai.requests == []

    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    fake_openai.script(Reply(text="Planner here."))
    sent = client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "everyone, and @critic too", "wait": True},
        format="json",
    )
    assert sent.status_code == 201
    assert [(m.role, m.bot_id, m.content) for m in session.messages.order_by("seq")] == [
        ("user", None, "everyone, and @critic too"),
        ("assistant", planner.pk, "Planner here."),
    ]
    assert len(fake_openai.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_a_non_streaming_call_waits_on_threads_of_its_own(
    owner, fake_bot, fake_openai, eager_tasks, monkeypatch
):
    """The wait for the reply runs on the /v1 wait pool, not the event loop's default pool of
    min(32, cores + 4) threads that websocket sends run on: six slow calls held all of it."""
    import threading

    from openai_api import views

    waited_on: list[str] = []
    wait = views._wait

    def note_thread(**kwargs):
        waited_on.append(threading.current_thread().name)
        return wait(**kwargs)

    monkeypatch.setattr(views, "_wait", note_thread)
    fake_openai.script(Reply(text="Pooled."))
    _key, raw = key_create(user=owner, name="pool")
    response = completion_post(
        raw, {"model": fake_bot.slug, "messages": [{"role": "user", "content": "Hello?"}]}
    )
    assert response.status_code == 200, response.content
    assert response.json()["choices"][0]["message"]["content"] == "Pooled."
    assert len(waited_on) == 1 and waited_on[0].startswith("v1-wait")


@pytest.mark.django_db(transaction=True)
def test_a_bot_scoped_key_never_reaches_another_bots_seat_of_a_room(
    scoped_room, owner_client, fake_openai
):
    """``?bot=`` names a room's seat: through a key limited to Planner, Critic's seat is
    not found, whatever reads or writes it (its bot-scoped records come from Critic's other
    chats; its context, compactions and summaries are Critic's); Planner's still answers."""
    client, session, planner, critic = scoped_room
    elsewhere = SessionFactory(user=session.user, bot=critic)
    kept = owner_client.post(
        f"/api/v1/sessions/{elsewhere.pk}/records/",
        {
            "name": "vault",
            "description": "Vault",
            "body": "The vault code is 4471.",
            "scope": "bot",
        },
        format="json",
    )
    assert kept.status_code == 201
    base = f"/api/v1/sessions/{session.pk}"
    reached = {
        "records": client.get(f"{base}/records/?bot={critic.pk}"),
        "record": client.get(f"{base}/records/vault/?bot={critic.pk}"),
        "edit": client.patch(
            f"{base}/records/vault/?bot={critic.pk}", {"body": "overwritten"}, format="json"
        ),
        "context": client.get(f"{base}/context/?bot={critic.pk}"),
        "compact": client.post(f"{base}/compact/?bot={critic.pk}", {}, format="json"),
        "summaries": client.get(f"/api/v1/summaries/?session={session.pk}&bot={critic.pk}"),
        "events": client.get(f"/api/v1/compaction-events/?session={session.pk}&bot={critic.pk}"),
        "messages": client.get(f"{base}/messages/?bot={critic.pk}"),
    }
    assert {name: r.status_code for name, r in reached.items()} == dict.fromkeys(reached, 404)
    assert {r.json()["error"]["code"] for r in reached.values()} == {"not_found"}
    record = owner_client.get(f"/api/v1/sessions/{elsewhere.pk}/records/vault/").json()
    assert record["body"] == "The vault code is 4471."
    assert not session.compaction_events.exists()
    # The key's own bot's seat, named or not, answers as before.
    assert client.get(f"{base}/records/?bot={planner.pk}").status_code == 200
    assert client.get(f"{base}/context/?bot={planner.pk}").status_code == 200
    assert client.get(f"{base}/context/").status_code == 200


@pytest.mark.django_db(transaction=True)
def test_a_bot_scoped_keys_compact_command_never_compacts_another_bots_seat(
    scoped_room, fake_openai, eager_tasks
):
    client, session, planner, critic = scoped_room
    sent = client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact @critic"}, format="json"
    )
    assert sent.status_code in (200, 201)
    assert not session.compaction_events.filter(bot=critic).exists()
    notice = session.messages.order_by("seq").last()
    assert (notice.role, notice.kind, notice.content) == (
        "system",
        "notice",
        "Nothing was compacted: @critic is not a bot in this chat.",
    )
    assert fake_openai.requests == []


@pytest.mark.django_db(transaction=True)
def test_a_bot_scoped_keys_message_hands_the_floor_only_to_the_keys_bots(
    scoped_room, fake_openai, eager_tasks
):
    """Planner's reply mentions @critic: in a chain a key limited to Planner started, Critic
    does not answer (it would answer with its own prompt, tools and memory, on the key's
    message); the owner's own message still hands the floor over."""
    client, session, planner, critic = scoped_room
    fake_openai.script(Reply(text="Good question. @critic what do you think?"))
    sent = client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "hi", "wait": True}, format="json"
    )
    assert sent.status_code == 201
    assert [(m.role, m.bot_id, m.status) for m in session.messages.order_by("seq")] == [
        ("user", None, "complete"),
        ("assistant", planner.pk, "complete"),
    ]
    assert len(fake_openai.requests) == 1
