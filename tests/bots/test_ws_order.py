"""One socket, one order: the sends of one websocket are stored in the order they were received
(docs/chat-turn.md), while ``generation.stop`` and bad frames are answered at once."""

import asyncio
import json

import pytest
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from rest_framework.authtoken.models import Token

from bots.models import Message
from chat_platform.asgi import application
from turns import dispatch

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]

FRAMES = 1000


@pytest.fixture
def handed_over(monkeypatch):
    """The replies' hand-over to the task queue, recorded instead of sent: these tests are about
    what the socket stores, not the turns (the reply rows stay pending outbox rows)."""
    ids: list[int] = []

    def record(message_id: int) -> bool:
        ids.append(message_id)
        return True

    monkeypatch.setattr(dispatch, "turn_dispatch", record)
    return ids


async def _connect(session_id: int, user) -> WebsocketCommunicator:
    token = await database_sync_to_async(lambda: Token.objects.get_or_create(user=user)[0].key)()
    communicator = WebsocketCommunicator(
        application,
        f"/ws/sessions/{session_id}/",
        headers=[(b"authorization", f"Token {token}".encode())],
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    return communicator


def _user_texts(session) -> list[str]:
    return list(
        Message.objects.filter(session=session, role="user")
        .order_by("seq")
        .values_list("content", flat=True)
    )


async def _wait_for_stored(session, count: int) -> list[str]:
    # Bounded by a count of polls, not a timing assertion: the check is the stored order.
    for _ in range(1500):
        texts = await database_sync_to_async(_user_texts)(session)
        if len(texts) >= count:
            return texts
        await asyncio.sleep(0.1)
    return await database_sync_to_async(_user_texts)(session)


@pytest.mark.timeout(600)  # 1,000 sends, each its own transaction, on a shared 2-core machine
async def test_a_thousand_quick_sends_are_stored_in_the_order_sent(
    owner, fake_session, handed_over
):
    communicator = await _connect(fake_session.pk, owner)
    texts = [f"step {i:03d}" for i in range(FRAMES)]
    for text in texts:
        await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": text}))
    stored = await _wait_for_stored(fake_session, FRAMES)
    await communicator.disconnect()
    assert stored == texts
    # each user message is followed by its reply, seqs gap-free
    seqs = await database_sync_to_async(
        lambda: list(
            Message.objects.filter(session=fake_session)
            .order_by("seq")
            .values_list("seq", "role", "content")
        )
    )()
    assert [s for s, _, _ in seqs] == list(range(1, 2 * FRAMES + 1))
    assert [role for _, role, _ in seqs] == ["user", "assistant"] * FRAMES
    assert len(handed_over) == FRAMES


async def test_bad_frames_between_sends_get_an_error_and_the_socket_stays_open(
    owner, fake_session, handed_over
):
    communicator = await _connect(fake_session.pk, owner)
    sent = []
    for i in range(20):
        sent.append(f"m{i:02d}")
        await communicator.send_to(
            text_data=json.dumps({"type": "message.send", "content": f"m{i:02d}"})
        )
        if i % 5 == 4:
            await communicator.send_to(text_data="{not json")
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": ""}))
    stored = await _wait_for_stored(fake_session, 20)
    errors = []
    while len(errors) < 5:
        frame = json.loads(await communicator.receive_from(timeout=10))
        if frame["type"] == "error":
            errors.append(frame["error"])
    assert [e["code"] for e in errors] == ["validation_error"] * 5
    assert [e["message"] for e in errors].count("The frame is not valid JSON.") == 4
    # still open: one more send is stored after everything before it
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "last"}))
    stored = await _wait_for_stored(fake_session, 21)
    await communicator.disconnect()
    assert stored == [*sent, "last"]


async def test_a_stop_acts_at_once_while_a_send_waits_behind_a_running_turn(
    owner, fake_session, fake_openai, inprocess_tasks
):
    # Embedded mode's task threads: the first reply streams while the second waits its turn
    # behind it; the stop must not wait behind anything.
    from tests.fakeopenai import Reply

    chunks = [f"word{i} " for i in range(200)]
    fake_openai.script(
        Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.05), Reply(text="Two.")
    )
    communicator = await _connect(fake_session.pk, owner)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "one"}))
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "two"}))
    frame = {}
    while frame.get("type") != "message.delta":
        frame = json.loads(await communicator.receive_from(timeout=20))
    await communicator.send_to(text_data=json.dumps({"type": "generation.stop"}))
    finals = []
    while len(finals) < 2:
        frame = json.loads(await communicator.receive_from(timeout=30))
        if frame["type"] == "message.completed" and frame["message"]["role"] == "assistant":
            finals.append(frame["message"])
    await communicator.disconnect()
    first, second = finals
    assert len(first["content"]) < len("".join(chunks))  # stopped mid-stream
    assert second["content"] == "Two."
    rows = await database_sync_to_async(
        lambda: list(
            Message.objects.filter(session=fake_session)
            .order_by("seq")
            .values_list("role", "content", "finish_reason")
        )
    )()
    assert [(r, c) for r, c, _ in rows] == [
        ("user", "one"),
        ("assistant", first["content"]),
        ("user", "two"),
        ("assistant", "Two."),
    ]
    assert rows[1][2] == "stopped"


async def test_a_flood_of_large_sends_waits_for_the_drain_instead_of_filling_the_memory(
    owner, fake_session, handed_over, monkeypatch
):
    # While the store is held, a client floods 40 sends of 900 KB (36 MB): the socket takes
    # frames only while what waits to be stored stays within SENDS_WAITING_MAX_BYTES (8 MB; the rest
    # wait in the server's and the network's buffers); once the store goes on, all are stored
    # in order. Before, every frame went into the queue at once (36 MB, or 60 frames of 16 MB:
    # +541 MB of the web process's memory, measured).
    import threading

    from bots import consumers

    held = threading.Event()
    store = consumers._send_in_thread

    def held_store(*args, **kwargs):
        held.wait(60)
        store(*args, **kwargs)

    monkeypatch.setattr(consumers, "_send_in_thread", held_store)
    seen: list[consumers.SessionConsumer] = []
    connect = consumers.SessionConsumer.connect

    async def recorded_connect(self):
        seen.append(self)
        await connect(self)

    monkeypatch.setattr(consumers.SessionConsumer, "connect", recorded_connect)
    communicator = await _connect(fake_session.pk, owner)
    texts = [f"{i:02d} " + "x" * 900_000 for i in range(40)]
    for text in texts:
        await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": text}))
    # Let the socket take every frame it will take: until its input stops moving.
    consumer, unchanged, left = seen[0], 0, -1
    for _ in range(1000):
        await asyncio.sleep(0.01)
        now = communicator.input_queue.qsize()
        unchanged = unchanged + 1 if now == left else 0
        left = now
        if unchanged >= 20:
            break
    waiting = consumer.sends.qsize()
    waiting_bytes = getattr(consumer, "sends_waiting_bytes", None)
    held.set()
    stored = await _wait_for_stored(fake_session, 40)
    await communicator.disconnect()
    frame_bytes = len(json.dumps({"type": "message.send", "content": texts[0]}))
    # 9 frames held (8 MB): the one being stored and 8 behind it; before, all 40 (39 queued).
    assert waiting + 1 == 8 * 1024 * 1024 // frame_bytes
    assert waiting_bytes == (waiting + 1) * frame_bytes
    assert [t[:3] for t in stored] == [t[:3] for t in texts]
