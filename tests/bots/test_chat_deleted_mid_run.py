"""A chat deleted while its reply streams or while a compaction of it runs: the delete wins
whole, the reply's provider call is cut, and nothing ends in a 500 or a logged error."""

import logging
import threading
import time

import pytest
from django.db import connection

from bots.models import ChatSession, Message
from compaction.engine import passes
from compaction.models import CompactionEvent, Summary
from memory.models import MemoryRecord
from tests.factories import message_add, turn_pending, turn_thread
from tests.fakeopenai import Reply
from turns import liveness
from turns.services.session import session_delete

pytestmark = pytest.mark.django_db(transaction=True)


def _errors(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]


def _stalled_turn(session, fake_openai, monkeypatch, *, then) -> tuple[Message, list[int]]:
    """A reply that streams two deltas and then hears nothing for 30 s, run on a thread; once
    the watcher has seen it, ``then(reply)``. Returns the reply and every reply the watcher
    stopped."""
    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.05)
    # A watcher of this test's own (the process's may be mid-sleep from an earlier test).
    monkeypatch.setattr(liveness, "watcher", liveness.TurnWatcher())
    stopped: list[int] = []
    stop = liveness.TurnHandle.stop

    def record_stop(handle):
        stopped.append(handle.message_id)
        stop(handle)

    monkeypatch.setattr(liveness.TurnHandle, "stop", record_stop)
    _, reply = turn_pending(session, "Tell me everything.")
    fake_openai.script(Reply(text="one two three four five six", stall_after=2, stall=30.0))
    runner = turn_thread(reply)
    deadline = time.monotonic() + 20
    while (
        time.monotonic() < deadline
        and not Message.objects.filter(pk=reply.pk, status="streaming").exists()
    ):
        time.sleep(0.02)
    time.sleep(0.3)  # a check of the watcher has seen the reply
    then(reply)
    runner.join(25)
    assert not runner.is_alive()
    return reply, stopped


def test_a_chat_deleted_while_its_reply_streams_cuts_the_call_and_logs_no_error(
    fake_session, fake_openai, monkeypatch, caplog
):
    with caplog.at_level(logging.INFO):
        reply, stopped = _stalled_turn(
            fake_session,
            fake_openai,
            monkeypatch,
            then=lambda reply: session_delete(user=fake_session.user, session_id=fake_session.pk),
        )
    assert set(stopped) == {reply.pk}  # the provider's stream was cut, not read to its end
    assert not ChatSession.objects.filter(pk=fake_session.pk).exists()
    assert _errors(caplog) == []


def test_a_reply_the_sweep_ended_lets_go_of_its_provider_call(
    fake_session, fake_openai, monkeypatch
):
    """A provider that keeps the stream open and sends nothing: once the sweep has marked the
    reply interrupted, its turn stops reading (it held a task thread for good before)."""
    reply, stopped = _stalled_turn(
        fake_session,
        fake_openai,
        monkeypatch,
        then=lambda reply: Message.objects.filter(pk=reply.pk).update(status="interrupted"),
    )
    assert set(stopped) == {reply.pk}
    reply.refresh_from_db()
    assert reply.status == "interrupted"


def test_a_reply_the_watcher_has_not_seen_yet_is_not_taken_for_deleted(monkeypatch):
    """A reply whose row no check has found (another connection's uncommitted row) is left
    running; only one seen before and gone since is stopped."""
    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.01)
    watcher = liveness.TurnWatcher()
    handle = watcher.register(10**12)  # no such row, ever
    time.sleep(0.2)
    assert not handle.stopped.is_set()
    watcher.unregister(handle)


def test_a_chat_deleted_while_compact_runs_answers_not_found_and_leaves_nothing(
    owner_client, chat_session, caplog, monkeypatch
):
    """The delete lands while the summariser works (after the snapshot is written): the delete
    takes the snapshot with it, and `/compact` answers not_found, logging no error (it was a
    500 whose transaction failed on the deleted chat)."""
    for i in range(24):
        message_add(chat_session, role="user", content=f"Fact {i}: Zeta-{i} is {1000 + i}.")
        message_add(chat_session, role="assistant", content=f"Noted: Zeta-{i} is {1000 + i}.")
    from bots.transitions import session_context_recount

    session_context_recount(session_id=chat_session.pk)
    complete = passes.gateway.complete

    def delete_then_answer(*args, **kwargs):
        deleter = threading.Thread(
            target=lambda: (
                session_delete(user=chat_session.user, session_id=chat_session.pk),
                connection.close(),
            )
        )
        deleter.start()
        deleter.join(20)
        return complete(*args, **kwargs)

    monkeypatch.setattr(passes.gateway, "complete", delete_then_answer)
    with caplog.at_level(logging.INFO):
        response = owner_client.post(
            f"/api/v1/sessions/{chat_session.pk}/compact/", {}, format="json"
        )
    assert response.status_code == 404, response.json()
    assert response.json()["error"] == {
        "code": "not_found",
        "message": "This chat was deleted.",
        "details": {},
    }
    assert not ChatSession.objects.filter(pk=chat_session.pk).exists()
    assert (
        Summary.objects.count(),
        CompactionEvent.objects.count(),
        MemoryRecord.objects.filter(kind="snapshot").count(),
    ) == (0, 0, 0)
    assert _errors(caplog) == []
