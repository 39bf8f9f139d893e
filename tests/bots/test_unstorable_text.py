"""Issue 7, item 6: text PostgreSQL cannot store (NUL) or UTF-8 cannot encode (a lone surrogate)
is a validation_error 400 in every text field, never a 500, and nothing is stored.

Bodies are sent as raw JSON bytes with ``\\u0000`` / ``\\ud800`` escapes, exactly as a hostile
client would: ``json.loads`` turns them into the bad characters.
"""

import json

import pytest
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import Bot, ChatSession, Message
from chat_platform.asgi import application
from compaction.models import CompactionEvent
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db

BAD = {"nul": "a\u0000b", "surrogate": "x\ud800y"}
UNSTORABLE = ["Text may not contain NUL characters or unpaired surrogates."]


def _raw(body: dict) -> bytes:
    # ensure_ascii: the bad characters travel as \u escapes, as valid JSON text
    return json.dumps(body, ensure_ascii=True).encode()


def _post(client, url: str, body: dict, method: str = "post"):
    return getattr(client, method)(url, data=_raw(body), content_type="application/json")


def _assert_validation_error(response, field: str) -> None:
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_message_content_rest(owner_client, chat_session, bad):
    response = _post(
        owner_client, f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": bad}
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": {"content": UNSTORABLE},
    }
    assert Message.objects.count() == 0
    chat_session.refresh_from_db()
    assert chat_session.last_seq == 0


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_client_id_rest(owner_client, chat_session, bad):
    response = _post(
        owner_client,
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        {"content": "hello", "client_id": bad},
    )
    _assert_validation_error(response, "client_id")
    assert Message.objects.count() == 0


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_compact_command_focus_in_chat(owner_client, chat_session, bad):
    response = _post(
        owner_client,
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        {"content": f"/compact {bad}"},
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"content": UNSTORABLE}
    assert Message.objects.count() == 0
    assert CompactionEvent.objects.count() == 0


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_compact_focus_rest(owner_client, chat_session, bad):
    response = _post(owner_client, f"/api/v1/sessions/{chat_session.pk}/compact/", {"focus": bad})
    _assert_validation_error(response, "focus")
    assert CompactionEvent.objects.count() == 0


BOT_TEXT_FIELDS = ["name", "system_prompt", "model", "api_base", "api_key_env", "compaction_model"]


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("field", BOT_TEXT_FIELDS)
def test_bot_text_fields_on_create_and_update(owner_client, owner, field, bad):
    created = _post(owner_client, "/api/v1/bots/", {"name": "b", field: bad})
    _assert_validation_error(created, field)
    assert Bot.objects.count() == 0

    bot = BotFactory(owner=owner, name="kept")
    before = Bot.objects.filter(pk=bot.pk).values().get()
    updated = _post(owner_client, f"/api/v1/bots/{bot.pk}/", {field: bad}, method="patch")
    _assert_validation_error(updated, field)
    assert Bot.objects.filter(pk=bot.pk).values().get() == before


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_session_title(owner_client, bot, bad):
    response = _post(owner_client, "/api/v1/sessions/", {"bot": bot.pk, "title": bad})
    _assert_validation_error(response, "title")
    assert ChatSession.objects.count() == 0


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
@pytest.mark.parametrize("field", ["username", "password"])
def test_auth_token_fields(client, owner, field, bad):
    body = {"username": "owner", "password": "pw-123456", field: bad}
    response = _post(client, "/api/v1/auth/token/", body)
    _assert_validation_error(response, field)
    assert not Token.objects.filter(user=owner).exists()


def test_query_params_with_nul(owner_client, chat_session):
    # Every /api/ query value is checked before any view (chat_platform/request_text.py).
    listed = owner_client.get("/api/v1/sessions/", {"bot": "1\u0000"})
    assert listed.status_code == 400
    assert listed.json()["error"]["code"] == "validation_error"
    assert set(listed.json()["error"]["details"]) == {"bot"}
    messages = owner_client.get(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"after_seq": "\u0000"}
    )
    assert messages.status_code == 400
    assert messages.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": {"after_seq": ["Text may not contain NUL characters or unpaired surrogates."]},
    }


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("inmemory_channel_layer")
async def test_websocket_message_send_gets_an_error_frame(chat_session, owner):
    from channels.db import database_sync_to_async

    token = await database_sync_to_async(lambda: Token.objects.create(user=owner).key)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{chat_session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    try:
        for frame in (
            {"type": "message.send", "content": BAD["nul"]},
            {"type": "message.send", "content": BAD["surrogate"]},
            {"type": "message.send", "content": "hi", "client_id": BAD["surrogate"]},
        ):
            await communicator.send_to(text_data=json.dumps(frame, ensure_ascii=True))
            answer = json.loads(await communicator.receive_from(timeout=10))
            assert answer["type"] == "error"
            assert answer["error"]["code"] == "validation_error"
            field = "client_id" if "client_id" in frame else "content"
            assert answer["error"]["details"] == {field: UNSTORABLE}
        count = await database_sync_to_async(Message.objects.count)()
        assert count == 0
    finally:
        await communicator.disconnect()


@pytest.mark.parametrize("bad", BAD.values(), ids=BAD.keys())
def test_compact_focus_service(owner, chat_session, bad):
    """The service checks too (management command, any caller that skips the serializer)."""
    from chat_platform.errors import ValidationFailed
    from compaction.services import session_compact

    with pytest.raises(ValidationFailed) as caught:
        session_compact(user=owner, session_id=chat_session.pk, focus=bad)
    assert caught.value.details == {"focus": UNSTORABLE}
    assert CompactionEvent.objects.count() == 0
