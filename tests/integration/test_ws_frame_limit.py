"""The web server caps a websocket frame (uvicorn ``--ws-max-size``, docs/security.md): the
largest send the service accepts still goes through a real uvicorn, a larger frame ends the socket
with 1009 and stores nothing."""

import asyncio
import json

import pytest
import websockets
from django.conf import settings
from rest_framework.authtoken.models import Token

from bots.models import Message
from tests.factories import BotFactory, SessionFactory, UserFactory
from tests.fakeopenai import Reply
from tests.integration.processes import WS_MAX_SIZE
from tests.integration.test_crossprocess import ws_frames

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]


def largest_send() -> str:
    """A send at every limit, as a JSON client writes it (``ensure_ascii``): content of
    MESSAGE_MAX_BYTES one-byte control characters (each escaped to six bytes, the most any
    storable character grows) and a 100-character client_id of four-byte characters (twelve)."""
    return json.dumps(
        {
            "type": "message.send",
            "content": "\x01" * settings.MESSAGE_MAX_BYTES,
            "client_id": "\U0001f600" * 100,
        }
    )


def test_the_largest_send_fits_the_frame_cap_and_a_larger_frame_is_refused(real_stack, fake_openai):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    bot = BotFactory(owner=user, model="openai/fake-model", api_base=fake_openai.url)
    session = SessionFactory(user=user, bot=bot)
    ws_url = real_stack.replace("http", "ws") + f"/ws/sessions/{session.pk}/"
    fake_openai.script(Reply(text="ok"))

    text = largest_send()
    assert 6 * settings.MESSAGE_MAX_BYTES < len(text) <= WS_MAX_SIZE
    frames = asyncio.run(ws_frames(ws_url, token, text))
    created = [f["message"] for f in frames if f["type"] == "message.created"]
    assert [m["role"] for m in created] == ["user", "assistant"]
    stored = Message.objects.get(session=session, role="user")
    assert len(stored.content) == settings.MESSAGE_MAX_BYTES

    with pytest.raises(websockets.ConnectionClosedError) as closed:
        asyncio.run(ws_frames(ws_url, token, " " * (WS_MAX_SIZE + 1)))
    assert closed.value.rcvd.code == 1009
    assert Message.objects.filter(session=session).count() == 2
