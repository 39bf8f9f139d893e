"""No reply is ever left pending/streaming: the turn's failure envelope, admission under concurrent
turns, the heartbeat watchdog and the outbox (issue 7, items 2, 3 and 5)."""

import threading
import time
from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from bots import realtime
from bots.models import ChatSession, Message
from bots.transitions import session_context_add, session_context_recount
from chat_platform import realtime as transport
from chat_platform.celery_app import app as celery_app
from chat_platform.inprocess import InProcessBeat
from chat_platform.llm.tokens import count_message_tokens
from compaction.pipeline import admit as pipeline_admit
from compaction.pipeline import history as pipeline_history
from tests.factories import SessionFactory, message_add, turn_pending, turn_thread
from tests.fakeopenai import Reply
from turns import liveness, recall_loop, stream, turn, watchdog

MODEL = "openai/fake-model"


@pytest.fixture
def frames(monkeypatch):
    """Every frame the platform sends to any session group, in order."""
    sent: list[dict] = []
    real = transport.send_frames

    def record(session_id, frames, **kwargs):
        sent.extend(frames)
        real(session_id, frames, **kwargs)

    monkeypatch.setattr(transport, "send_frames", record)
    return sent


def _failed_frames(frames, reply):
    return [f for f in frames if f["type"] == "message.failed" and f["message_id"] == reply.pk]


# --- item 2: admission under concurrent turns ----------------------------------------------------


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("history_read", ["whole", "walk"])
def test_a_turn_finishing_between_the_totals_and_the_rows_does_not_strand_the_reply(
    history_read, fake_session, fake_openai, frames, monkeypatch
):
    """Reproduces the 100-quick-sends failure deterministically: turn B reads the session's
    running totals, then turn A completes (its reply joins the context), then B walks the rows
    and sees more than the totals counted. B must still answer, within budget."""
    session = fake_session
    message_add(session, role="user", content="first question")
    # Two turns of one session no longer overlap (they queue: test_reply_queue.py), but rows can
    # still join the context between the totals and the walk (an earlier reply ended by the
    # watchdog keeps its partial text, a recall exchange, a compaction): the pipeline must not
    # strand the reply then. ``earlier`` starts out of the context (ended, empty) and joins it.
    earlier = message_add(session, role="assistant", content="", status="complete", token_count=0)
    session_context_recount(session_id=session.pk)
    _, reply = turn_pending(session, "second question")
    session.refresh_from_db()

    real_walk = pipeline_history.history_newest_first
    real_whole = pipeline_history.whole_history
    finished_text = "The first answer, finished by a concurrent turn."
    raced = []

    def other_turn_finishes():
        # exactly what turn A's completion writes, after B's totals were read
        raced.append(True)
        tokens = count_message_tokens(finished_text, model=MODEL)
        Message.objects.filter(pk=earlier.pk).update(
            status="complete", content=finished_text, token_count=tokens
        )
        session_context_add(session_id=session.pk, tokens=tokens)

    def walk_after_the_other_turn(measure):
        other_turn_finishes()
        yield from real_walk(measure)

    def whole_after_the_other_turn(measure, new_message):
        other_turn_finishes()
        return real_whole(measure, new_message)

    # History is read whole (the totals say it fits) or walked (forced): race both.
    monkeypatch.setattr(pipeline_history, "history_newest_first", walk_after_the_other_turn)
    monkeypatch.setattr(pipeline_history, "whole_history", whole_after_the_other_turn)
    if history_read == "walk":
        monkeypatch.setattr(pipeline_history, "fits_whole", lambda measure: False)
    fake_openai.script(Reply(text="Second answer."))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Second answer.")
    assert fake_openai.requests[-1]["messages"][1:] == [
        {"role": "user", "content": "first question"},
        {"role": "assistant", "content": finished_text},
        {"role": "user", "content": "second question"},
    ]
    admission = ChatSession.objects.get(pk=session.pk).last_admission
    assert admission["decision"] == "admit"
    assert admission["dropped_messages"] == 0
    assert admission["selected_tokens"] <= admission["budget_tokens"]
    assert _failed_frames(frames, reply) == []
    assert raced == [True]


@pytest.mark.django_db(transaction=True)
def test_the_completed_frame_leaves_before_the_rest_waiters_are_woken(
    fake_session, fake_openai, monkeypatch
):
    """The final frame is handed to the channel layer without waiting for Redis, then the REST
    waiters are woken: websocket and REST clients hear of the finish at once."""
    events: list[tuple] = []
    real = transport.send_frames

    def record(session_id, frames, *, wait=True):
        events.extend((frame["type"], wait) for frame in frames)
        real(session_id, frames, wait=wait)

    monkeypatch.setattr(transport, "send_frames", record)
    monkeypatch.setattr(
        realtime, "publish_reply_finished", lambda message_id: events.append(("woken", message_id))
    )
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="Done."))

    turn.turn_run(message_id=reply.pk)

    finished = events.index(("message.completed", False))
    assert events[finished + 1] == ("woken", reply.pk)
    assert [e for e in events if e[0] in ("message.completed", "woken")] == [
        ("message.completed", False),
        ("woken", reply.pk),
    ]


# --- item 2: one failure envelope after the claim -------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_unexpected_error_while_building_the_context_fails_the_reply_visibly(
    fake_session, fake_openai, frames, monkeypatch, caplog
):
    _, reply = turn_pending(fake_session)

    def broken(**kwargs):
        raise RuntimeError("history_totals went sideways")

    monkeypatch.setattr(recall_loop, "context_build", broken)

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code, reply.finish_reason) == (
        "failed",
        "internal_error",
        "error",
    )
    assert reply.error_message == "The reply failed because of an internal error."
    assert fake_openai.requests == []  # nothing was sent
    [frame] = _failed_frames(frames, reply)
    assert frame["error"] == {
        "code": "internal_error",
        "message": "The reply failed because of an internal error.",
        "details": {},  # the API's error shape (it had no details)
    }
    assert frame["message"]["status"] == "failed"
    crashed = [r for r in caplog.records if r.exc_info and r.exc_info[0] is RuntimeError]
    assert len(crashed) == 1  # logged once, with its traceback


@pytest.mark.django_db(transaction=True)
def test_an_error_mid_stream_keeps_the_partial_text(fake_session, fake_openai, frames, monkeypatch):
    _, reply = turn_pending(fake_session)
    fake_openai.script(
        Reply(
            text="One two three four",
            chunks=["One ", "two ", "three ", "four"],
            delay_between_chunks=0.1,
        )
    )
    sent_deltas: list[str] = []

    def delta_then_crash(message, delta, **_):
        sent_deltas.append(delta)
        if len(sent_deltas) == 2:
            raise ValueError("channel layer exploded")

    monkeypatch.setattr(realtime, "notify_message_delta", delta_then_crash)
    monkeypatch.setattr(stream.settings, "CHAT_STREAM_FLUSH_SECONDS", 0.0)

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "internal_error")
    assert reply.content == "One two "
    assert reply.token_count == count_message_tokens("One two ", model=MODEL)
    # a failed reply takes no part in the context: the running totals did not move
    session = ChatSession.objects.get(pk=fake_session.pk)
    assert session.context_tokens == session_context_recount(session_id=fake_session.pk)[0]
    assert len(_failed_frames(frames, reply)) == 1


@pytest.mark.django_db(transaction=True)
def test_a_model_failure_after_the_claim_still_ends_failed(
    fake_session, fake_openai, frames, settings
):
    settings.LLM_MAX_RETRIES = 0
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(status=500, error_message="upstream on fire"))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "model_unavailable")
    assert len(_failed_frames(frames, reply)) == 1


# --- item 3: heartbeats and the watchdog ----------------------------------------------------


def _streaming(session, *, content, heartbeat_age):
    new = message_add(session, role="user", content="tell me")
    stamp = timezone.now() - timedelta(seconds=heartbeat_age)
    reply = message_add(
        session,
        role="assistant",
        content=content,
        status="streaming",
        token_count=0,
        reply_to=new,
    )
    Message.objects.filter(pk=reply.pk).update(heartbeat_at=stamp, updated_at=stamp)
    return reply


@pytest.mark.django_db(transaction=True)
def test_watchdog_interrupts_a_turn_whose_heartbeat_stopped_and_keeps_its_text(
    chat_session, frames, settings
):
    settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS = 30
    dead = _streaming(chat_session, content="It was a dark and", heartbeat_age=31)
    alive = _streaming(chat_session, content="Still writing", heartbeat_age=20)
    session_context_recount(session_id=chat_session.pk)

    result = watchdog.turns_watchdog()

    assert (result.interrupted, result.dispatched) == (1, 0)
    dead.refresh_from_db()
    alive.refresh_from_db()
    assert (dead.status, dead.content, dead.error_code) == (
        "interrupted",
        "It was a dark and",
        "interrupted",
    )
    assert dead.error_message == watchdog.DEAD_WORKER_TEXT
    assert dead.token_count == count_message_tokens("It was a dark and", model=dead.model)
    assert alive.status == "streaming"
    [frame] = _failed_frames(frames, dead)
    assert frame["message"]["status"] == "interrupted"
    assert frame["message"]["content"] == "It was a dark and"
    # the kept text now counts toward the context, exactly as a recount says
    session = ChatSession.objects.get(pk=chat_session.pk)
    assert session.context_tokens == session_context_recount(session_id=chat_session.pk)[0]
    assert watchdog.turns_watchdog().interrupted == 0  # idempotent


def _beat_rounds(rounds: int, *, interval: float, schedule=None) -> InProcessBeat:
    """Run an embedded beat until it has done ``rounds`` rounds (30 s at most), then stop it."""
    beat = InProcessBeat(interval=interval, schedule=schedule).start()
    try:
        deadline = time.monotonic() + 30
        while beat.rounds < rounds and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        beat.stop()
    return beat


@pytest.mark.django_db(transaction=True)
def test_embedded_beat_thread_ends_a_dead_turn_and_sweeps_an_old_orphan(chat_session, settings):
    """Embedded mode has no Celery beat: the web process's own beat thread runs the watchdog
    (a reply whose process died mid-turn) and the orphan sweep (a reply pending for too long).
    Its words name the server, not workers or a queue embedded mode does not have."""
    settings.EMBEDDED = True
    settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS = 30
    settings.CHAT_ORPHAN_AFTER_SECONDS = 600
    dead = _streaming(chat_session, content="Half a", heartbeat_age=31)
    old_pending = message_add(
        chat_session, role="assistant", content="", status="pending", token_count=0
    )
    long_ago = timezone.now() - timedelta(seconds=601)
    # dispatched recently, so the outbox leaves it alone: only the sweep can end it
    Message.objects.filter(pk=old_pending.pk).update(
        created_at=long_ago, updated_at=long_ago, dispatched_at=timezone.now()
    )
    beat = _beat_rounds(1, interval=0.05)
    assert beat.rounds >= 1 and not beat.thread.is_alive()
    dead.refresh_from_db()
    old_pending.refresh_from_db()
    assert (dead.status, dead.content, dead.error_message) == (
        "interrupted",
        "Half a",
        "The reply was interrupted: the server stopped while writing it. "
        "What it had written so far is kept; send your message again to continue.",
    )
    assert (old_pending.status, old_pending.error_message) == (
        "interrupted",
        "The reply never started: the server stopped before it could. Send your message again.",
    )


@pytest.mark.django_db(transaction=True)
def test_the_orphan_sweep_leaves_a_long_reply_whose_turn_still_beats(chat_session, settings):
    """A long tool task writes no text for many minutes (its rounds move the reply, they do not
    rewrite it), so its row's last write ages past ``CHAT_ORPHAN_AFTER_SECONDS``; its turn's
    heartbeat says it runs, and the sweep leaves it. One whose heartbeat aged too is swept."""
    settings.CHAT_ORPHAN_AFTER_SECONDS = 600
    alive = _streaming(chat_session, content="", heartbeat_age=601)
    Message.objects.filter(pk=alive.pk).update(heartbeat_at=timezone.now())
    other = SessionFactory(user=chat_session.user, bot=chat_session.bot)
    stuck = _streaming(other, content="Half", heartbeat_age=601)

    assert watchdog.messages_sweep_orphans() == 1

    alive.refresh_from_db()
    stuck.refresh_from_db()
    assert (alive.status, stuck.status) == ("streaming", "interrupted")


BEAT_RUNS: list[str] = []


@celery_app.task(name="tests.beat.often")
def _beat_often() -> None:
    BEAT_RUNS.append("often")


@celery_app.task(name="tests.beat.hourly")
def _beat_hourly(label: str) -> None:
    BEAT_RUNS.append(label)


def test_embedded_beat_runs_each_schedule_entry_by_name_at_its_own_period():
    """The embedded beat runs the schedule it is given (the settings' whole beat schedule in a
    server), each entry on its first round and then every ``schedule`` seconds, with its args."""
    BEAT_RUNS.clear()
    schedule = {
        "often": {"task": "tests.beat.often", "schedule": 0},
        "hourly": {"task": "tests.beat.hourly", "schedule": 3600, "args": ("hourly",)},
    }
    beat = _beat_rounds(3, interval=0.02, schedule=schedule)
    assert beat.rounds >= 3
    assert BEAT_RUNS.count("hourly") == 1
    assert BEAT_RUNS.count("often") == beat.rounds


def test_the_embedded_beat_runs_the_whole_beat_schedule(settings):
    """Nothing real mode's beat runs is left out of embedded mode (the context-record and
    import-job sweeps were, before the beat read the schedule)."""
    beat = InProcessBeat(interval=1)
    assert beat.schedule == settings.CELERY_BEAT_SCHEDULE
    assert {e["task"] for e in beat.schedule.values()} >= {
        "bots.tasks.turns_watchdog",
        "bots.tasks.sweep_orphans",
        "attachments.tasks.sweep_unsent",
        "compaction.tasks.context_records_sweep",
        "transfer.tasks.sweep_jobs",
    }


@pytest.mark.django_db(transaction=True)
def test_embedded_beat_survives_a_failing_round(chat_session, monkeypatch):
    calls = []

    def broken(**kwargs):
        calls.append(1)
        raise RuntimeError("database went away")

    monkeypatch.setattr(watchdog, "turns_watchdog", broken)
    every_round = {"turns-watchdog": {"task": "bots.tasks.turns_watchdog", "schedule": 0}}
    beat = _beat_rounds(3, interval=0.02, schedule=every_round)
    assert beat.rounds >= 3 and len(calls) >= 3


@pytest.mark.django_db(transaction=True)
def test_a_live_turn_keeps_beating_through_a_silent_provider(
    fake_session, fake_openai, frames, settings
):
    """A provider silent for 6 s (twice the heartbeat timeout here) is not a dead worker: the
    monitor keeps stamping, so the watchdog leaves the turn alone and it completes. (A timeout
    of six heartbeats: at 1 s, five, a loaded machine delayed one stamp past it.)"""
    settings.CHAT_HEARTBEAT_SECONDS = 0.5
    settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS = 3.0
    settings.LLM_MAX_RETRIES = 0
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="Worth the wait.", hang=6.0))

    runner = turn_thread(reply)
    interrupted = 0
    beats = set()
    while runner.is_alive():
        time.sleep(0.3)
        interrupted += watchdog.turns_watchdog().interrupted
        stamp = Message.objects.values_list("heartbeat_at", flat=True).get(pk=reply.pk)
        beats.add(stamp)
    runner.join()

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Worth the wait.")
    assert interrupted == 0
    assert len(beats) >= 5  # stamped again and again while the provider was silent


def test_beat_runs_the_watchdog_often_enough_to_end_a_dead_turn_within_a_minute(settings):
    from chat_platform.celery_app import app as celery_app

    entry = celery_app.conf.beat_schedule["turns-watchdog"]
    assert (entry["task"], entry["schedule"]) == ("bots.tasks.turns_watchdog", 10.0)
    assert settings.CHAT_HEARTBEAT_SECONDS == 5.0
    assert settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS == 30.0
    # worst case from the last heartbeat to the interrupted reply
    assert settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS + entry["schedule"] <= 60


def test_the_watchdog_and_the_sweeps_run_on_the_beats_own_lane_never_behind_replies(settings):
    """On the chat queue the watchdog waited for a worker thread: with every thread holding a
    slow reply, a dead worker's reply stayed streaming ~130 s. Now every beat entry goes to the
    ``upkeep`` queue, which the beat's process serves (make beat, compose) and no fleet does,
    and a run not taken within its period expires."""
    import yaml

    from chat_platform.celery_app import app as celery_app
    from tests.integration.processes import ROOT

    entries = celery_app.conf.beat_schedule
    assert sorted(e["task"] for e in entries.values()) == sorted(settings.UPKEEP_TASKS)
    for entry in entries.values():
        assert celery_app.amqp.router.route({}, entry["task"])["queue"].name == "upkeep"
        assert entry["options"] == {"expires": entry["schedule"]}
    # the replies and the rest keep their queues
    route = celery_app.amqp.router.route
    assert route({}, "bots.tasks.turn_run")["queue"].name == "chat"
    assert route({}, "compaction.tasks.compact_soft")["queue"].name == "compaction"
    compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())["services"]
    beat = compose["beat"]["command"]
    assert beat[beat.index("-Q") + 1] == "upkeep" and "-B" in beat and "worker" in beat
    fleets = [
        compose[name]["environment"]["WORKER_QUEUES"] for name in ("worker", "compaction-worker")
    ]
    assert fleets == ["chat", "compaction,heavy"]
    assert (
        'queues="${WORKER_QUEUES:-chat,compaction,heavy,upkeep}"'
        in (ROOT / "scripts" / "worker.sh").read_text()
    )


# --- item 5: the outbox ------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_watchdog_hands_a_never_dispatched_reply_to_the_queue(
    fake_session, fake_openai, eager_tasks
):
    _, never = turn_pending(fake_session, "sent while the broker was down")
    Message.objects.filter(pk=never.pk).update(created_at=timezone.now() - timedelta(seconds=6))
    # In another chat: one of this chat would be handed over when ``never`` ends (it is next).
    elsewhere = SessionFactory(user=fake_session.user, bot=fake_session.bot)
    _, just_sent = turn_pending(elsewhere, "sent a moment ago")  # its own dispatch is still due
    fake_openai.script(Reply(text="Here at last."))

    result = watchdog.turns_watchdog()

    assert (result.interrupted, result.dispatched) == (0, 1)
    never.refresh_from_db()
    just_sent.refresh_from_db()
    assert (never.status, never.content) == ("complete", "Here at last.")
    assert never.dispatched_at is not None
    assert (just_sent.status, just_sent.dispatched_at) == ("pending", None)


def test_a_turn_handed_over_but_not_stamped_still_counts_as_dispatched(monkeypatch, caplog):
    """The stamp after the hand-over runs after the send committed: a saturated database there
    must not turn a stored, queued message into an error (the watchdog re-stamps it later)."""
    from types import SimpleNamespace

    from django.db import OperationalError

    from turns import dispatch

    queued = []
    monkeypatch.setattr(
        dispatch, "_task", lambda name: SimpleNamespace(delay=lambda pk: queued.append(pk))
    )

    def saturated(**fields):
        raise OperationalError("couldn't get a connection after 10.00 sec")

    # The stamp's statement fails (on PostgreSQL it runs compiled, bots.fast_paths.update_run,
    # so the failure is the stamp's own, not one of the ORM's update).
    monkeypatch.setattr(dispatch, "reply_dispatched", saturated)
    with caplog.at_level("ERROR"):
        assert dispatch.turn_dispatch(42) is True
    assert queued == [42]
    [record] = [r for r in caplog.records if r.levelname == "ERROR"]
    assert record.msg["event"] == "turn_dispatch_stamp_failed"


@pytest.mark.django_db(transaction=True)
def test_watchdog_redispatches_a_lost_task_and_a_duplicate_is_harmless(
    fake_session, fake_openai, eager_tasks, settings
):
    settings.CHAT_REDISPATCH_AFTER_SECONDS = 120
    _, lost = turn_pending(fake_session, "my task vanished with a Redis restart")
    Message.objects.filter(pk=lost.pk).update(
        dispatched_at=timezone.now() - timedelta(seconds=121),
        created_at=timezone.now() - timedelta(seconds=121),
    )
    fake_openai.script(Reply(text="Recovered."))

    assert watchdog.turns_watchdog().dispatched == 1
    lost.refresh_from_db()
    assert (lost.status, lost.content) == ("complete", "Recovered.")
    # the original task arriving late finds the reply claimed and does nothing
    turn.turn_run(message_id=lost.pk)
    lost.refresh_from_db()
    assert (lost.status, lost.content) == ("complete", "Recovered.")
    assert len(fake_openai.requests) == 1


# --- issue 10: REST wait wakes on the finish, not on a poll -------------------------------------


@pytest.mark.django_db(transaction=True)
def test_rest_wait_is_woken_by_the_turn_finishing_not_by_polling(fake_session, monkeypatch):
    from django.test.utils import CaptureQueriesContext

    from turns.services.message import message_wait_finished

    # No safety re-check within the wait (one every 5 s): the checks counted are the wait's own.
    monkeypatch.setattr(realtime, "WAIT_RECHECK_SECONDS", 60.0)

    _, reply = turn_pending(fake_session)
    Message.objects.filter(pk=reply.pk).update(status="streaming")

    def finish_later():
        try:
            time.sleep(1.5)
            turn._finish(
                Message.objects.get(pk=reply.pk), counted=True, status="complete", content="Done."
            )
        finally:
            connection.close()

    finisher = threading.Thread(target=finish_later)
    finisher.start()
    with CaptureQueriesContext(connection) as queries:
        result = message_wait_finished(message_id=reply.pk, timeout=30)
    finisher.join()

    assert (result.status, result.content) == ("complete", "Done.")
    # checks: after the subscription's confirmation, when woken by the finish; the last
    # check's row is the answer, not read again. A 0.1 s poll would have read the row ~15
    # times; a check before the confirmation too made it 3 (docs/performance.md, "A turn's
    # CPU, fourth pass").
    assert len(queries.captured_queries) == 2


@pytest.mark.django_db(transaction=True)
def test_a_saturated_database_fails_the_turn_fast_with_a_clear_error(
    fake_session, fake_openai, frames, monkeypatch
):
    from django.db import OperationalError

    _, reply = turn_pending(fake_session)

    def no_connection(**kwargs):
        raise OperationalError("couldn't get a connection after 10.00 sec")

    monkeypatch.setattr(recall_loop, "context_build", no_connection)

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "service_unavailable")
    assert reply.error_message.startswith("The database is overloaded or unreachable")
    assert len(_failed_frames(frames, reply)) == 1
    assert fake_openai.requests == []


def test_frames_to_the_redis_layer_go_out_from_the_turn_s_thread_on_one_client(monkeypatch):
    """A turn sends a frame every 50 ms: from its own thread, on the process's one blocking
    client, never through an event loop's thread (whose hand-over cost a frame three times the
    send itself) and never a loop or a pool per frame."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer
    from channels_redis.core import RedisChannelLayer

    layer = get_channel_layer()
    assert isinstance(layer, RedisChannelLayer)
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(transport.session_group(987_654), channel)

    def no_loop(*args, **kwargs):
        raise AssertionError("a waited frame went through the event loop's thread")

    monkeypatch.setattr(transport._layer_loop, "run", no_loop)
    transport.send_frame(987_654, {"type": "probe", "n": 1})
    client = layer._blocking
    transport.send_frame(987_654, {"type": "probe", "n": 2})
    monkeypatch.undo()

    assert client is not None and layer._blocking is client

    async def receive_two():
        return [(await layer.receive(channel))["frame"]["n"] for _ in range(2)]

    assert async_to_sync(receive_two)() == [1, 2]
    async_to_sync(layer.group_discard)(transport.session_group(987_654), channel)


# --- issue 10: what the first token and the completed frame wait for ------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_admission_is_recorded_while_the_provider_works_on_the_first_token(
    fake_session, fake_openai, monkeypatch, caplog
):
    """The turn's ``last_admission`` write is not on the way to the first token: it happens once
    the provider has taken the request, and still exactly once per call."""
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="Fine.", chunks=["Fi", "ne."]))
    at_record = []
    real = pipeline_admit.admission_record

    def record(measure, admission, *, path):
        at_record.append(len(fake_openai.requests))
        real(measure, admission, path=path)

    monkeypatch.setattr(pipeline_admit, "admission_record", record)
    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Fine.")
    assert at_record == [1]
    fake_session.refresh_from_db()
    assert (fake_session.last_admission["path"], fake_session.last_admission["decision"]) == (
        "turn",
        "admit",
    )


@pytest.mark.django_db(transaction=True)
def test_the_admission_is_recorded_when_the_provider_never_answers(
    fake_session, fake_openai, frames, settings
):
    settings.LLM_MAX_RETRIES = 0
    _, reply = turn_pending(fake_session)
    fake_openai.stop()

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "model_unavailable")
    fake_session.refresh_from_db()
    assert fake_session.last_admission["decision"] == "admit"
    assert fake_session.last_admission["session_id"] == fake_session.pk
    assert len(_failed_frames(frames, reply)) == 1


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    ("counted", "token_count", "expected_totals"),
    [(True, 40, (140, 3)), (True, 0, (100, 2)), (False, 40, (100, 2))],
)
def test_message_finish_writes_the_reply_and_the_totals_in_one_statement(
    fake_session, django_assert_num_queries, counted, token_count, expected_totals
):
    from bots.transitions import message_finish

    _, reply = turn_pending(fake_session)
    Message.objects.filter(pk=reply.pk).update(status="streaming")
    ChatSession.objects.filter(pk=fake_session.pk).update(context_tokens=100, context_messages=2)

    with django_assert_num_queries(1):
        finished = message_finish(
            message_id=reply.pk,
            from_status="streaming",
            counted=counted,
            status="complete",
            content="Done.",
            token_count=token_count,
        )

    assert (finished.pk, finished.status, finished.content, finished.token_count) == (
        reply.pk,
        "complete",
        "Done.",
        token_count,
    )
    fake_session.refresh_from_db()
    assert (fake_session.context_tokens, fake_session.context_messages) == expected_totals


@pytest.mark.django_db(transaction=True)
def test_message_finish_that_loses_its_race_changes_nothing(fake_session):
    from bots.transitions import message_finish

    _, reply = turn_pending(fake_session)
    Message.objects.filter(pk=reply.pk).update(status="failed")
    ChatSession.objects.filter(pk=fake_session.pk).update(context_tokens=100, context_messages=2)

    assert (
        message_finish(
            message_id=reply.pk,
            from_status="streaming",
            counted=True,
            status="complete",
            token_count=40,
        )
        is None
    )
    reply.refresh_from_db()
    fake_session.refresh_from_db()
    assert (reply.status, fake_session.context_tokens, fake_session.context_messages) == (
        "failed",
        100,
        2,
    )


def test_frames_sent_without_waiting_still_arrive_in_order():
    """The send path's message.created frames do not hold up the hand-over to a worker; they
    still reach the session in the order given, and before a frame sent after them."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(transport.session_group(987_655), channel)

    transport.send_frames(
        987_655, [{"type": "probe", "n": 1}, {"type": "probe", "n": 2}], wait=False
    )
    transport.send_frame(987_655, {"type": "probe", "n": 3})

    async def receive_three():
        return [(await layer.receive(channel))["frame"]["n"] for _ in range(3)]

    assert async_to_sync(receive_three)() == [1, 2, 3]
    async_to_sync(layer.group_discard)(transport.session_group(987_655), channel)


def test_the_watcher_holds_no_database_connection_while_no_turn_runs(monkeypatch):
    """The watcher thread stays a while after its last turn (a next turn reuses it); its
    connection is let go at once, not when the thread exits: an idle worker holds none."""
    closed_while_running = threading.Event()

    class Connection:
        def close(self) -> None:
            if threading.current_thread().name == "turn-watcher":
                closed_while_running.set()

    monkeypatch.setattr(liveness, "connection", Connection())
    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.01)
    monkeypatch.setattr(liveness, "IDLE_EXIT_SECONDS", 3600)
    watcher = liveness.TurnWatcher()
    watcher._thread = threading.Thread(target=watcher._run, name="turn-watcher", daemon=True)
    watcher._thread.start()  # as register() starts it; here with no turn at all
    thread = watcher._thread
    assert closed_while_running.wait(30)
    assert thread.is_alive()  # let go while waiting for turns, not on the way out
    monkeypatch.setattr(liveness, "IDLE_EXIT_SECONDS", 0)
    thread.join(30)
    assert not thread.is_alive()


@pytest.mark.django_db(transaction=True)
def test_the_watchers_stop_check_builds_no_query(fake_session, settings, monkeypatch):
    """The watcher reads its turns' stop flags every half second while turns run: a statement
    built once per process (``bots.queries.replies_watched``), not ``pk IN (…)`` built by
    Django at every tick (docs/performance.md "A turn's CPU, eighth pass"). It still finds a
    stop and an interrupted reply."""
    from django.db.models.sql.compiler import SQLCompiler

    settings.CHAT_HEARTBEAT_SECONDS = 3600  # no heartbeat UPDATE in the window
    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.01)
    monkeypatch.setattr(liveness, "IDLE_EXIT_SECONDS", 0)
    _, stopped = turn_pending(fake_session, "first")
    _, ended = turn_pending(fake_session, "second", status="streaming")
    _, running = turn_pending(fake_session, "third", status="streaming")
    built: list[str] = []
    real_as_sql = SQLCompiler.as_sql

    def as_sql(self, *args, **kwargs):
        if threading.current_thread().name == "turn-watcher":
            built.append(self.query.model.__name__)
        return real_as_sql(self, *args, **kwargs)

    monkeypatch.setattr(SQLCompiler, "as_sql", as_sql)
    watcher = liveness.TurnWatcher()
    handles = [watcher.register(reply.pk) for reply in (stopped, ended, running)]
    Message.objects.filter(pk=stopped.pk).update(stop_requested=True)
    Message.objects.filter(pk=ended.pk).update(status="interrupted")
    assert handles[0].stopped.wait(30)
    assert handles[1].stopped.wait(30)
    time.sleep(0.1)  # a few more ticks
    assert not handles[2].stopped.is_set()
    thread = watcher._thread
    for handle in handles:
        watcher.unregister(handle)
    thread.join(30)
    assert built == []


@pytest.mark.django_db(transaction=True)
def test_a_providers_context_window_refusal_fails_the_reply_as_context_too_large(
    fake_session, fake_openai, settings
):
    """A provider that refuses the request as longer than its model's window: the reply fails
    with context_too_large (what the client can act on: /v1 answers 400
    context_length_exceeded), not model_unavailable, and it is not retried."""
    settings.LLM_MAX_RETRIES = 2
    _, reply = turn_pending(fake_session)
    fake_openai.script(
        Reply(
            status=400,
            error_message="This model's maximum context length is 4096 tokens. However, your "
            "messages resulted in 9000 tokens.",
        )
    )
    turn.turn_run(message_id=reply.pk)
    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "context_too_large")
    assert reply.error_message.startswith("The model refused the request as longer than its")
    assert len(fake_openai.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_a_rest_wait_answers_the_failed_replys_own_code(
    owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(status=400, error_message="prompt is too long: 9000 > 4096"))
    response = owner_client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/",
        {"content": "A long story.", "wait": True},
        format="json",
    )
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "context_too_large"


@pytest.mark.django_db(transaction=True)
def test_stop_ends_a_reply_whose_provider_has_not_answered_yet(
    fake_session, fake_openai, monkeypatch
):
    """A provider that holds the request before sending its headers: Stop ends the reply at
    once (it waited for the read timeout, two minutes by default: there was no socket to shut
    while the request was being sent)."""

    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.05)
    monkeypatch.setattr(liveness, "watcher", liveness.TurnWatcher())
    release = threading.Event()
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="Too late.", hang=60.0, until=release))

    _stop_while_held(fake_session, fake_openai, reply, release)
    reply.refresh_from_db()
    assert (reply.status, reply.finish_reason, reply.content) == ("complete", "stopped", "")


@pytest.mark.django_db(transaction=True)
def test_text_shown_before_the_stream_stalls_is_saved(fake_session, fake_openai, monkeypatch):
    """Three deltas, then the provider goes silent: the text already shown is saved within two
    checkpoint periods (it was saved only on the next delta, so a worker that died in the stall
    left the reply empty)."""
    from turns.services.message import generation_stop

    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.1)
    monkeypatch.setattr(stream, "CHECKPOINT_SECONDS", 0.1)
    monkeypatch.setattr(liveness, "watcher", liveness.TurnWatcher())
    _, reply = turn_pending(fake_session)
    fake_openai.script(
        Reply(
            text="Partial answer before the stall.",
            chunks=["Partial ", "answer ", "before "] + ["the stall."],
            stall_after=3,
            stall=30.0,
        )
    )

    runner = turn_thread(reply)
    saved = ""
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and saved != "Partial answer before ":
        time.sleep(0.05)
        saved = Message.objects.values_list("content", flat=True).get(pk=reply.pk)
    generation_stop(user=fake_session.user, session_id=fake_session.pk)
    runner.join(20)
    assert saved == "Partial answer before "
    assert not runner.is_alive()


@pytest.mark.django_db(transaction=True)
def test_each_delta_frame_says_where_its_text_starts_in_browser_units(
    fake_session, fake_openai, frames, monkeypatch
):
    """A client that joined from the saved text (a reconnect) knows which part of a delta it
    already has: it appended them all, and its text came out garbled until the reply ended."""
    monkeypatch.setattr(stream.settings, "CHAT_STREAM_FLUSH_SECONDS", 0.0)
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="Hi \U0001f600 there!", chunks=["Hi ", "\U0001f600", " there!"]))
    turn.turn_run(message_id=reply.pk)
    deltas = [(f["delta"], f["offset"]) for f in frames if f["type"] == "message.delta"]
    assert deltas == [("Hi ", 0), ("\U0001f600", 3), (" there!", 5)]  # the emoji counts 2


# --- embedded mode: after a restart --------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_after_an_embedded_restart_the_first_watchdog_round_ends_and_resends_at_once(
    fake_session, fake_openai, eager_tasks, settings, monkeypatch, frames
):
    """The queue of embedded mode dies with its process: a reply handed to it before a
    restart waited two minutes to be handed over again (``CHAT_REDISPATCH_AFTER_SECONDS``), and
    a reply cut off mid-stream 30 s. What was dispatched, or last beat, before this process's
    queue was made belongs to the process that is gone; what came after is left alone."""
    from chat_platform import inprocess

    settings.TASKS_IN_PROCESS = settings.EMBEDDED = True
    settings.CHAT_REDISPATCH_AFTER_SECONDS = 120
    settings.CHAT_HEARTBEAT_SECONDS = 5
    settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS = 30
    monkeypatch.setattr(inprocess, "QUEUE_BORN", timezone.now() - timedelta(seconds=12))
    cut_off = _streaming(fake_session, content="Half of it", heartbeat_age=15)
    beating = _streaming(fake_session, content="Going on", heartbeat_age=4)
    Message.objects.filter(pk__in=[cut_off.pk, beating.pk]).update(dispatched_at=timezone.now())
    _, queued = turn_pending(fake_session, "asked just before the restart")
    Message.objects.filter(pk=queued.pk).update(
        dispatched_at=timezone.now() - timedelta(seconds=20),
        created_at=timezone.now() - timedelta(seconds=20),
    )
    fake_openai.script(Reply(text="Answered after the restart."))

    assert watchdog.replies_interrupt_dead() == 1
    Message.objects.filter(pk=beating.pk).update(status="complete")  # it ended here
    assert watchdog.replies_redispatch() == 1

    cut_off.refresh_from_db()
    queued.refresh_from_db()
    assert (cut_off.status, cut_off.error_message) == ("interrupted", watchdog.DEAD_SERVER_TEXT)
    assert (queued.status, queued.content) == ("complete", "Answered after the restart.")
    # On a broker, whose queue outlives a process, the same rows wait their timeouts.
    settings.TASKS_IN_PROCESS = False
    assert inprocess.queue_born() is None


@pytest.mark.django_db(transaction=True)
def test_stop_ends_a_reply_waiting_on_its_hard_compaction(fake_session, fake_openai, monkeypatch):
    """The summariser of the blocking compaction before the reply's call does not answer: Stop
    ends the reply at once. It waited for the summariser's timeout (each of three attempts),
    then ran the extractive fallback all the same, and armed the chat's back-off."""
    from compaction.engine.policy import seat_failures
    from compaction.models import CompactionEvent

    monkeypatch.setattr(liveness, "CHECKPOINT_SECONDS", 0.05)
    monkeypatch.setattr(liveness, "watcher", liveness.TurnWatcher())
    bot = fake_session.bot
    bot.context_window, bot.max_output_tokens = 2000, 200  # B 1800, H 1350
    bot.save(update_fields=["context_window", "max_output_tokens"])
    fact = "Ana booked the Lisbon flight TP-{} for {} May at {} euros, seat {}C, gate {}. " * 3
    for i in range(22):  # ~1,650 tokens: past H
        role = "user" if i % 2 == 0 else "assistant"
        message_add(fake_session, role=role, content=fact.format(*[i * 7 + k for k in range(15)]))
    session_context_recount(session_id=fake_session.pk)
    release = threading.Event()
    _, reply = turn_pending(fake_session)
    fake_openai.script(Reply(text="A summary.", hang=60.0, until=release))

    def summariser_held():
        assert fake_openai.served  # the summariser's call, held
        assert fake_openai.requests[0].get("stream") is not True

    _stop_while_held(fake_session, fake_openai, reply, release, held=summariser_held)
    reply.refresh_from_db()
    assert (reply.status, reply.finish_reason, reply.content) == ("complete", "stopped", "")
    events = list(
        CompactionEvent.objects.filter(session=fake_session).values_list(
            "trigger", "outcome", "reason"
        )
    )
    assert events == [("hard", "failed", "stopped")]
    assert len(fake_openai.requests) == 1  # no retry of the summariser, no call of the reply
    assert seat_failures(fake_session.pk, room=None).blocked(hard=True) is None


def _stop_while_held(fake_session, fake_openai, reply, release, *, held=lambda: None):
    """Run the reply's turn; once the provider holds its first request (``held`` checks it),
    press Stop: the turn ends before the provider lets go (``release``, set on the way out)."""
    from turns.services.message import generation_stop

    runner = turn_thread(reply)
    try:
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not fake_openai.served:
            time.sleep(0.02)
        held()
        assert generation_stop(user=fake_session.user, session_id=fake_session.pk) == 1
        runner.join(20)
        assert not runner.is_alive()  # ended before the provider let go of the request
    finally:
        release.set()
        runner.join(30)


@pytest.mark.django_db(transaction=True)
def test_a_connection_the_server_ended_mid_turn_is_replaced_to_fail_the_reply(
    fake_session, fake_openai, frames, monkeypatch
):
    """PostgreSQL ended the turn's connection (a restart, a failover): the failure is written on
    a new one, so the reply fails at once and says why, instead of streaming until the watchdog
    calls its worker dead."""
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL ends the connection")
    _, reply = turn_pending(fake_session)

    def connection_ended(**kwargs):
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")

    monkeypatch.setattr(recall_loop, "context_build", connection_ended)

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.error_code) == ("failed", "service_unavailable")
    assert len(_failed_frames(frames, reply)) == 1
