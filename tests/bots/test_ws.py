"""The websocket surface (docs/api.md) against the real ASGI app and the Redis channel layer."""

import asyncio
import json
import logging

import pytest
from channels.db import database_sync_to_async
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.db import OperationalError
from rest_framework.authtoken.models import Token
from uvicorn.protocols.utils import ClientDisconnected

from bots import consumers
from bots.models import Message
from chat_platform.asgi import application
from chat_platform.realtime import session_group
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


async def test_an_unknown_frame_type_is_echoed_only_in_part(fake_session, ws_token):
    """A frame type the server does not know is named in the error by its first 100 characters
    and its length: a 100,000-character type came back whole, twice (message and details)."""
    communicator = await _connect(fake_session.pk, ws_token)
    kind = "é" * 100 + "x" * 99_900
    await communicator.send_to(text_data=json.dumps({"type": kind}))
    raw = await communicator.receive_from(timeout=5)
    assert json.loads(raw) == {
        "type": "error",
        "error": {
            "code": "validation_error",
            "message": f"Unknown frame type {'é' * 100!r}… (100000 characters).",
            "details": {"type": "é" * 100},
        },
    }
    assert len(raw) < 2000  # was 200,000 and more
    await communicator.disconnect()


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


async def test_a_client_gone_before_the_accept_reached_it_is_no_failure(fake_session, ws_token):
    """The page moved on while its socket opened: uvicorn raises ClientDisconnected from the
    accept. The consumer ends quietly (no ws_consumer_failed, no 500) and leaves the group it
    had joined, which no disconnect would leave for it."""

    async def app(scope, receive, send):
        async def send_to_a_gone_client(message):
            if message["type"] == "websocket.accept":
                raise ClientDisconnected()
            await send(message)

        await application(scope, receive, send_to_a_gone_client)

    communicator = WebsocketCommunicator(
        app,
        f"/ws/sessions/{fake_session.pk}/",
        headers=[(b"authorization", f"Token {ws_token}".encode())],
    )
    await communicator.send_input({"type": "websocket.connect"})
    assert await asyncio.wait_for(communicator.future, 10) is None
    layer = get_channel_layer()
    assert session_group(fake_session.pk) not in layer.groups


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


async def test_a_chat_deleted_while_its_socket_is_open_closes_it_4404(fake_session, ws_token):
    """The chat is deleted from another tab or the API: its open socket ends with the code a
    handshake to a deleted chat gets (the page says the chat is gone) instead of staying open
    and answering every send "not found"."""
    from turns.services.session import session_delete

    communicator = await _connect(fake_session.pk, ws_token)
    owner = await database_sync_to_async(lambda: fake_session.user)()
    await database_sync_to_async(session_delete)(user=owner, session_id=fake_session.pk)
    assert await communicator.receive_output(timeout=5) == {"type": "websocket.close", "code": 4404}
    await communicator.disconnect()


async def test_another_chats_delete_leaves_the_socket_open(fake_session, ws_token):
    from bots.models import ChatSession
    from turns.services.session import session_delete

    other = await database_sync_to_async(ChatSession.objects.create)(
        user=await database_sync_to_async(lambda: fake_session.user)(), bot=fake_session.bot
    )
    communicator = await _connect(fake_session.pk, ws_token)
    await database_sync_to_async(session_delete)(user=other.user, session_id=other.pk)
    assert await communicator.receive_nothing(timeout=0.5)
    await communicator.send_json_to({"type": "nonsense"})
    assert (await communicator.receive_json_from(timeout=5))["type"] == "error"
    await communicator.disconnect()


@pytest.mark.parametrize(
    "path",
    ["/ws/sessions/abc/", "/ws/sessions/-1/", "/ws/nope/", "/ws/sessions/" + "9" * 30 + "/"],
)
async def test_a_path_with_no_session_is_closed_4404_not_a_500(ws_token, path, caplog):
    """A websocket path no route matches answered the handshake with HTTP 500 and logged a
    ValueError ("No route found"): anyone could fill the error log."""
    communicator = WebsocketCommunicator(
        application, path, headers=[(b"authorization", f"Token {ws_token}".encode())]
    )
    with caplog.at_level(logging.ERROR):
        await communicator.connect(timeout=5)
        assert await communicator.receive_output(timeout=5) == {
            "type": "websocket.close",
            "code": 4404,
        }
        await communicator.disconnect()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


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


async def _handshake(session_id: int, headers: list, path: str | None = None) -> bool:
    communicator = WebsocketCommunicator(
        application, path or f"/ws/sessions/{session_id}/", headers=headers
    )
    connected, _ = await communicator.connect(timeout=5)
    await communicator.disconnect()
    return connected


@pytest.mark.parametrize(
    ("origin", "host", "accepted"),
    [
        (b"http://127.0.0.1:8000", b"127.0.0.1:8000", True),
        (b"http://localhost", b"localhost", True),
        # same host, another port: another origin (a page served by something else)
        (b"http://127.0.0.1:9999", b"127.0.0.1:8000", False),
        (b"http://127.0.0.1", b"127.0.0.1:8000", False),
        # another scheme: the page was not served by this (plain http) server
        (b"https://127.0.0.1:8000", b"127.0.0.1:8000", False),
        # a Host header outside ALLOWED_HOSTS is not this site, even when Origin matches it
        (b"http://evil.example:8000", b"evil.example:8000", False),
        # no Host: nothing to match a browser's Origin against
        (b"http://127.0.0.1:8000", None, False),
        (b"null", b"127.0.0.1:8000", False),
    ],
)
async def test_origin_must_be_the_host_and_port_connected_to(
    fake_session, ws_token, origin, host, accepted
):
    headers = [(b"origin", origin), (b"authorization", f"Token {ws_token}".encode())]
    if host is not None:
        headers.append((b"host", host))
    assert await _handshake(fake_session.pk, headers) is accepted


async def test_trusted_origins_are_accepted(fake_session, ws_token, settings):
    settings.CSRF_TRUSTED_ORIGINS = ["https://chat.example.com", "https://*.corp.example"]
    auth = (b"authorization", f"Token {ws_token}".encode())
    host = (b"host", b"127.0.0.1:8000")
    for origin, accepted in [
        (b"https://chat.example.com", True),
        (b"https://eu.corp.example", True),
        (b"http://chat.example.com", False),
        (b"https://chat.example.com:8443", False),
        (b"https://corp.example.evil", False),
    ]:
        assert await _handshake(fake_session.pk, [(b"origin", origin), host, auth]) is accepted


async def test_tls_behind_proxy_origin_uses_the_proxy_header(fake_session, ws_token, settings):
    settings.ALLOWED_HOSTS = ["chat.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
    base = [
        (b"origin", b"https://chat.example.com"),
        (b"host", b"chat.example.com"),
        (b"authorization", f"Token {ws_token}".encode()),
    ]
    assert await _handshake(fake_session.pk, base) is False
    assert await _handshake(fake_session.pk, [*base, (b"x-forwarded-proto", b"https")]) is True


async def test_frames_on_a_refused_socket_are_ignored(fake_session, other_user):
    token = await database_sync_to_async(_token)(other_user)
    for headers, code in [
        ([], 4401),
        ([(b"authorization", f"Token {token}".encode())], 4404),
    ]:
        communicator = WebsocketCommunicator(
            application, f"/ws/sessions/{fake_session.pk}/", headers=headers
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected
        # The client speaks before the close reaches it: every kind of frame.
        for raw in [
            json.dumps({"type": "message.send", "content": "hi"}),
            json.dumps({"type": "generation.stop"}),
            json.dumps({"type": "nope"}),
            "{not json",
        ]:
            await communicator.send_to(text_data=raw)
        assert await communicator.receive_output(timeout=5) == {
            "type": "websocket.close",
            "code": code,
        }
        # Nothing after the close (no error frame, no crash of the consumer)...
        assert await communicator.receive_nothing(timeout=0.3)
        # ...and the consumer ends cleanly (an exception in it would be raised here).
        await communicator.disconnect()
    assert await database_sync_to_async(Message.objects.count)() == 0


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
    # 10 s of stream: long enough that a stop lands mid-stream even on a loaded machine
    chunks = [f"word{i} " for i in range(200)]
    fake_openai.script(Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.05))
    communicator = await _connect(fake_session.pk, ws_token)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "go"}))
    await _frames_until(communicator, lambda f: f["type"] == "message.delta")
    await communicator.send_to(text_data=json.dumps({"type": "generation.stop"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    final = frames[-1]["message"]
    assert final["status"] == "complete"
    # what had arrived when the stop landed (one chunk or more: the stop can follow the first
    # delta within a chunk's 50 ms), whole chunks, and not the rest
    kept = final["content"]
    assert kept.startswith("word0 ") and "".join(chunks).startswith(kept)
    assert len(kept) < len("".join(chunks))
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
    # Stop once the provider holds the request (a cold process may still be importing litellm
    # when the reply is created: a stop then ends the turn before any request, and the
    # provider has nothing to see aborted; that failed alone and once in CI).
    for _ in range(600):
        if fake_openai.in_flight:
            break
        await asyncio.sleep(0.05)
    assert fake_openai.in_flight == 1
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
        headers=[(b"cookie", cookie), (b"origin", b"http://localhost"), (b"host", b"localhost")],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    fake_openai.script(Reply(text="Cookie ok."))
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
    frames = await _frames_until(communicator, _is_final)
    await communicator.disconnect()
    assert frames[-1]["message"]["content"] == "Cookie ok."


@pytest.mark.parametrize(
    ("exc", "event"),
    [
        # psycopg_pool.PoolTimeout surfaces as Django's OperationalError (seen in a burst)
        (OperationalError("couldn't get a connection after 10.00 sec"), "ws_send_unavailable"),
        (RuntimeError("boom"), "ws_send_failed"),
    ],
    ids=["database-saturated", "bug"],
)
async def test_a_send_that_cannot_be_stored_says_why_and_the_socket_stays_usable(
    fake_session, ws_token, monkeypatch, caplog, exc, event
):
    def fail(**kwargs):
        raise exc

    monkeypatch.setattr(consumers.send_services, "session_message_send", fail)
    communicator = await _connect(fake_session.pk, ws_token)
    with caplog.at_level(logging.ERROR):
        await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "hi"}))
        frame = json.loads(await communicator.receive_from(timeout=10))
    expected = (
        {"code": "service_unavailable", "message": consumers.SEND_UNAVAILABLE, "details": {}}
        if event == "ws_send_unavailable"
        else {"code": "error", "message": "The message could not be sent.", "details": {}}
    )
    assert frame == {"type": "error", "error": expected}
    [record] = [r for r in caplog.records if r.levelno >= logging.ERROR]
    # logged with the event name and the cause's traceback
    assert (record.msg["event"], record.exc_info[1]) == (event, exc)
    # the socket still works
    await communicator.send_to(text_data="not json")
    assert json.loads(await communicator.receive_from(timeout=5))["type"] == "error"
    await communicator.disconnect()
    assert await database_sync_to_async(Message.objects.filter(session=fake_session).count)() == 0


async def test_an_open_socket_already_receives_the_sessions_frames(fake_session, ws_token):
    # The handshake completes only once the socket has joined its session's group: a frame sent
    # to the session the moment the client sees the socket open reaches it.
    from channels.layers import get_channel_layer

    from chat_platform import realtime

    communicator = await _connect(fake_session.pk, ws_token)
    await get_channel_layer().group_send(
        realtime.session_group(fake_session.pk),
        {"type": realtime.FRAME_EVENT, "frame": {"type": "probe", "n": 1}},
    )
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "probe", "n": 1}
    await communicator.disconnect()


async def test_a_sockets_frames_take_no_thread_hop(fake_session, ws_token, monkeypatch):
    # Relaying a frame touches no database: channels' dispatch would first hop to the one
    # thread-sensitive thread to close old connections, once per frame (~14 a turn), on the way
    # to the client. Every database call of the consumer closes them itself (docs/performance.md
    # "A turn's CPU, sixth pass").
    from asgiref import sync as asgiref_sync
    from channels.layers import get_channel_layer

    from chat_platform import realtime

    communicator = await _connect(fake_session.pk, ws_token)
    hops = []
    real_call = asgiref_sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__name__", repr(self.func)))
        return await real_call(self, *args, **kwargs)

    monkeypatch.setattr(asgiref_sync.SyncToAsync, "__call__", counted)
    for n in range(5):
        await get_channel_layer().group_send(
            realtime.session_group(fake_session.pk),
            {"type": realtime.FRAME_EVENT, "frame": {"type": "probe", "n": n}},
        )
    received = [json.loads(await communicator.receive_from(timeout=5)) for _ in range(5)]
    assert received == [{"type": "probe", "n": n} for n in range(5)]
    assert hops == []
    monkeypatch.undo()
    await communicator.disconnect()


async def test_a_token_handshake_does_not_resolve_the_cookie_session_s_user(
    fake_session, ws_token, monkeypatch
):
    # The token's user wins over the session cookie's (chat_platform/realtime_auth.py): the
    # handshake reads the token and the chat, one hop to the database thread each, and no longer
    # first the cookie session's user, a hop of its own (docs/performance.md "A turn's CPU,
    # sixth pass").
    from asgiref import sync as asgiref_sync

    hops = []
    real_call = asgiref_sync.SyncToAsync.__call__

    async def counted(self, *args, **kwargs):
        hops.append(getattr(self.func, "__name__", repr(self.func)))
        return await real_call(self, *args, **kwargs)

    monkeypatch.setattr(asgiref_sync.SyncToAsync, "__call__", counted)
    communicator = await _connect(fake_session.pk, ws_token)
    monkeypatch.undo()
    assert hops == ["_user_for_token", "session_get_for_user"]
    await communicator.disconnect()
