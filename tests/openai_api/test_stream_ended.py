"""A streamed reply that ended before any text (the client's tools; a reply whose frames were
missed) is streamed from the reply ``_first_news`` read, at once: the stream did not wait for a
frame that had already gone by, then read the database again a second later."""

import json
from types import SimpleNamespace

import pytest
from asgiref.sync import sync_to_async

from openai_api import views
from tests.factories import SessionFactory, message_add

pytestmark = pytest.mark.django_db(transaction=True)

CALL = {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}


class NoMoreFrames:
    """The end frame has gone by: a stream that waits for another is a failure here."""

    closed = False

    async def next(self, timeout: float):
        raise AssertionError("the stream waited for a frame after the reply had ended")

    async def close(self) -> None:
        self.closed = True


async def test_a_reply_that_ended_without_text_streams_at_once(owner):
    def stored():
        session = SessionFactory(user=owner)
        question = message_add(session, role="user", content="look it up")
        return message_add(
            session,
            role="assistant",
            content="",
            reply_to=question,
            tool_calls=[CALL],
            finish_reason="tool_calls",
            prompt_tokens=5,
            completion_tokens=3,
        )

    reply = await sync_to_async(stored)()
    started = SimpleNamespace(reply=reply, model_id="writer")
    listener = NoMoreFrames()

    chunks = [
        chunk async for chunk in views._stream(started, listener, include_usage=False, ended=reply)
    ]

    events = [c.decode().removeprefix("data: ").strip() for c in chunks]
    assert events[-1] == "[DONE]"
    bodies = [json.loads(e) for e in events[:-1]]
    assert bodies[-1]["choices"][0]["finish_reason"] == "tool_calls"
    assert any(b["choices"][0]["delta"].get("tool_calls") for b in bodies)
    assert listener.closed
