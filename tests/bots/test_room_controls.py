"""The room controls the page uses (docs/rooms.md): making a participant the default with
PATCH /participants/{bot_id}/, and "reply as …" over the websocket as over REST."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import ChatSession, Message, SessionParticipant
from chat_platform.asgi import application
from tests.conftest import FAKE_KEY_ENV
from tests.factories import BotFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def _defaults(session_id: int) -> list[tuple[str, bool]]:
    return [
        (row.bot.slug, row.is_default)
        for row in SessionParticipant.objects.filter(session_id=session_id)
        .select_related("bot")
        .order_by("id")
    ]


@pytest.fixture
def two_bot_room(owner, owner_client):
    first = BotFactory(owner=owner, name="Planner")
    second = BotFactory(owner=owner, name="Critic")
    session_id = owner_client.post("/api/v1/sessions/", {"bot": first.pk}, format="json").json()[
        "id"
    ]
    added = owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": second.pk}, format="json"
    )
    assert added.status_code == 201
    return session_id, first, second


def test_patch_makes_a_participant_the_default_and_the_session_follows(owner_client, two_bot_room):
    session_id, first, second = two_bot_room
    response = owner_client.patch(
        f"/api/v1/sessions/{session_id}/participants/{second.pk}/",
        {"is_default": True},
        format="json",
    )
    assert response.status_code == 200
    assert response.json() == {
        "bot": {"id": second.pk, "slug": "critic", "name": "Critic"},
        "joined_seq": 0,
        "sees_from_join": False,
        "is_default": True,
        "removed_at": None,
    }
    assert _defaults(session_id) == [("planner", False), ("critic", True)]
    assert ChatSession.objects.get(pk=session_id).bot_id == second.pk


def test_patch_refuses_bad_input_and_changes_nothing(owner_client, two_bot_room):
    session_id, first, second = two_bot_room
    url = f"/api/v1/sessions/{session_id}/participants/{second.pk}/"
    for body in ({}, {"is_default": False}, {"is_default": "yes"}):
        response = owner_client.patch(url, body, format="json")
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert (error["code"], list(error["details"])) == ("validation_error", ["is_default"])
    assert _defaults(session_id) == [("planner", True), ("critic", False)]


def test_patch_of_a_bot_not_in_the_room_or_a_removed_one_is_not_found(
    owner, owner_client, two_bot_room
):
    session_id, first, second = two_bot_room
    outsider = BotFactory(owner=owner, name="Outsider")
    url = f"/api/v1/sessions/{session_id}/participants/"
    missing = owner_client.patch(f"{url}{outsider.pk}/", {"is_default": True}, format="json")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert owner_client.delete(f"{url}{second.pk}/").status_code == 204
    removed = owner_client.patch(f"{url}{second.pk}/", {"is_default": True}, format="json")
    assert removed.status_code == 404
    assert _defaults(session_id) == [("planner", True), ("critic", False)]


def test_another_users_room_patch_is_not_found_and_changes_nothing(other_client, two_bot_room):
    session_id, first, second = two_bot_room
    response = other_client.patch(
        f"/api/v1/sessions/{session_id}/participants/{second.pk}/",
        {"is_default": True},
        format="json",
    )
    assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
    assert _defaults(session_id) == [("planner", True), ("critic", False)]


# --- reply as … over the websocket -------------------------------------------------------------


async def _frames_until(communicator, predicate, timeout=20):
    frames = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=timeout))
        frames.append(frame)
        if predicate(frame):
            return frames


@pytest.fixture
def fake_room(owner, fake_openai, monkeypatch):
    from tests.conftest import FAKE_KEY

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    fields = dict(model="openai/fake-model", api_base=fake_openai.url, api_key_env=FAKE_KEY_ENV)
    planner = BotFactory(owner=owner, name="Planner", **fields)
    critic = BotFactory(owner=owner, name="Critic", **fields)
    session = ChatSession.objects.create(user=owner, bot=planner, reply_mode="manual")
    SessionParticipant.objects.create(session=session, bot=planner, is_default=True, joined_seq=0)
    SessionParticipant.objects.create(session=session, bot=critic, joined_seq=0)
    ChatSession.objects.filter(pk=session.pk).update(is_room=True)
    return session, planner, critic


@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_a_message_send_frame_with_reply_as_is_answered_by_that_bot(
    owner, fake_room, fake_openai, eager_tasks
):
    session, planner, critic = fake_room
    token = await database_sync_to_async(lambda: Token.objects.get_or_create(user=owner)[0].key)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    try:
        # A bot outside the room: a clear error frame, the socket stays open, nothing stored.
        await communicator.send_json_to(
            {"type": "message.send", "content": "hello", "reply_as": 999999}
        )
        error = json.loads(await communicator.receive_from(timeout=10))
        assert error["type"] == "error"
        assert (error["error"]["code"], list(error["error"]["details"])) == (
            "validation_error",
            ["reply_as"],
        )
        count = database_sync_to_async(Message.objects.filter(session=session).count)
        assert await count() == 0

        fake_openai.script(Reply(text="Critic here."))
        await communicator.send_json_to(
            {"type": "message.send", "content": "hello", "reply_as": critic.pk}
        )
        frames = await _frames_until(
            communicator,
            lambda f: f["type"] == "message.completed" and f["message"]["role"] == "assistant",
        )
        done = frames[-1]["message"]
        assert (done["content"], done["bot"]) == (
            "Critic here.",
            {"id": critic.pk, "slug": "critic", "name": "Critic"},
        )
    finally:
        await communicator.disconnect()
