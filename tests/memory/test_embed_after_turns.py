"""Turns first (docs/performance.md "Turns first"): a process embeds what its turns wrote on its
background thread (``chat_platform.foreground``) once no turn runs in it, or once it has waited
``EMBED_DEFER_MAX_SECONDS``; the embedding task returns at once; a session queued twice is
embedded once; a stopping worker starts nothing more. The embedding itself is replaced by a
recorder here: these tests are about when and how often it runs."""

import os

import pytest

from bots.tasks import turn_run
from chat_platform import foreground, inprocess
from chat_platform.celery_app import _background_stops, app
from memory import embed_after_turns, tasks

WAIT = 30  # seconds a test waits for what must come (never a timing assertion)
# What must not happen is looked for this long: the work is not due for 600 s.
GLANCE = 0.3


@pytest.fixture
def embedded(monkeypatch, settings):
    """What the background thread embedded, in order: (session id, message ids or None)."""
    settings.EMBED_DEFER_MAX_SECONDS = 600
    calls: list[tuple[int, list[int] | None]] = []

    def record(*, session_id, message_ids=None, quota=None):
        calls.append((session_id, message_ids))

    monkeypatch.setattr(embed_after_turns, "messages_embed_pending", record)
    closes = []
    monkeypatch.setattr(foreground.connections, "close_all", lambda: closes.append(1))
    calls_closes = closes
    yield calls, calls_closes
    assert foreground.wait_drained(WAIT)
    assert embed_after_turns._queued == {}


def test_with_no_turn_running_the_session_is_embedded_at_once(embedded):
    calls, closes = embedded
    embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[3, 1])
    assert foreground.wait_drained(WAIT)
    assert calls == [(7, [1, 3])]
    assert closes == [1]  # the thread gave its connection back after the work


def test_a_running_turn_holds_the_embedding_until_it_ends(embedded):
    calls, _ = embedded
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1, 2])
        embed_after_turns.messages_embed_after_turns(session_id=8, message_ids=[5])
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[2, 4])
        assert not foreground.wait_drained(GLANCE)
        assert calls == [] and foreground.queued() == 2
    assert foreground.wait_drained(WAIT)
    assert calls == [(7, [1, 2, 4]), (8, [5])]  # oldest first, each once, ids merged


def test_a_whole_session_absorbs_its_queued_ids(embedded):
    calls, _ = embedded
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=None)
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[9])
    assert foreground.wait_drained(WAIT)
    assert calls == [(7, None)]


def test_past_the_longest_wait_it_embeds_beside_the_turn(embedded, settings):
    calls, _ = embedded
    settings.EMBED_DEFER_MAX_SECONDS = 0
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        assert foreground.wait_drained(WAIT)
        assert calls == [(7, [1])]


def test_a_failing_session_is_logged_and_the_next_is_still_embedded(embedded, monkeypatch, caplog):
    calls, closes = embedded

    def record(*, session_id, message_ids=None, quota=None):
        if session_id == 7:
            raise RuntimeError("database went away")
        calls.append((session_id, message_ids))

    monkeypatch.setattr(embed_after_turns, "messages_embed_pending", record)
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        embed_after_turns.messages_embed_after_turns(session_id=8, message_ids=[2])
    assert foreground.wait_drained(WAIT)
    assert calls == [(8, [2])]
    assert closes == [1, 1]
    assert "'embed', 7" in caplog.text and "database went away" in caplog.text


def test_a_stopping_worker_starts_nothing_more(embedded):
    calls, _ = embedded
    try:
        with foreground.foreground():
            embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
            _background_stops(sig=None, how="Warm", exitcode=0)  # the worker's signal
            thread = foreground._thread
            if thread is not None:
                thread.join(WAIT)
            assert foreground._thread is None
        assert calls == [] and foreground.queued() == 1  # left pending in the database
        embed_after_turns.messages_embed_after_turns(session_id=8, message_ids=[2])
        assert calls == [] and foreground.queued() == 1  # nothing more is taken
    finally:  # the process would end here; the test process goes on
        foreground._stopping = False
        foreground._queue.clear()
        embed_after_turns._queued.clear()


def test_an_exiting_interpreter_waits_for_the_piece_being_done_and_starts_no_other(monkeypatch):
    # The background thread is a daemon: a piece still in native code (ONNX Runtime) while the
    # interpreter tears its modules down ended the process with a segfault (bench/tool_task.py:
    # 2 exits of 21 with status 139). foreground.exit_wait runs at exit (atexit).
    import threading

    started, release, done = threading.Event(), threading.Event(), []

    def piece(name):
        def work():
            started.set()
            release.wait(WAIT)
            done.append(name)

        return work

    monkeypatch.setattr(foreground.connections, "close_all", lambda: None)
    try:
        foreground.after_foreground("first", piece("first"), max_wait=0)
        assert started.wait(WAIT)
        foreground.after_foreground("second", piece("second"), max_wait=0)
        threading.Timer(0.2, release.set).start()
        assert foreground.exit_wait() is True
        assert done == ["first"]  # waited for, and nothing after it began
        assert foreground.queued() == 1
    finally:  # the process would end here; the test process goes on
        release.set()
        if foreground._thread is not None:
            foreground._thread.join(WAIT)
        foreground._stopping = False
        foreground._queue.clear()


def test_tasks_wait_idle_waits_for_the_work_after_the_turns(embedded):
    calls, _ = embedded
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        assert inprocess.tasks_wait_idle(GLANCE) is False
    assert inprocess.tasks_wait_idle(WAIT) is True
    assert calls == [(7, [1])]


def test_the_task_queues_on_a_worker_and_runs_inline_when_tests_run_tasks_eagerly(
    embedded, monkeypatch, eager_tasks
):
    calls, _ = embedded
    inline = []
    monkeypatch.setattr(
        tasks.embeddings,
        "messages_embed_pending",
        lambda *, session_id, message_ids=None, quota=None: inline.append(
            (session_id, message_ids)
        ),
    )
    with foreground.foreground():  # eager: inside the turn that dispatched it, so never waits
        tasks.messages_embed.delay(7, [1])
        assert inline == [(7, [1])] and calls == []
        app.conf.task_always_eager = False
        tasks.messages_embed.run(8, [2])  # a worker's run: queued, returns at once
        assert calls == [] and foreground.queued() == 1
    assert foreground.wait_drained(WAIT)
    assert calls == [(8, [2])] and inline == [(7, [1])]


def test_a_turn_is_foreground_work_while_it_runs(monkeypatch):
    seen = []
    monkeypatch.setattr("turns.turn._turn_run", lambda _id: seen.append(foreground.running()))
    assert foreground.running() == 0
    turn_run.run(1)
    assert seen == [1] and foreground.running() == 0


def test_a_forked_child_starts_with_nothing_of_its_parents(embedded):
    read, write = os.pipe()
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        pid = os.fork()
        if pid == 0:  # the child: say what it holds, and go
            state = f"{foreground.running()} {foreground.queued()} {foreground._thread is None}"
            os.write(write, state.encode())
            os._exit(0)
        os.waitpid(pid, 0)
        os.close(write)
        assert os.read(read, 100).decode() == "0 0 True"
        assert foreground.running() == 1 and foreground.queued() == 1  # the parent's, as it was
    os.close(read)
