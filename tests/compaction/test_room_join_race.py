"""A bot joins a one-bot session while one of its compactions is with the summariser (a real
race: the summariser takes seconds). The pass read ``is_room`` before the call; at its commit
the session is a room. It must end as a ``conflict`` (nothing written, the summary lost), never
commit one-bot coverage (``Message.compacted_by_id``) into a room: there no seat reads that as
coverage, and the messages would vanish from every seat's context with no summary standing in.

The join runs inside the summariser call (``participant_add`` from the fake's callback): the race
made deterministic, without threads."""

import pytest

from bots.models import ChatSession, Message
from bots.queries import session_seat
from chat_platform.errors import CompactionBusy
from compaction import engine
from compaction.engine import undo
from compaction.engine.resummarise import summary_resummarise
from compaction.engine.undo import summary_revert
from compaction.models import CompactionEvent, SeatState, Summary, SummaryCoverage
from compaction.pipeline import context_build
from tests.compaction.test_engine import (
    GOOD,
    _two_active_summaries,
    add_history,
    add_turn,
    recount,
    summary_text,
)
from tests.factories import BotFactory, SessionFactory
from tests.fakeopenai import Reply
from turns.services.participants import participant_add

pytestmark = pytest.mark.django_db

MODEL = "openai/fake-model"


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """One attempt per summariser call."""


@pytest.fixture
def session(owner, small_bot):
    return SessionFactory(user=owner, bot=small_bot)


@pytest.fixture
def critic(owner, fake_openai, small_bot):
    return BotFactory(
        owner=owner,
        name="Critic",
        model=MODEL,
        api_base=fake_openai.url,
        api_key_env=small_bot.api_key_env,
        system_prompt="",
        context_window=2200,
        max_output_tokens=200,
        memory_index_size=0,
    )


def join_during_the_call(monkeypatch, owner, session, bot):
    """The summariser's call: ``bot`` joins the session while it runs (once)."""
    complete = engine.gateway.complete
    joined = []

    def call(*args, **kwargs):
        if not joined:
            joined.append(participant_add(user=owner, session_id=session.pk, bot_id=bot.pk))
        return complete(*args, **kwargs)

    monkeypatch.setattr(engine.gateway, "complete", call)
    return joined


def seat_contexts(session, bots):
    """What each seat's next model call holds from the history (message contents), the current
    turn added by the caller."""
    reply = Message.objects.filter(session=session, status="pending").get()
    fresh = ChatSession.objects.select_related("bot").get(pk=session.pk)
    out = {}
    for bot in bots:
        built = context_build(session=session_seat(fresh, bot), reply=reply)
        out[bot.name] = [m["content"] for m in built.messages if m["role"] != "system"]
    return out


def seats_after_a_turn(session, bots):
    """``seat_contexts`` once the user has said "And now?"."""
    add_turn(session, "And now?", tokens=10)
    recount(session)
    return seat_contexts(session, bots)


# The whole history and the new turn: what a seat holds when nothing of it is compacted.
EVERYTHING = [f"owner: m message {i}" for i in range(6)] + ["owner: And now?"]


def test_manual_pass_that_a_join_overtakes_is_a_conflict(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    add_history(session, [100, 100, 100, 100, 100, 100])
    recount(session)
    fake_openai.default = Reply(text=GOOD)
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    result = engine.compaction_manual(session=session)

    assert len(joined) == 1
    session.refresh_from_db()
    assert session.is_room is True
    assert (result.outcome, result.reason, result.summary) == ("failed", "conflict", None)
    event = CompactionEvent.objects.filter(session=session).order_by("-id").first()
    assert (event.trigger, event.outcome, event.reason) == ("manual", "failed", "conflict")
    assert not Summary.objects.filter(session=session).exists()
    assert not Message.objects.filter(session=session, compacted_by_id__isnull=False).exists()
    assert not SummaryCoverage.objects.filter(message__session=session).exists()
    assert seats_after_a_turn(session, [small_bot, critic]) == {
        small_bot.name: EVERYTHING,
        "Critic": EVERYTHING,
    }


def coverage_of(session):
    """Per-bot coverage rows: (bot name, summary id, seq), in seq order."""
    return list(
        SummaryCoverage.objects.filter(message__session=session)
        .order_by("message__seq", "bot_id")
        .values_list("bot__name", "summary_id", "message__seq")
    )


def test_fusion_that_a_join_overtakes_is_a_conflict(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    a, b = _two_active_summaries(session, fake_openai)
    fake_openai.script(Reply(text=summary_text(80)))
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    engine.compaction_soft(session_id=session.pk)

    assert len(joined) == 1
    event = CompactionEvent.objects.get(session=session, trigger="fusion")
    assert (event.outcome, event.reason) == ("failed", "conflict")
    assert list(
        Summary.objects.filter(session=session).order_by("id").values_list("pk", "status")
    ) == [(a.pk, "active"), (b.pk, "active")]
    # The join moved the one-bot coverage into the planner's rows; they still name the parents.
    assert coverage_of(session) == [(small_bot.name, a.pk, seq) for seq in range(1, 5)] + [
        (small_bot.name, b.pk, seq) for seq in range(5, 11)
    ]
    assert not Message.objects.filter(session=session, compacted_by_id__isnull=False).exists()
    planner = SeatState.objects.get(session=session, bot=small_bot)
    assert (planner.covered_tokens, planner.covered_messages) == (1600, 10)


def test_resummary_that_a_join_overtakes_is_a_conflict(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    add_history(session, [150, 150, 150, 150, 200, 200])
    recount(session)
    fake_openai.script(Reply(text=summary_text(250)))
    old = engine.compaction_manual(session=session).summary
    fake_openai.script(Reply(text=summary_text(200)))
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    result = summary_resummarise(summary=old, focus="the budget")

    assert len(joined) == 1
    assert (result.outcome, result.reason, result.summary) == ("failed", "conflict", None)
    event = CompactionEvent.objects.filter(session=session).order_by("-id").first()
    assert (event.trigger, event.outcome, event.reason) == ("resummarise", "failed", "conflict")
    assert list(Summary.objects.filter(session=session).values_list("pk", "status")) == [
        (old.pk, "active")
    ]
    assert coverage_of(session) == [(small_bot.name, old.pk, seq) for seq in range(1, 5)]
    contexts = seats_after_a_turn(session, [small_bot, critic])
    assert contexts[small_bot.name] == [
        "owner: m message 4",
        "owner: m message 5",
        "owner: And now?",
    ]
    assert contexts["Critic"] == EVERYTHING


def test_undo_that_a_join_overtakes_changes_nothing(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    """Undo calls no summariser, but it too reads the session before its transaction: a join
    in between must not leave the summary reverted while its coverage rows still hide the
    messages from the planner's seat."""
    add_history(session, [150, 150, 150, 150, 200, 200])
    recount(session)
    fake_openai.script(Reply(text=summary_text(250)))
    summary = engine.compaction_manual(session=session).summary
    budget = undo.session_budget
    joined = []

    def join_then_budget(seat):
        if not joined:
            joined.append(participant_add(user=owner, session_id=session.pk, bot_id=critic.pk))
        return budget(seat)

    monkeypatch.setattr(undo, "session_budget", join_then_budget)

    with pytest.raises(CompactionBusy) as raised:
        summary_revert(summary=summary)

    assert len(joined) == 1
    assert str(raised.value) == (
        "A bot joined this chat while the compaction was being undone; nothing was changed. "
        "Try again."
    )
    summary.refresh_from_db()
    assert (summary.status, summary.held) == ("active", False)
    assert coverage_of(session) == [(small_bot.name, summary.pk, seq) for seq in range(1, 5)]
    assert not CompactionEvent.objects.filter(session=session, trigger="revert").exists()

    # Tried again, the undo runs in the room: the planner's messages come back to it.
    result = summary_revert(summary=summary)

    assert (result.restored_messages, result.restored_tokens) == (4, 600)
    assert coverage_of(session) == []
    assert seats_after_a_turn(session, [small_bot, critic]) == {
        small_bot.name: EVERYTHING,
        "Critic": EVERYTHING,
    }


def test_soft_pass_that_a_join_overtakes_is_a_conflict(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    """The soft (and hard) passes commit where the manual one does (``run_pass``)."""
    add_history(session, [300, 300, 300, 300, 300, 300])
    recount(session)
    fake_openai.default = Reply(text=GOOD)
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    result = engine.compaction_soft(session_id=session.pk)

    assert len(joined) == 1
    assert (result.outcome, result.reason, result.summary) == ("failed", "conflict", None)
    assert list(
        CompactionEvent.objects.filter(session=session).values_list("trigger", "outcome", "reason")
    ) == [("soft", "failed", "conflict")]
    assert not Summary.objects.filter(session=session).exists()
    assert not Message.objects.filter(session=session, compacted_by_id__isnull=False).exists()
