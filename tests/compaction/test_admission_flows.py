"""Admission seen from outside: REST/websocket refusals, and no request ever above the budget."""

import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import ChatSession, Message
from bots.transitions import session_context_recount
from chat_platform.asgi import application
from chat_platform.llm.tokens import count_message_tokens
from tests.factories import SessionFactory
from tests.fakeopenai import Reply

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]

MODEL = "openai/fake-model"


@pytest.fixture
def small_bot(fake_bot):
    # W 700, R 200 -> B 500
    fake_bot.context_window = 700
    fake_bot.max_output_tokens = 200
    fake_bot.system_prompt = "You are terse."
    # Admission alone: with compaction off nothing but trimming keeps requests within B.
    fake_bot.compaction_enabled = False
    fake_bot.save()
    return fake_bot


def test_oversized_message_is_422_and_nothing_is_sent(
    owner_client, owner, small_bot, fake_openai, eager_tasks
):
    session = SessionFactory(user=owner, bot=small_bot)
    huge = "lorem ipsum " * 400  # ~800 tokens > B = 500
    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": huge}, format="json"
    )
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["code"] == "context_too_large"
    assert error["details"]["user_message"]["content"] == huge
    assert error["details"]["assistant_message"]["status"] == "failed"
    assert fake_openai.requests == []
    user_message, reply = Message.objects.filter(session=session).order_by("seq")
    assert (user_message.content, user_message.status) == (huge, "complete")
    assert (reply.status, reply.error_code) == ("failed", "context_too_large")
    # the session stays usable
    fake_openai.script(Reply(text="ok"))
    ok = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": "short", "wait": True},
        format="json",
    )
    assert ok.status_code == 201
    # the oversized message is history now and cannot fit: it is trimmed, never sent
    assert all(m["content"] != huge for m in fake_openai.requests[0]["messages"])


async def test_oversized_message_over_websocket_is_message_failed(
    owner, small_bot, fake_openai, eager_tasks
):
    session = await database_sync_to_async(SessionFactory)(user=owner, bot=small_bot)
    token = await database_sync_to_async(lambda: Token.objects.get_or_create(user=owner)[0].key)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session.pk}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    assert (await communicator.connect(timeout=5))[0]
    await communicator.send_to(
        text_data=json.dumps({"type": "message.send", "content": "lorem ipsum " * 400})
    )
    frames = []
    while not frames or frames[-1]["type"] != "message.failed":
        frames.append(json.loads(await communicator.receive_from(timeout=10)))
    await communicator.disconnect()
    assert [f["type"] for f in frames] == ["message.created", "message.created", "message.failed"]
    assert frames[-1]["error"]["code"] == "context_too_large"
    assert fake_openai.requests == []


def test_long_conversation_never_sends_more_than_the_budget(
    owner_client, owner, small_bot, fake_openai, eager_tasks
):
    session = SessionFactory(user=owner, bot=small_bot)
    budget = 500
    replies = [
        Reply(text=" ".join(f"reply{turn} word{i}" for i in range(5 + (turn * 7) % 40)))
        for turn in range(30)
    ]
    fake_openai.script(*replies)
    for turn in range(30):
        content = " ".join(f"question{turn} token{i}" for i in range(3 + (turn * 11) % 50))
        response = owner_client.post(
            f"/api/v1/sessions/{session.pk}/messages/",
            {"content": content, "wait": True},
            format="json",
        )
        assert response.status_code == 201, response.json()

    assert len(fake_openai.requests) == 30
    sent = [
        sum(count_message_tokens(m["content"], model=MODEL) for m in request["messages"])
        for request in fake_openai.requests
    ]
    assert max(sent) <= budget
    # trimming really happened: late requests no longer carry the first question
    assert (
        fake_openai.requests[-1]["messages"][1]["content"]
        != fake_openai.requests[0]["messages"][1]["content"]
    )
    assert fake_openai.requests[-1]["messages"][0] == {
        "role": "system",
        "content": "You are terse.",
    }
    # the running totals agree with a full recount
    session.refresh_from_db()
    stored = (session.context_tokens, session.context_messages)
    assert stored == session_context_recount(session_id=session.pk)
    assert stored[1] == 60


def test_context_updated_frame_after_a_turn(owner, small_bot, fake_openai, eager_tasks):
    import asyncio

    async def run():
        session = await database_sync_to_async(SessionFactory)(user=owner, bot=small_bot)
        token = await database_sync_to_async(
            lambda: Token.objects.get_or_create(user=owner)[0].key
        )()
        communicator = WebsocketCommunicator(
            application,
            f"/ws/sessions/{session.pk}/",
            headers=[(b"authorization", f"Token {token}".encode())],
        )
        assert (await communicator.connect(timeout=5))[0]
        fake_openai.script(Reply(text="Fine, thanks."))
        await communicator.send_to(
            text_data=json.dumps({"type": "message.send", "content": "How are you?"})
        )
        frames = []
        while not frames or frames[-1]["type"] != "context.updated":
            frames.append(json.loads(await communicator.receive_from(timeout=10)))
        await communicator.disconnect()
        return session, frames[-1]["context"]

    session, context = asyncio.run(run())
    system = count_message_tokens("You are terse.", model=MODEL)
    history = count_message_tokens("How are you?", model=MODEL) + count_message_tokens(
        "Fine, thanks.", model=MODEL
    )
    # this bot's compaction is off: no threshold acts, so the report carries no marks
    assert (context["budget"], context["soft"], context["hard"], context["target"]) == (
        500,
        None,
        None,
        None,
    )
    assert context["parts"] == {
        "system": system,
        "pinned": 0,
        "summaries": 0,
        "memory_index": 0,
        "history": history,
    }
    assert context["pressure"] == system + history
    assert context["last_admission"]["decision"] == "admit"
    assert context["last_admission"]["path"] == "turn"
    assert ChatSession.objects.get(pk=session.pk).context_tokens == history


def test_context_counters_survive_failure_and_stop(
    owner_client, owner, fake_bot, fake_openai, eager_tasks
):
    session = SessionFactory(user=owner, bot=fake_bot)
    fake_openai.script(Reply(text="first answer"), *[Reply(status=500)] * 3)
    for content in ["one", "two"]:
        owner_client.post(
            f"/api/v1/sessions/{session.pk}/messages/",
            {"content": content, "wait": True},
            format="json",
        )
    session.refresh_from_db()
    expected = sum(count_message_tokens(t, model=MODEL) for t in ["one", "first answer", "two"])
    assert (session.context_tokens, session.context_messages) == (expected, 3)
    assert session_context_recount(session_id=session.pk) == (expected, 3)
