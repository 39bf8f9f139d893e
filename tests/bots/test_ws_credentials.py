"""An open websocket acts only while its credential still signs its user in (docs/api.md,
"WebSocket"): the token it showed still exists, or its session still holds the user with the
same password, and the account may still sign in (chat_platform/account_gate.py). Before, a
socket opened before a password reset (which deletes the token), a password change or a
deactivation went on storing sends and running their replies: measured on a running server, a
send after the account was deactivated and its token deleted was stored and answered."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.consumers import CLOSE_NOT_AUTHENTICATED
from bots.models import Message
from chat_platform.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]


def _token_socket(session, user) -> WebsocketCommunicator:
    key = Token.objects.get_or_create(user=user)[0].key
    return WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {key}".encode())],
    )


def _cookie_socket(session, user, client) -> WebsocketCommunicator:
    client.force_login(user)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    return WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")],
    )


def _deactivate(user) -> None:
    user.is_active = False
    user.save(update_fields=["is_active"])


def _password_changed(user) -> None:
    user.set_password("a-new-password-1234")
    user.save(update_fields=["password"])


@pytest.mark.parametrize(
    ("credential", "change"),
    [
        ("token", lambda user: Token.objects.filter(user=user).delete()),
        ("token", _deactivate),
        ("cookie", _password_changed),
        ("cookie", _deactivate),
    ],
    ids=[
        "token-deleted",
        "token-account-deactivated",
        "cookie-password-changed",
        "cookie-deactivated",
    ],
)
async def test_a_send_after_the_credential_ended_closes_the_socket_and_stores_nothing(
    owner, fake_session, client, credential, change
):
    if credential == "token":
        communicator = await database_sync_to_async(_token_socket)(fake_session, owner)
    else:
        communicator = await database_sync_to_async(_cookie_socket)(fake_session, owner, client)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await database_sync_to_async(change)(owner)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": CLOSE_NOT_AUTHENTICATED}
    stored = await database_sync_to_async(Message.objects.filter(session=fake_session).count)()
    assert stored == 0


async def test_a_stop_after_the_credential_ended_closes_the_socket_and_stops_nothing(
    owner, fake_session, monkeypatch
):
    """A socket whose token was deleted still stopped the owner's replies: the stop did not
    check the credential as a send does."""
    from bots import consumers

    stopped = []
    monkeypatch.setattr(
        consumers.message_services, "generation_stop", lambda **kw: stopped.append(kw) or 0
    )
    communicator = await database_sync_to_async(_token_socket)(fake_session, owner)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    await database_sync_to_async(lambda: Token.objects.filter(user=owner).delete())()
    await communicator.send_to(text_data=json.dumps({"type": "generation.stop"}))
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": CLOSE_NOT_AUTHENTICATED}
    assert stopped == []


async def test_a_socket_whose_credential_ended_is_closed_before_it_relays_more_frames(
    owner, fake_session, monkeypatch
):
    # A socket that never sends (someone reading a chat with a token they should no longer
    # have) is checked again before it relays frames, at most every CREDENTIAL_RECHECK_SECONDS;
    # 0 here, so the next frame checks. Before, it relayed the chat's frames for as long as it
    # stayed open.
    from channels.layers import get_channel_layer

    from bots import consumers
    from chat_platform import realtime

    monkeypatch.setattr(consumers, "CREDENTIAL_RECHECK_SECONDS", 0, raising=False)
    communicator = await database_sync_to_async(_token_socket)(fake_session, owner)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    frame = {"type": realtime.FRAME_EVENT, "frame": {"type": "probe", "n": 1}}
    group = realtime.session_group(fake_session.pk)
    await get_channel_layer().group_send(group, frame)
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "probe", "n": 1}
    await database_sync_to_async(_deactivate)(owner)
    await get_channel_layer().group_send(group, {**frame, "frame": {"type": "probe", "n": 2}})
    closed = await communicator.receive_output(timeout=10)
    assert closed == {"type": "websocket.close", "code": CLOSE_NOT_AUTHENTICATED}
