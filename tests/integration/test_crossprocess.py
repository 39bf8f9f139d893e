"""Real mode across processes: uvicorn (ASGI) + a Celery worker on Redis + PostgreSQL.

The turn is written by the web process, run by the worker, and its deltas travel back through
the Redis channel layer to a real websocket connection.
"""

import asyncio
import json
import threading

import httpx
import pytest
import redis
import websockets
from django.conf import settings
from rest_framework.authtoken.models import Token

from bots.models import Message
from chat_platform.celery_app import task_named
from tests.factories import BotFactory, SessionFactory, UserFactory
from tests.fakeopenai import Reply
from turns.dispatch import TURN_TASK

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]


async def ws_frames(ws_url: str, token: str, text: str) -> list[dict]:
    """Send one frame (``text``) over a real socket with an API token, and read the frames
    until the reply ends (completed or failed) or the platform answers an error. No client-side
    frame limit: a frame of the largest send comes back in its ``message.created``."""
    frames = []
    async with websockets.connect(
        ws_url,
        additional_headers={"Authorization": f"Token {token}"},
        open_timeout=10,
        max_size=None,
    ) as ws:
        await ws.send(text)
        while True:
            frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
            frames.append(frame)
            if frame["type"] in {"error", "message.failed"} or (
                frame["type"] == "message.completed" and frame["message"]["role"] == "assistant"
            ):
                return frames


def test_turn_over_real_websocket_with_worker(real_stack, fake_openai):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    bot = BotFactory(owner=user, model="openai/fake-model", api_base=fake_openai.url)
    session = SessionFactory(user=user, bot=bot)
    chunks = ["Streaming ", "across ", "processes ", "works."]
    fake_openai.script(Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.1))

    ws_url = real_stack.replace("http", "ws") + f"/ws/sessions/{session.pk}/"
    send = json.dumps({"type": "message.send", "content": "hello worker"})
    frames = asyncio.run(ws_frames(ws_url, token, send))

    created = [f["message"] for f in frames if f["type"] == "message.created"]
    assert [m["role"] for m in created] == ["user", "assistant"]
    deltas = [f["delta"] for f in frames if f["type"] == "message.delta"]
    assert len(deltas) >= 2
    final = frames[-1]
    assert final["type"] == "message.completed"
    assert "".join(deltas) == final["message"]["content"] == "Streaming across processes works."
    reply = Message.objects.get(pk=final["message"]["id"])
    assert (reply.status, reply.content) == ("complete", "Streaming across processes works.")
    assert fake_openai.requests[0]["messages"][-1] == {"role": "user", "content": "hello worker"}


def test_rest_wait_does_not_freeze_the_api(real_stack, fake_openai):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    bot = BotFactory(owner=user, model="openai/fake-model", api_base=fake_openai.url)
    session = SessionFactory(user=user, bot=bot)
    headers = {"Authorization": f"Token {token}"}
    fake_openai.script(Reply(text="slow reply", chunks=["slow ", "reply"], hang=4.0))

    result: dict = {}

    def waiting_post() -> None:
        response = httpx.post(
            f"{real_stack}/api/v1/sessions/{session.pk}/messages/",
            json={"content": "take your time", "wait": True},
            headers=headers,
            timeout=60,
        )
        result["response"] = response

    thread = threading.Thread(target=waiting_post)
    thread.start()
    # while that request waits for its reply, the same server keeps answering others
    for _ in range(50):
        if Message.objects.filter(session=session, role="assistant").exists():
            break
        threading.Event().wait(0.1)
    listing = httpx.get(f"{real_stack}/api/v1/sessions/", headers=headers, timeout=30)
    assert listing.status_code == 200
    assert "response" not in result  # answered while the waiting request was still waiting
    thread.join(timeout=60)
    response = result["response"]
    assert response.status_code == 201
    assert response.json()["assistant_message"]["content"] == "slow reply"


def _queued_task_ids(client: redis.Redis, queue: str) -> dict[str, bytes]:
    return {json.loads(raw)["headers"]["id"]: raw for raw in client.lrange(queue, 0, -1)}


def test_the_shared_stack_takes_no_task_the_test_process_queues(real_stack, fake_openai):
    """The real stack is shared by the tests of this process (tests/realstack.py): its worker
    consumes only its own, prefixed queues. A task the test process queues on the same Redis db
    is still queued after the stack has run a turn from start to end."""
    user = UserFactory()
    token = Token.objects.create(user=user).key
    bot = BotFactory(owner=user, model="openai/fake-model", api_base=fake_openai.url)
    session = SessionFactory(user=user, bot=bot)
    fake_openai.script(Reply(text="Only mine."))
    client = redis.Redis.from_url(settings.REDIS_URL)
    queued = task_named(TURN_TASK).delay(0)  # no such reply: a worker that took it did nothing
    try:
        response = httpx.post(
            f"{real_stack}/api/v1/sessions/{session.pk}/messages/",
            json={"content": "hello", "wait": True},
            headers={"Authorization": f"Token {token}"},
            timeout=60,
        )
        assert response.status_code == 201
        assert response.json()["assistant_message"]["content"] == "Only mine."
        assert queued.id in _queued_task_ids(client, "chat")
    finally:
        raw = _queued_task_ids(client, "chat").get(queued.id)
        if raw is not None:
            client.lrem("chat", 1, raw)
        client.close()
