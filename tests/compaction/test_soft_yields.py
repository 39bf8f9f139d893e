"""Soft compaction runs after the session's next reply, never beside or before it (rooms: the next
bot of a round; any chat: a message sent meanwhile). In-process (embedded mode) the turn
dispatches it after its hand-over; on the queue it yields while a reply of the session is
running or queued (``compaction.services.soft_compaction_yields``), at most
``COMPACTION_SOFT_YIELD_MAX`` times."""

import pytest

from bots.models import Message
from compaction import services, tasks
from compaction.models import CompactionEvent
from tests.compaction.test_room_compaction import FILLER, _bot
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.factories import SessionFactory, UserFactory, message_add
from tests.fakeopenai import Reply
from turns import hooks as turn_hooks

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_seats_soft_compaction_runs_after_the_next_bots_reply_in_process(
    owner, owner_client, fake_openai, eager_tasks, monkeypatch, django_capture_on_commit_callbacks
):
    """A room in ``all`` mode, tasks in-process: every round's replies are complete before any
    seat's soft compaction starts (it used to run between Planner's reply and Critic's)."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _bot(owner, fake_openai, "Planner", 1500, memory_index_size=50)
    critic = _bot(owner, fake_openai, "Critic", 3000, memory_index_size=50)
    session_id = owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json").json()[
        "id"
    ]
    owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": critic.pk}, format="json"
    )
    owner_client.patch(f"/api/v1/sessions/{session_id}/", {"reply_mode": "all"}, format="json")
    events: list[tuple[str, int]] = []
    announce = turn_hooks.notify_completed
    compact = services.session_compact_soft

    def completed(message, **kwargs):
        events.append(("reply", message.bot_id))
        return announce(message, **kwargs)

    def soft(*, session_id, bot_id=None):
        events.append(("soft", bot_id))
        return compact(session_id=session_id, bot_id=bot_id)

    monkeypatch.setattr(turn_hooks, "notify_completed", completed)
    monkeypatch.setattr(services, "session_compact_soft", soft)
    rounds = []
    for n in range(1, 7):
        fake_openai.script(
            Reply(text=f"Planner noted item {n}. {FILLER}"),
            Reply(text=f"Critic noted item {n}. {FILLER}"),
        )
        events.clear()
        with django_capture_on_commit_callbacks(execute=True):
            sent = owner_client.post(
                f"/api/v1/sessions/{session_id}/messages/",
                {"content": f"Note {n}: the parcel ships to depot {n}. {FILLER * 3}", "wait": True},
                format="json",
            )
        assert sent.status_code == 201, sent.json()
        rounds.append(list(events))

    # Planner (B 1,300, soft from 650) compacts after rounds 5 and 6, each time once both
    # replies of the round are complete (it ran between them: reply, soft, reply).
    replies = [("reply", planner.pk), ("reply", critic.pk)]
    assert rounds == [replies] * 4 + [[*replies, ("soft", planner.pk)]] * 2
    assert CompactionEvent.objects.filter(
        session_id=session_id, bot=planner, outcome="compacted"
    ).exists()
    assert not Message.objects.filter(session_id=session_id, status__in=["pending", "streaming"])


@pytest.fixture
def queued_reply(db):
    """A one-bot session whose second reply is still queued (pending)."""
    session = SessionFactory(user=UserFactory())
    message_add(session, role="user", content="one")
    message_add(session, role="assistant", content="", status="pending")
    return session


def _task_calls(monkeypatch):
    requeued: list[tuple] = []
    ran: list[tuple] = []
    monkeypatch.setattr(
        tasks.compact_soft,
        "apply_async",
        lambda args, kwargs, countdown: requeued.append((args, kwargs, countdown)),
    )
    monkeypatch.setattr(
        services,
        "session_compact_soft",
        lambda *, session_id, bot_id=None: ran.append((session_id, bot_id)),
    )
    return requeued, ran


def test_on_the_queue_soft_compaction_waits_for_a_queued_reply(queued_reply, monkeypatch, settings):
    settings.COMPACTION_SOFT_YIELD_SECONDS = 1.5
    requeued, ran = _task_calls(monkeypatch)

    tasks.compact_soft.run(queued_reply.pk, 7)

    assert requeued == [((queued_reply.pk, 7), {"yielded": 1}, 1.5)]
    assert ran == []


def test_on_the_queue_soft_compaction_runs_when_no_reply_is_left(queued_reply, monkeypatch):
    Message.objects.filter(session=queued_reply, role="assistant").update(status="complete")
    requeued, ran = _task_calls(monkeypatch)

    tasks.compact_soft.run(queued_reply.pk, None, yielded=3)

    assert (requeued, ran) == ([], [(queued_reply.pk, None)])


def test_a_reply_that_never_ends_delays_soft_compaction_a_bounded_number_of_times(
    queued_reply, monkeypatch, settings
):
    settings.COMPACTION_SOFT_YIELD_MAX = 4
    requeued, ran = _task_calls(monkeypatch)

    tasks.compact_soft.run(queued_reply.pk, None, yielded=3)
    tasks.compact_soft.run(queued_reply.pk, None, yielded=4)

    assert requeued == [((queued_reply.pk, None), {"yielded": 4}, 1.0)]
    assert ran == [(queued_reply.pk, None)]


def test_another_sessions_reply_does_not_delay_soft_compaction(queued_reply, monkeypatch):
    other = SessionFactory(user=queued_reply.user, bot=queued_reply.bot)
    requeued, ran = _task_calls(monkeypatch)

    tasks.compact_soft.run(other.pk, None)

    assert (requeued, ran) == ([], [(other.pk, None)])


def test_in_process_soft_compaction_never_yields(queued_reply, monkeypatch, eager_tasks):
    requeued, ran = _task_calls(monkeypatch)

    tasks.compact_soft.run(queued_reply.pk, None)

    assert (requeued, ran) == ([], [(queued_reply.pk, None)])


def test_a_broker_that_cannot_take_it_back_runs_it_at_once(queued_reply, monkeypatch):
    ran: list[tuple] = []

    def broker_down(*args, **kwargs):
        raise ConnectionError("Error 111 connecting to redis")

    monkeypatch.setattr(tasks.compact_soft, "apply_async", broker_down)
    monkeypatch.setattr(
        services,
        "session_compact_soft",
        lambda *, session_id, bot_id=None: ran.append((session_id, bot_id)),
    )

    tasks.compact_soft.run(queued_reply.pk, None)

    assert ran == [(queued_reply.pk, None)]
