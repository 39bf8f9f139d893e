"""Turns first (docs/performance.md "Turns first"): a process embeds what its turns wrote once
no turn runs in it (``chat_platform.foreground``), or once it has waited
``EMBED_DEFER_MAX_SECONDS``; one task drains the process's queue, the others return at once; a
session queued twice is embedded once; a stopping worker embeds nothing more. The embedding
itself is replaced by a recorder here: these tests are about when and how often it runs."""

import threading

import pytest

from bots.tasks import turn_run
from chat_platform import foreground
from memory import embed_after_turns, tasks

WAIT = 30  # seconds a test waits for an event that must come (never a timing assertion)


@pytest.fixture
def embedded(monkeypatch, settings):
    """What the drainer embedded, in order: (session id, message ids or None)."""
    settings.EMBED_DEFER_MAX_SECONDS = 600
    calls: list[tuple[int, list[int] | None]] = []

    def record(*, session_id, message_ids=None):
        calls.append((session_id, message_ids))

    monkeypatch.setattr(embed_after_turns, "messages_embed_pending", record)
    monkeypatch.setattr(embed_after_turns, "connection", _Connection())
    embed_after_turns._queue.clear()
    embed_after_turns._stopping.clear()
    yield calls
    embed_after_turns._stopping.clear()
    assert not embed_after_turns._draining


class _Connection:
    closed = 0

    def close(self) -> None:
        self.closed += 1


@pytest.fixture
def celery_app_eager(eager_tasks):
    from chat_platform.celery_app import app

    return app


def _drain_in_thread(session_id, message_ids=None) -> threading.Thread:
    thread = threading.Thread(
        target=embed_after_turns.messages_embed_after_turns,
        kwargs={"session_id": session_id, "message_ids": message_ids},
    )
    thread.start()
    return thread


def _wait_until(condition) -> None:
    for _ in range(WAIT * 100):
        if condition():
            return
        threading.Event().wait(0.01)
    raise AssertionError("the condition never held")


def test_with_no_turn_running_the_session_is_embedded_at_once(embedded):
    embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[3, 1])
    assert embedded == [(7, [1, 3])]
    assert embed_after_turns.queued() == 0
    assert embed_after_turns.connection.closed == 0  # it never waited


def test_a_running_turn_holds_the_embedding_until_it_ends(embedded):
    with foreground.foreground():
        drainer = _drain_in_thread(7, [1, 2])
        # Waiting, its connection given back.
        _wait_until(lambda: embed_after_turns.connection.closed == 1)
        assert embedded == []
        # Others queued meanwhile return at once; the same session's ids are merged.
        embed_after_turns.messages_embed_after_turns(session_id=8, message_ids=[5])
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[2, 4])
        assert embedded == [] and embed_after_turns.queued() == 2
    drainer.join(WAIT)
    assert not drainer.is_alive()
    assert embedded == [(7, [1, 2, 4]), (8, [5])]  # oldest first, each once


def test_a_whole_session_absorbs_its_queued_ids(embedded):
    with foreground.foreground():
        drainer = _drain_in_thread(7, [1])
        _wait_until(lambda: embed_after_turns.connection.closed == 1)
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=None)
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[9])
    drainer.join(WAIT)
    assert embedded == [(7, None)]


def test_past_the_longest_wait_it_embeds_beside_the_turn(embedded, settings):
    settings.EMBED_DEFER_MAX_SECONDS = 0
    with foreground.foreground():
        embed_after_turns.messages_embed_after_turns(session_id=7, message_ids=[1])
        assert embedded == [(7, [1])]


def test_a_failing_session_is_logged_and_the_next_is_still_embedded(embedded, monkeypatch):
    def record(*, session_id, message_ids=None):
        if session_id == 7:
            raise RuntimeError("database went away")
        embedded.append((session_id, message_ids))

    monkeypatch.setattr(embed_after_turns, "messages_embed_pending", record)
    with foreground.foreground():
        drainer = _drain_in_thread(7, [1])
        _wait_until(lambda: embed_after_turns.connection.closed == 1)
        embed_after_turns.messages_embed_after_turns(session_id=8, message_ids=[2])
    drainer.join(WAIT)
    assert embedded == [(8, [2])]
    assert embed_after_turns.queued() == 0


def test_a_stopping_worker_embeds_nothing_more_and_keeps_nothing_running(embedded):
    with foreground.foreground():
        drainer = _drain_in_thread(7, [1])
        _wait_until(lambda: embed_after_turns.connection.closed == 1)
        tasks._embedding_stops(sig=None, how="Warm", exitcode=0)  # the worker's signal
        drainer.join(WAIT)
        assert not drainer.is_alive()
    assert embedded == []
    assert embed_after_turns.queued() == 1  # left pending in the database, not lost


def test_the_task_queues_on_a_worker_and_runs_inline_when_tests_run_tasks_eagerly(
    embedded, monkeypatch, celery_app_eager
):
    inline = []
    monkeypatch.setattr(
        tasks.embeddings,
        "messages_embed_pending",
        lambda *, session_id, message_ids=None: inline.append((session_id, message_ids)),
    )
    with foreground.foreground():  # eager: inside the turn that dispatched it, so never waits
        tasks.messages_embed.delay(7, [1])
    assert inline == [(7, [1])] and embedded == []
    celery_app_eager.conf.task_always_eager = False
    tasks.messages_embed.run(8, [2])  # a worker's run
    assert embedded == [(8, [2])] and inline == [(7, [1])]


def test_a_turn_is_foreground_work_while_it_runs(monkeypatch):
    seen = []
    monkeypatch.setattr("turns.turn._turn_run", lambda _id: seen.append(foreground.running()))
    assert foreground.running() == 0
    turn_run.run(1)
    assert seen == [1] and foreground.running() == 0


def test_wait_idle_says_whether_the_process_is_idle():
    assert foreground.wait_idle(0) is True
    with foreground.foreground():
        assert foreground.running() == 1
        assert foreground.wait_idle(0) is False
    assert foreground.wait_idle(0) is True
