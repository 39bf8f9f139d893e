"""The websocket surface (CONTRACT §12) against the real ASGI app and the Redis channel layer."""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import Message
from chat_platform.asgi import application
from tests.fakeopenai import Reply

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]


def _token(user) -> str:
    return Token.objects.get_or_create(user=user)[0].key


async def _connect(session_id: int, token: str | None):
    headers = [(b"authorization", f"Token {token}".encode())] if token else []
    communicator = WebsocketCommunicator(
        application, f"/ws/sessions/{session_id}/", headers=headers
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


async def _frames_until(communicator, predicate, timeout=20):
    frames = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=timeout))
        frames.append(frame)
        if predicate(frame):
            return frames


def _is_final(frame) -> bool:
    if frame["type"] == "message.failed":
        return True
    return frame["type"] == "message.completed" and frame["message"]["role"] == "assistant"


@pytest.fixture
def ws_token(owner):
    return _token(owner)


async def test_full_turn_streams_deltas_in_order(fake_session, fake_openai, ws_token, eager_tasks):
    chunks = ["Once ", "upon ", "a ", "time, ", "the ", "end."]
    fake_openai.script(Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.06))
    communicator = await _connect(fake_session.pk, ws_token)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "story"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()

    created = [f["message"] for f in frames if f["type"] == "message.created"]
    assert [(m["role"], m["status"]) for m in created] == [
        ("user", "complete"),
        ("assistant", "pending"),
    ]
    deltas = [f for f in frames if f["type"] == "message.delta"]
    assert len(deltas) >= 2  # streamed, not one blob
    assert {d["message_id"] for d in deltas} == {created[1]["id"]}
    completed = frames[-1]["message"]
    assert (
        "".join(d["delta"] for d in deltas) == completed["content"] == "Once upon a time, the end."
    )
    stored = await database_sync_to_async(Message.objects.get)(pk=completed["id"])
    assert (stored.content, stored.status) == ("Once upon a time, the end.", "complete")


async def test_full_turn_with_builtin_recall(chat_session, ws_token, eager_tasks):
    communicator = await _connect(chat_session.pk, ws_token)
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "The launch date is 14 March."})
    )
    await _frames_until(communicator, _is_final)
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "When is the launch date?"})
    )
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    completed = frames[-1]["message"]
    deltas = "".join(f["delta"] for f in frames if f["type"] == "message.delta")
    assert deltas == completed["content"]
    assert "14 March" in completed["content"]


async def test_malformed_frames_get_error_and_socket_stays_usable(
    fake_session, fake_openai, ws_token, eager_tasks
):
    communicator = await _connect(fake_session.pk, ws_token)
    for raw, message in [
        ("{not json", "The frame is not valid JSON."),
        ("[1, 2]", "A frame is a JSON object with a 'type'."),
        (json.dumps({"type": "nope"}), "Unknown frame type 'nope'."),
    ]:
        await communicator.send_to(text_data=raw)
        frame = json.loads(await communicator.receive_from(timeout=5))
        assert frame["type"] == "error"
        assert frame["error"]["code"] == "validation_error"
        assert frame["error"]["message"] == message

    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": ""}))
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert (frame["type"], frame["error"]["code"]) == ("error", "validation_error")
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "x" * (1024 * 1024 + 1)})
    )
    frame = json.loads(await communicator.receive_from(timeout=5))
    assert (frame["type"], frame["error"]["code"]) == ("error", "payload_too_large")
    assert await database_sync_to_async(Message.objects.count)() == 0

    fake_openai.script(Reply(text="Still here."))
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
    frames = await _frames_until(communicator, _is_final)
    assert frames[-1]["message"]["content"] == "Still here."
    await communicator.disconnect()


async def test_other_users_session_is_closed_4404(fake_session, other_user):
    token = await database_sync_to_async(_token)(other_user)
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{fake_session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    await communicator.connect(timeout=5)
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await communicator.disconnect()
    assert await database_sync_to_async(Message.objects.count)() == 0


async def test_unknown_session_is_closed_4404(ws_token):
    communicator = WebsocketCommunicator(
        application,
        "/ws/sessions/987654/",
        headers=[(b"authorization", f"Token {ws_token}".encode())],
    )
    await communicator.connect(timeout=5)
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await communicator.disconnect()


async def test_anonymous_and_bad_token_are_closed_4401(fake_session):
    for headers in ([], [(b"authorization", b"Token not-a-token")]):
        communicator = WebsocketCommunicator(
            application, f"/ws/sessions/{fake_session.pk}/", headers=headers
        )
        await communicator.connect(timeout=5)
        assert await communicator.receive_output(timeout=5) == {
            "type": "websocket.close",
            "code": 4401,
        }
        await communicator.disconnect()


async def test_foreign_origin_is_rejected(fake_session, ws_token):
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{fake_session.pk}/",
        headers=[
            (b"origin", b"https://evil.example"),
            (b"authorization", f"Token {ws_token}".encode()),
        ],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected is False
    await communicator.disconnect()


async def test_provider_500_sends_message_failed(fake_session, fake_openai, ws_token, eager_tasks):
    fake_openai.script(*[Reply(status=500)] * 10)
    communicator = await _connect(fake_session.pk, ws_token)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    assert frames[-1]["type"] == "message.failed"
    assert frames[-1]["error"]["code"] == "model_unavailable"
    user_message = await database_sync_to_async(Message.objects.get)(seq=1, session=fake_session)
    assert (user_message.content, user_message.status) == ("hi", "complete")


async def test_generation_stop_keeps_partial_text(fake_session, fake_openai, ws_token, eager_tasks):
    chunks = [f"word{i} " for i in range(60)]
    fake_openai.script(Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.05))
    communicator = await _connect(fake_session.pk, ws_token)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "go"}))
    await _frames_until(communicator, lambda f: f["type"] == "message.delta")
    await communicator.send_to(text_data=json.dumps({"type": "generation.stop"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    final = frames[-1]["message"]
    assert final["status"] == "complete"
    assert final["content"].startswith("word0 word1 ")
    assert len(final["content"]) < len("".join(chunks))
    stored = await database_sync_to_async(Message.objects.get)(pk=final["id"])
    assert (stored.finish_reason, stored.content) == ("stopped", final["content"])
    # the provider's HTTP stream was closed: the server notices at its next write
    for _ in range(40):
        if fake_openai.aborted:
            break
        await asyncio.sleep(0.05)
    assert fake_openai.aborted == 1


async def test_generation_stop_ends_a_silent_stream(
    fake_session, fake_openai, ws_token, eager_tasks
):
    # The provider answers, then says nothing for a minute before its first token.
    fake_openai.script(Reply(text="Too late.", chunks=["Too ", "late."], stall_after=0, stall=60))
    communicator = await _connect(fake_session.pk, ws_token)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "go"}))
    await _frames_until(
        communicator,
        lambda f: f["type"] == "message.created" and f["message"]["role"] == "assistant",
    )
    await communicator.send_to(text_data=json.dumps({"type": "generation.stop"}))
    frames = await _frames_until(communicator, _is_final, timeout=30)
    await communicator.disconnect()
    final = frames[-1]["message"]
    # stopped before any token: nothing of the stalled reply, not the whole of it after a minute
    assert (final["status"], final["content"]) == ("complete", "")
    stored = await database_sync_to_async(Message.objects.get)(pk=final["id"])
    assert (stored.finish_reason, stored.token_count) == ("stopped", 0)
    for _ in range(40):
        if fake_openai.aborted:
            break
        await asyncio.sleep(0.05)
    assert fake_openai.aborted == 1


async def test_duplicate_client_id_over_websocket(fake_session, fake_openai, ws_token, eager_tasks):
    fake_openai.script(Reply(text="One."))
    communicator = await _connect(fake_session.pk, ws_token)
    frame = {"type": "message.send", "content": "hi", "client_id": "dup-1"}
    await communicator.send_to(text_data=json.dumps(frame))
    await _frames_until(communicator, _is_final)
    await _frames_until(communicator, lambda f: f["type"] == "context.updated")
    await communicator.send_to(text_data=json.dumps(frame))
    assert await communicator.receive_nothing(timeout=1)
    await communicator.disconnect()
    assert await database_sync_to_async(Message.objects.filter(session=fake_session).count)() == 2
    assert len(fake_openai.requests) == 1


async def test_session_cookie_auth(fake_session, fake_openai, owner, client, eager_tasks):
    await database_sync_to_async(client.force_login)(owner)
    cookie = f"sessionid={client.cookies['sessionid'].value}".encode()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{fake_session.pk}/",
        headers=[(b"cookie", cookie), (b"origin", b"http://localhost")],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    fake_openai.script(Reply(text="Cookie ok."))
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    assert frames[-1]["message"]["content"] == "Cookie ok."
