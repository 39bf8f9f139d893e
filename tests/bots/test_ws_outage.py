"""The websocket consumer when the channel layer (Redis) fails: a clean 4503 close, never a
crashed application. The real thing (uvicorn, a stopped redis-server) is in
tests/integration/test_redis_outage.py; these run in-process with a layer that raises."""

import asyncio

import pytest
from asgiref.sync import sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.contrib.sessions.backends.db import SessionStore
from django.db import OperationalError
from django.test import Client
from redis.exceptions import ConnectionError as RedisConnectionError
from rest_framework.authtoken.models import Token

from chat_platform import realtime, realtime_auth
from chat_platform.asgi import application

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]


async def _open(session_id: int, token: str) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


@pytest.fixture
def token(owner):
    return Token.objects.get_or_create(user=owner)[0].key


def _refused(*args, **kwargs):
    raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")


async def test_the_guarded_receive_still_relays_the_session_s_frames(chat_session, token):
    communicator = await _open(chat_session.pk, token)
    await get_channel_layer().group_send(
        realtime.session_group(chat_session.pk),
        {"type": "chat.frame", "frame": {"type": "ping", "n": 1}},
    )
    assert await communicator.receive_json_from(timeout=5) == {"type": "ping", "n": 1}
    await communicator.disconnect()


async def test_a_handshake_whose_group_add_fails_is_closed_with_4503(
    chat_session, token, monkeypatch
):
    monkeypatch.setattr(get_channel_layer(), "group_add", _refused)
    communicator = await _open(chat_session.pk, token)
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4503, "reason": "service unavailable"}
    await communicator.disconnect()


async def test_an_open_socket_whose_layer_receive_fails_is_closed_with_4503(
    chat_session, token, monkeypatch
):
    layer = get_channel_layer()
    gate = asyncio.Event()

    async def receive(channel):
        await gate.wait()  # a receive that is running when Redis goes away
        _refused()

    monkeypatch.setattr(layer, "receive", receive)
    communicator = await _open(chat_session.pk, token)
    gate.set()
    closed = await communicator.receive_output(timeout=5)
    assert closed == {"type": "websocket.close", "code": 4503, "reason": "service unavailable"}
    # the consumer did not crash: it answers the client's close and ends cleanly
    await communicator.disconnect()
    await communicator.wait(timeout=5)


def _pool_timeout(*args, **kwargs):
    raise OperationalError("couldn't get a connection after 10.00 sec")


async def _handshake_answer(communicator: WebsocketCommunicator) -> list[dict]:
    connected, code = await communicator.connect(timeout=5)
    assert connected, code  # accepted, so the client can read the close code
    closed = await communicator.receive_output(timeout=5)
    await communicator.wait(timeout=5)
    return [closed]


async def test_a_handshake_whose_token_cannot_be_read_is_closed_with_4503(
    chat_session, token, monkeypatch, caplog
):
    """PostgreSQL saturated (the pool's timeout) while the handshake reads its token: the client
    hears 4503 and retries, as for any outage; it was an HTTP 500 the client could not read
    (a CI run's burst: ``InvalidStatus: server rejected WebSocket connection: HTTP 500``)."""
    monkeypatch.setattr(realtime_auth, "token_user", _pool_timeout)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{chat_session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    assert await _handshake_answer(communicator) == [
        {"type": "websocket.close", "code": 4503, "reason": "service unavailable"}
    ]
    events = [getattr(r, "msg", None) for r in caplog.records]
    assert any("ws_auth_unavailable" in str(event) for event in events)


async def test_a_handshake_whose_session_cannot_be_read_is_closed_with_4503(
    chat_session, owner, monkeypatch
):
    client = Client()
    await sync_to_async(client.force_login)(owner)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    monkeypatch.setattr(SessionStore, "load", _pool_timeout)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{chat_session.pk}/",
        headers=[(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")],
    )
    assert await _handshake_answer(communicator) == [
        {"type": "websocket.close", "code": 4503, "reason": "service unavailable"}
    ]
