"""Single-flight and lifecycle of compaction under concurrency (docs/compaction.md, REFERENCE).

Threads racing every kind of trigger on one session, a lease left behind by a killed worker,
two real Celery workers draining a pile of soft tasks, and what deletions remove or keep.
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
import redis
from django.conf import settings as django_settings
from django.db import close_old_connections, connection

from bots.models import ChatSession, Message
from compaction import engine
from compaction.engine.summariser import summariser_ready
from compaction.lock import in_flight, lock_key
from compaction.models import CompactionEvent, CompactionState, Summary
from compaction.pipeline import context_build
from compaction.tasks import compact_soft
from memory.models import MemoryRecord
from tests.compaction.test_engine import (
    GOOD,
    add_history,
    add_turn,
    compacted_seqs,
    counters,
    recount,
    summariser_requests,
)
from tests.coverage import messages_covered
from tests.factories import SessionFactory
from tests.fakeopenai import Reply
from tests.integration.processes import celery_worker, process_env


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """Every test here: one attempt per summariser call (see conftest)."""


def assert_coverage_consistent(session) -> None:
    """No message covered twice, level-1 ranges disjoint, active summaries disjoint, every
    covered message inside its summary's range, totals agreeing with a full recount."""
    summaries = list(Summary.objects.filter(session=session).order_by("first_seq", "id"))
    level_one = [s for s in summaries if s.level == 1]
    active = [s for s in summaries if s.status == "active"]
    for group in (level_one, active):
        for earlier, later in zip(group, group[1:], strict=False):
            assert earlier.last_seq < later.first_seq, (earlier, later)
    by_id = {s.pk: s for s in summaries}
    covered = messages_covered(session).filter(compacted_by_id__isnull=False)
    for seq, summary_id in covered.values_list("seq", "compacted_by_id"):
        owner = by_id[summary_id]
        assert owner.status == "active"
        assert owner.first_seq <= seq <= owner.last_seq
    for summary in level_one:
        members = (
            messages_covered(session)
            .filter(seq__gte=summary.first_seq, seq__lte=summary.last_seq)
            .exclude(compacted_by_id=None)
        )
        if summary.status == "active":
            assert sum(members.values_list("token_count", flat=True)) == summary.source_tokens
    assert counters(session) == recount(session)
    assert CompactionEvent.objects.filter(session=session, outcome="compacted").count() == len(
        summaries
    )


# --- 50 racing triggers -----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_fifty_concurrent_triggers_run_one_summariser_at_a_time(
    owner, small_bot, fake_openai, settings
):
    settings.COMPACTION_WAIT_SECONDS = 60
    session = SessionFactory(user=owner, bot=small_bot)
    # 6,100 tokens: one summariser input holds ~1,600 of them, so draining below H takes
    # several passes, run one after another by whichever callers get the lease
    add_history(session, [100] * 60)
    new, reply = add_turn(session, "and now?", tokens=100)
    recount(session)
    fake_openai.default = Reply(text=GOOD, hang=0.5)
    kinds = ["soft", "manual", "hard"]
    barrier = threading.Barrier(50)
    errors: list[BaseException] = []
    outcomes: list[tuple[str, str | None]] = []
    lock = threading.Lock()

    def trigger(kind: str) -> None:
        try:
            barrier.wait(timeout=30)
            fresh = ChatSession.objects.select_related("bot").get(pk=session.pk)
            if kind == "soft":
                result = engine.compaction_soft(session_id=session.pk)
            elif kind == "manual":
                result = engine.compaction_manual(session=fresh)
            else:
                turn_reply = Message.objects.select_related("reply_to").get(pk=reply.pk)
                context_build(session=fresh, reply=turn_reply)
                result = None
            with lock:
                outcomes.append((kind, result.outcome if result else None))
        except BaseException as exc:  # collected and re-raised in the main thread
            with lock:
                errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=trigger, args=(kinds[i % 3],)) for i in range(50)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert len(outcomes) == 50
    requests = summariser_requests(fake_openai)
    assert len(requests) >= 2  # the backlog needed more than one pass
    assert fake_openai.max_concurrent == 1  # exactly one summariser request in flight at a time
    assert new.seq not in compacted_seqs(session)  # the current turn is never taken
    assert compacted_seqs(session)[0] == 1
    assert_coverage_consistent(session)
    # a soft trigger that found one running did nothing: no soft event besides real passes
    assert not CompactionEvent.objects.filter(
        session=session, outcome__in=["failed", "rejected"]
    ).exists()


# --- a worker killed mid-compaction -----------------------------------------------------------

HOLD_LEASE = """
import sys, time
import redis
lock = redis.Redis.from_url(sys.argv[1]).lock(sys.argv[2], timeout=float(sys.argv[3]))
assert lock.acquire(blocking=False)
print("held", flush=True)
time.sleep(120)
"""


@pytest.mark.django_db
def test_lease_of_a_killed_worker_expires_and_the_next_run_succeeds(
    owner, small_bot, fake_openai, settings
):
    settings.COMPACTION_WAIT_SECONDS = 20
    lease = 3.0
    session = SessionFactory(user=owner, bot=small_bot)
    add_history(session, [300, 300, 300, 300, 100, 100])
    recount(session)
    # What a run loads before it asks for the lease (litellm: seconds in a cold process, more
    # than the lease) is loaded first, so the soft trigger below meets the lease still held
    # wherever this test runs in its process (it failed when it ran first: the longest files
    # go first, tests/file_order.py).
    summariser_ready(small_bot)
    holder = subprocess.Popen(  # noqa: S603
        [
            sys.executable,
            "-c",
            HOLD_LEASE,
            django_settings.REDIS_URL,
            lock_key(session.pk),
            str(lease),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        acquired_at = time.monotonic()
        assert in_flight(session.pk)
        # a soft trigger finding a run in flight does nothing at all
        assert engine.compaction_soft(session_id=session.pk) is None
        assert fake_openai.requests == []
        assert not CompactionEvent.objects.filter(session=session).exists()
    finally:
        os.kill(holder.pid, signal.SIGKILL)  # the worker dies holding the lease
        holder.wait(timeout=10)
    assert in_flight(session.pk)  # nobody released it
    fake_openai.script(Reply(text=GOOD))

    result = engine.compaction_manual(session=session)

    finished = time.monotonic()
    assert result.outcome == "compacted"
    assert finished - acquired_at >= lease - 0.2  # it waited for the lease to run out
    assert finished - acquired_at < lease + 5
    assert (result.summary.first_seq, result.summary.last_seq) == (1, 4)
    assert len(summariser_requests(fake_openai)) == 1
    assert not in_flight(session.pk)
    assert_coverage_consistent(session)


@pytest.mark.django_db
def test_manual_after_a_dead_lease_compacts_instead_of_reusing_an_old_result(
    owner, small_bot, fake_openai, settings
):
    """A manual caller that waited reuses the result of *the run it waited for*. A dead worker's
    lease produced no result: an older, unrelated compaction must not be handed back instead."""
    settings.COMPACTION_WAIT_SECONDS = 20
    session = SessionFactory(user=owner, bot=small_bot)
    add_history(session, [300, 300, 300, 300, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    old = engine.compaction_manual(session=session)
    assert (old.summary.first_seq, old.summary.last_seq) == (1, 4)
    add_history(session, [300, 300, 300, 300], tag="later")  # seqs 7-10; 9 opens the last turn
    recount(session)
    holder = subprocess.Popen(  # noqa: S603
        [sys.executable, "-c", HOLD_LEASE, django_settings.REDIS_URL, lock_key(session.pk), "2"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
    finally:
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=10)
    fake_openai.script(Reply(text=GOOD))

    result = engine.compaction_manual(session=session)

    assert result.outcome == "compacted"
    assert result.summary != old.summary
    assert (result.summary.first_seq, result.summary.last_seq) == (5, 8)
    assert compacted_seqs(session) == [1, 2, 3, 4, 5, 6, 7, 8]
    assert len(summariser_requests(fake_openai)) == 2


# --- two real Celery workers ------------------------------------------------------------------


@pytest.mark.crossprocess
@pytest.mark.django_db(transaction=True)
def test_two_celery_workers_draining_soft_tasks_keep_single_flight(
    owner, small_bot, fake_openai, tmp_path
):
    session = SessionFactory(user=owner, bot=small_bot)
    add_history(session, [100] * 40)
    _, reply = add_turn(session, "and now?", tokens=100)
    # The turn has ended, as when a turn schedules soft compaction (a reply still in flight
    # makes it wait on the queue: tests/compaction/test_soft_yields.py).
    Message.objects.filter(pk=reply.pk).update(status="complete")
    recount(session)
    fake_openai.default = Reply(text=GOOD, hang=0.5)
    db = django_settings.DATABASES["default"]
    env = process_env(
        DATABASE_URL=f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        REDIS_URL=django_settings.REDIS_URL,
        LLM_MAX_RETRIES="0",
        DEBUG="false",
        LOG_JSON="true",
    )
    broker = redis.Redis.from_url(django_settings.REDIS_URL)
    with (
        celery_worker(env, tmp_path / "worker1.log"),
        celery_worker(env, tmp_path / "worker2.log"),
    ):
        for _ in range(40):
            compact_soft.delay(session.pk)
            time.sleep(0.02)
        deadline = time.monotonic() + 90
        quiet_since = None
        seen = -1
        while time.monotonic() < deadline:
            busy = (
                broker.llen("compaction") > 0
                or in_flight(session.pk)
                or len(fake_openai.requests) != seen
            )
            seen = len(fake_openai.requests)
            if busy:
                quiet_since = None
            elif quiet_since is None:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > 2.0:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the workers did not drain the compaction queue")
    close_old_connections()
    logs = [(tmp_path / f"worker{i}.log").read_text() for i in (1, 2)]
    assert all("compaction.tasks.compact_soft" in log for log in logs)  # both took tasks
    requests = summariser_requests(fake_openai)
    assert len(requests) >= 2
    assert fake_openai.max_concurrent == 1
    assert counters(session)[0] < 1000  # drained below S
    assert_coverage_consistent(session)


# --- deletions --------------------------------------------------------------------------------


def _compacted_session(owner, small_bot, fake_openai):
    session = SessionFactory(user=owner, bot=small_bot)
    add_history(session, [300, 300, 300, 300, 100, 100])
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    assert engine.compaction_manual(session=session).outcome == "compacted"
    add_history(session, [300, 300, 300, 300], tag="later")
    recount(session)
    fake_openai.script(Reply(status=500))
    assert engine.compaction_soft(session_id=session.pk).outcome == "failed"
    return session


@pytest.mark.django_db(transaction=True)
def test_deleting_events_keeps_summaries_and_coverage(owner, small_bot, fake_openai):
    session = _compacted_session(owner, small_bot, fake_openai)
    summary = Summary.objects.get(session=session)
    before = (compacted_seqs(session), counters(session))
    assert CompactionEvent.objects.filter(session=session).count() == 2

    CompactionEvent.objects.filter(session=session).delete()

    summary.refresh_from_db()
    assert (summary.status, summary.first_seq, summary.last_seq) == ("active", 1, 4)
    assert (compacted_seqs(session), counters(session)) == before
    assert MemoryRecord.objects.filter(session=session, kind="snapshot").count() == 2
    new, reply = add_turn(session, "and now?", tokens=10)
    recount(session)
    built = context_build(session=session, reply=reply)
    assert built.messages[0] == {"role": "system", "content": summary.block}
    assert all(m["content"] != "m message 0" for m in built.messages)  # still compacted


@pytest.mark.django_db(transaction=True)
def test_deleting_the_session_removes_everything(owner, owner_client, small_bot, fake_openai):
    session = _compacted_session(owner, small_bot, fake_openai)
    MemoryRecord.objects.create(
        session=session, name="budget", kind="info", description="The budget", body="4,500 EUR"
    )
    other = _compacted_session(owner, small_bot, fake_openai)
    other_counts = (
        Message.objects.filter(session=other).count(),
        Summary.objects.filter(session=other).count(),
        MemoryRecord.objects.filter(session=other).count(),
        CompactionEvent.objects.filter(session=other).count(),
    )
    assert CompactionState.objects.filter(session=session).exists()

    response = owner_client.delete(f"/api/v1/sessions/{session.pk}/")

    assert response.status_code == 204
    assert not ChatSession.objects.filter(pk=session.pk).exists()
    assert not Message.objects.filter(session_id=session.pk).exists()
    assert not Summary.objects.filter(session_id=session.pk).exists()
    assert not MemoryRecord.objects.filter(session_id=session.pk).exists()
    assert not CompactionEvent.objects.filter(session_id=session.pk).exists()
    assert not CompactionState.objects.filter(session_id=session.pk).exists()
    # a soft task for the vanished session is harmless (tasks tolerate vanished rows)
    compact_soft(session.pk)
    assert not CompactionEvent.objects.filter(session_id=session.pk).exists()
    # the other session is untouched
    assert (
        Message.objects.filter(session=other).count(),
        Summary.objects.filter(session=other).count(),
        MemoryRecord.objects.filter(session=other).count(),
        CompactionEvent.objects.filter(session=other).count(),
    ) == other_counts
