"""The websocket consumer when the channel layer (Redis) fails: a clean 4503 close, never a
crashed application. The real thing (uvicorn, a stopped redis-server) is in
tests/integration/test_redis_outage.py; these run in-process with a layer that raises."""

import asyncio

import pytest
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from redis.exceptions import ConnectionError as RedisConnectionError
from rest_framework.authtoken.models import Token

from chat_platform import realtime
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
