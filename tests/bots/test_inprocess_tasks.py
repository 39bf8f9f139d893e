"""Embedded mode's task runner (chat_platform/inprocess.py, docs/chat-turn.md "Embedded mode"):
a send, a regeneration and an edit return before their reply has run, and the reply then streams
to the socket with the same frames as a worker's. The same flows against real processes, in both
modes: tests/integration/test_modes_stream.py."""

import json
import threading

import pytest
from celery import Task
from channels.db import database_sync_to_async

from bots.models import Message
from chat_platform import inprocess
from chat_platform.celery_app import app as celery_app
from tests.bots.test_ws_order import _connect
from tests.factories import SessionFactory
from tests.fakeopenai import Reply

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.usefixtures("inmemory_channel_layer"),
]

CHUNKS = [f"word{i} " for i in range(8)]


def _slow_reply() -> Reply:
    return Reply(text="".join(CHUNKS), chunks=CHUNKS, delay_between_chunks=0.15)


async def _frames_of(communicator, reply_id: int) -> list[str]:
    """The socket's frame types for ``reply_id`` until it completes (or fails)."""
    kinds = []
    while True:
        frame = json.loads(await communicator.receive_from(timeout=30))
        message = frame.get("message") or {}
        if frame.get("message_id") == reply_id or message.get("id") == reply_id:
            kinds.append(frame["type"])
            if frame["type"] in ("message.completed", "message.failed"):
                return kinds


def _post(client, path: str, body: dict | None = None):
    return database_sync_to_async(client.post)(path, body or {}, format="json")


def _status(message_id: int) -> str:
    return Message.objects.get(pk=message_id).status


async def test_a_websocket_send_returns_at_once_and_its_reply_streams(
    owner, fake_session, fake_openai, inprocess_tasks
):
    fake_openai.script(_slow_reply(), Reply(text="Two."))
    communicator = await _connect(fake_session.pk, owner)
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "one"}))
    await communicator.send_to(text_data=json.dumps({"type": "message.send", "content": "two"}))
    # Both sends are stored while the first reply still streams: the socket's handler never
    # runs a turn (the second reply is created before the first one completes).
    order = []
    while len([o for o in order if o[0] == "message.completed" and o[1] == "assistant"]) < 2:
        frame = json.loads(await communicator.receive_from(timeout=30))
        message = frame.get("message") or {}
        order.append((frame["type"], message.get("role"), message.get("content")))
    await communicator.disconnect()
    created = [o for o in order if o[0] == "message.created"]
    first_done = order.index(("message.completed", "assistant", "".join(CHUNKS)))
    assert [o[1:] for o in created] == [
        ("user", "one"),
        ("assistant", ""),
        ("user", "two"),
        ("assistant", ""),
    ]
    assert max(order.index(o) for o in created) < first_done
    assert [o[0] for o in order[:first_done]].count("message.delta") >= 4
    assert order[-1] == ("message.completed", "assistant", "Two.")


async def test_regenerate_and_edit_return_before_the_reply_and_it_streams(
    owner, owner_client, fake_session, fake_openai, inprocess_tasks
):
    fake_openai.script(Reply(text="First."), _slow_reply(), _slow_reply())
    sent = await database_sync_to_async(owner_client.post)(
        f"/api/v1/sessions/{fake_session.pk}/messages/",
        {"content": "hello", "wait": True},
        format="json",
    )
    assert sent.status_code == 201
    first = sent.json()
    for path, body in (
        (f"/api/v1/messages/{first['assistant_message']['id']}/regenerate/", None),
        (f"/api/v1/messages/{first['user_message']['id']}/edit/", {"content": "hello again"}),
    ):
        response = await _post(owner_client, path, body)
        assert response.status_code == 201
        reply = response.json()["assistant_message"]
        # Answered before the reply ran: the request dispatched it and returned.
        assert reply["status"] == "pending"
        communicator = await _connect(response.json()["session"]["id"], owner)
        kinds = await _frames_of(communicator, reply["id"])
        await communicator.disconnect()
        assert kinds[-1] == "message.completed"
        assert kinds.count("message.delta") >= 3
        stored = await database_sync_to_async(Message.objects.get)(pk=reply["id"])
        assert (stored.status, stored.content) == ("complete", "".join(CHUNKS))


def test_turns_run_on_the_task_threads_never_the_requests(
    owner_client, fake_session, fake_openai, inprocess_tasks, monkeypatch
):
    seen: list[str] = []
    task = celery_app.tasks["bots.tasks.turn_run"]
    real = task.run

    def recording(message_id: int) -> None:
        seen.append(threading.current_thread().name)
        real(message_id)

    monkeypatch.setattr(task, "run", recording)
    fake_openai.script(*[Reply(text=f"Answer {i}.") for i in range(3)])
    sessions = [fake_session] + [
        SessionFactory(user=fake_session.user, bot=fake_session.bot) for _ in range(2)
    ]
    replies = []
    for session in sessions:
        response = owner_client.post(
            f"/api/v1/sessions/{session.pk}/messages/", {"content": "hi"}, format="json"
        )
        assert response.status_code == 202
        replies.append(response.json()["assistant_message"]["id"])
    assert inprocess_tasks(60)
    assert [_status(pk) for pk in replies] == ["complete", "complete", "complete"]
    assert len(seen) == 3
    assert all(name.startswith("task-") for name in seen)


def test_the_pool_never_runs_more_threads_than_configured(settings):
    settings.EMBEDDED_TASK_THREADS = 2
    pool = inprocess._Pool()
    release = threading.Event()
    names: list[str] = []
    for n in range(5):  # five users' work: one lane alone may not take both threads
        pool.submit(lambda: (names.append(threading.current_thread().name), release.wait(10)), n)
    assert pool.size == 2
    assert not pool.wait_idle(0.2)  # two run, three wait their turn
    release.set()
    assert pool.wait_idle(10)
    assert len(names) == 5
    assert set(names) == {"task-1", "task-2"}


def test_a_countdown_waits_then_runs_on_the_pool(settings, monkeypatch):
    ran = threading.Event()
    timers: list[float] = []
    real_timer = threading.Timer

    def timer(interval, function, args=None, kwargs=None):
        timers.append(interval)
        return real_timer(0, function, args, kwargs)

    monkeypatch.setattr(inprocess.threading, "Timer", timer)
    monkeypatch.setattr(inprocess, "_run", lambda *a: ran.set())
    task = celery_app.tasks["bots.tasks.turn_run"]
    inprocess.task_submit(task, (1,), {}, task_id="t", countdown=7)
    assert ran.wait(10)
    assert timers == [7]


def test_real_mode_sends_to_the_broker_not_the_pool(settings, monkeypatch):
    settings.TASKS_IN_PROCESS = False
    sent = []
    monkeypatch.setattr(Task, "apply_async", lambda self, *a, **k: sent.append((self.name, a, k)))
    monkeypatch.setattr(inprocess, "task_submit", lambda *a, **k: sent.append("pool"))
    celery_app.tasks["bots.tasks.turn_run"].delay(41)
    assert sent == [("bots.tasks.turn_run", ((41,), {}, None), {})]


# --- users in turn ------------------------------------------------------------------------------


def test_the_task_threads_take_the_users_in_turn():
    """One thread running alice's work, four more of hers queued before bob's one and one of
    no one's: bob's ran sixth, behind her whole queue. Now a free thread takes the lane with
    the least running, of those the one served longest ago (never: first): bob's, the shared
    one, then hers in their order."""
    from chat_platform.inprocess import _Pool

    pool = _Pool(size=1)
    started, gate = threading.Event(), threading.Event()
    ran: list[str] = []

    def holds_the_thread() -> None:
        started.set()
        gate.wait(10)

    pool.submit(holds_the_thread, "alice")
    assert started.wait(10)
    for n in range(1, 5):
        pool.submit(lambda n=n: ran.append(f"alice-{n}"), "alice")
    pool.submit(lambda: ran.append("bob-1"), "bob")
    pool.submit(lambda: ran.append("shared"), None)
    gate.set()

    assert pool.wait_idle(10)
    assert ran == ["bob-1", "shared", "alice-1", "alice-2", "alice-3", "alice-4"]


@pytest.mark.django_db(transaction=True)
def test_a_reply_is_queued_in_its_users_lane(fake_session, settings, monkeypatch):
    from chat_platform import inprocess
    from tests.factories import turn_pending
    from turns import dispatch

    settings.TASKS_IN_PROCESS = True
    lanes = []
    monkeypatch.setattr(
        inprocess._pool, "submit", lambda work, fair_key=None: lanes.append(fair_key)
    )
    _, reply = turn_pending(fake_session, "hello")

    assert dispatch.turn_dispatch(reply.pk) is True
    assert lanes == [fake_session.user_id]


def test_one_user_never_holds_every_thread():
    """Two threads, alice's three pieces of work blocking (replies waiting on a slow tool
    server): bob's runs at once on the thread she may not take, while her second and third
    wait for her first."""
    from chat_platform.inprocess import _Pool

    pool = _Pool(size=2)
    gate, bob_ran = threading.Event(), threading.Event()
    ran: list[str] = []

    def alice(n: int) -> None:
        ran.append(f"alice-{n}")
        gate.wait(10)

    for n in range(1, 4):
        pool.submit(lambda n=n: alice(n), "alice")
    pool.submit(bob_ran.set, "bob")

    assert bob_ran.wait(10)
    assert ran == ["alice-1"]
    gate.set()
    assert pool.wait_idle(10)
    assert ran == ["alice-1", "alice-2", "alice-3"]


def test_a_users_files_and_imports_are_queued_in_their_lane(settings, monkeypatch):
    """A PDF's reading and an import run in the lane of the user who sent them: twelve of one
    user's PDFs took three of the four task threads in the shared lane, and another user's
    reply waited 15 s for the fourth (docs/operations.md, "Embedded mode")."""
    from attachments.services import attachment_extract_dispatch
    from chat_platform import inprocess
    from transfer.services.jobs import import_job_dispatch

    settings.TASKS_IN_PROCESS = True
    lanes = []
    monkeypatch.setattr(
        inprocess._pool, "submit", lambda work, fair_key=None: lanes.append(fair_key)
    )

    assert attachment_extract_dispatch(5, user_id=7) is True
    assert import_job_dispatch(9, user_id=7) is True
    assert lanes == [7, 7]
