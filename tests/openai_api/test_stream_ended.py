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


class Frames:
    """The frames a stream hears, then silence (``next`` times out)."""

    closed = False

    def __init__(self, frames: list[dict]) -> None:
        self.frames = list(frames)

    async def next(self, timeout: float):
        return self.frames.pop(0) if self.frames else None

    async def close(self) -> None:
        self.closed = True


async def _streamed(owner, text: str, deltas: list[tuple[str, int]], first: list[str]):
    """What ``_stream`` sends for a stored reply of ``text`` that heard ``first``, then
    ``deltas`` (text, offset) and its completed frame: the content chunks' texts, and the
    finish reason."""

    def stored():
        session = SessionFactory(user=owner)
        question = message_add(session, role="user", content="ask")
        return message_add(session, role="assistant", content=text, reply_to=question)

    reply = await sync_to_async(stored)()
    started = SimpleNamespace(reply=reply, model_id="writer")
    frame = {"type": "message.delta", "message_id": reply.pk}
    listener = Frames(
        [{**frame, "delta": d, "offset": offset} for d, offset in deltas]
        + [{"type": "message.completed", "message": {"id": reply.pk}}]
    )
    chunks = [
        chunk async for chunk in views._stream(started, listener, include_usage=False, first=first)
    ]
    events = [c.decode().removeprefix("data: ").strip() for c in chunks]
    bodies = [json.loads(e) for e in events[:-1]]
    content = [b["choices"][0]["delta"].get("content") for b in bodies]
    return [c for c in content if c], bodies[-1]["choices"][0]["finish_reason"]


async def test_a_stream_that_missed_a_delta_ends_with_the_stored_text_not_a_gap(owner):
    """A delta frame lost on the way (the channel layer is lossy transport): the deltas after it
    start past the text relayed (``offset``), so none of them is relayed, and the client gets the
    rest from the stored reply once it has ended: the whole text, once, in order. It got
    "w00 w01 w04 " and then nothing (the stored text did not start with what it had)."""
    deltas = [("w01 ", 4), ("w04", 16)]  # "w02 w03 " (offset 8) was lost
    assert await _streamed(owner, "w00 w01 w02 w03 w04", deltas, first=["w00 "]) == (
        ["w00 ", "w01 ", "w02 w03 w04"],
        "stop",
    )


async def test_a_reply_s_second_model_call_is_checked_and_completed_on_its_own(owner):
    """After a round of the bot's tools the reply's next model call counts its offsets from 0
    (what the first call said went with its tool calls; the reply stores the second call's
    text). A delta lost in that call was not noticed (its offsets were compared with both
    calls' text), and the stored text, not starting with both, was never sent: the client got
    "Let me look.The answer 42." and no " is"."""
    deltas = [("The answer", 0), (" 42.", 13)]  # the second call; " is" (offset 10) was lost
    assert await _streamed(owner, "The answer is 42.", deltas, first=["Let me look."]) == (
        ["Let me look.", "The answer", " is 42."],
        "stop",
    )
