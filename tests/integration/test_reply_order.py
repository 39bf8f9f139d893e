"""One reply at a time per session, across processes (issue 18, defect 1): uvicorn + a Celery
worker with eight threads, so two turns of one session *could* run at once."""

import asyncio
import json
import time

import httpx
import pytest
import websockets
from rest_framework.authtoken.models import Token

from bots.models import Message
from tests.factories import BotFactory, SessionFactory, UserFactory
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]

FIRST = ["The first ", "answer, ", "written ", "slowly."]


@pytest.fixture
def chat(real_stack, fake_openai):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    bot = BotFactory(owner=user, model="openai/fake-model", api_base=fake_openai.url)
    return real_stack, token, SessionFactory(user=user, bot=bot)


def _transcript(session):
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "status", "content")
    )


def _wait_finished(session, count, timeout=60.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        replies = Message.objects.filter(session=session, role="assistant")
        if replies.count() == count and not replies.filter(status__in=["pending", "streaming"]):
            return
        time.sleep(0.1)
    raise AssertionError(f"replies did not finish: {_transcript(session)}")


def test_two_messages_50_ms_apart_get_two_replies_in_order_the_second_seeing_the_first(
    chat, fake_openai
):
    base, token, session = chat
    fake_openai.script(
        Reply(text="".join(FIRST), chunks=FIRST, delay_between_chunks=0.3),
        Reply(text="The second answer."),
    )
    url = f"{base}/api/v1/sessions/{session.pk}/messages/"
    headers = {"Authorization": f"Token {token}"}
    one = httpx.post(url, json={"content": "Question one"}, headers=headers, timeout=120)
    time.sleep(0.05)
    two = httpx.post(url, json={"content": "Question two"}, headers=headers, timeout=120)
    assert (one.status_code, two.status_code) == (202, 202)

    _wait_finished(session, 2)

    assert _transcript(session) == [
        (1, "user", "complete", "Question one"),
        (2, "assistant", "complete", "The first answer, written slowly."),
        (3, "user", "complete", "Question two"),
        (4, "assistant", "complete", "The second answer."),
    ]
    assert len(fake_openai.requests) == 2
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "Question one"},
        {"role": "assistant", "content": "The first answer, written slowly."},
        {"role": "user", "content": "Question two"},
    ]


async def _stop_during_first(ws_url: str, token: str) -> list[dict]:
    frames: list[dict] = []
    async with websockets.connect(
        ws_url, additional_headers={"Authorization": f"Token {token}"}, open_timeout=10
    ) as ws:

        async def until(predicate) -> dict:
            while True:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
                frames.append(frame)
                if predicate(frame):
                    return frame

        await ws.send(json.dumps({"type": "message.send", "content": "Question one"}))
        await until(lambda f: f["type"] == "message.delta")
        await ws.send(json.dumps({"type": "message.send", "content": "Question two"}))
        # the second exchange is stored at once (its pending reply is the queued one)
        await until(
            lambda f: f["type"] == "message.created" and f["message"]["seq"] == 4  # noqa: PLR2004
        )
        await ws.send(json.dumps({"type": "generation.stop"}))
        await until(
            lambda f: (
                f["type"] == "message.completed"
                and f["message"]["role"] == "assistant"
                and f["message"]["seq"] == 4
            )  # noqa: PLR2004
        )
    return frames


def test_stop_during_the_first_reply_leaves_the_second_queued_then_answered(chat, fake_openai):
    base, token, session = chat
    fake_openai.script(
        Reply(text="".join(FIRST), chunks=FIRST, delay_between_chunks=0.5),
        Reply(text="The second answer."),
    )
    ws_url = base.replace("http", "ws") + f"/ws/sessions/{session.pk}/"

    frames = asyncio.run(_stop_during_first(ws_url, token))

    first = Message.objects.get(session=session, seq=2)
    second = Message.objects.get(session=session, seq=4)
    assert (first.status, first.finish_reason) == ("complete", "stopped")
    assert first.content and "".join(FIRST).startswith(first.content)
    assert "".join(FIRST) != first.content  # stopped before its end
    assert (second.status, second.finish_reason, second.content) == (
        "complete",
        "stop",
        "The second answer.",
    )
    assert second.stop_requested is False
    # the second reply's first frame came after the first reply ended
    ends = [
        i
        for i, f in enumerate(frames)
        if f["type"] == "message.completed" and f["message"]["id"] == first.pk
    ]
    second_deltas = [
        i for i, f in enumerate(frames) if f.get("message_id") == second.pk and "delta" in f
    ]
    assert ends and second_deltas and ends[0] < second_deltas[0]
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "Question one"},
        {"role": "assistant", "content": first.content},
        {"role": "user", "content": "Question two"},
    ]
