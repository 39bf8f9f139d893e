"""A bot joins a one-bot session while one of its compactions is with the summariser (a real
race: the summariser takes seconds). The pass read ``is_room`` before the call; at its commit
the session is a room. Coverage is its seat's in every chat (docs/rooms.md "A seat's bounded
read"), so the join changes nothing for it: the pass commits its bot's coverage, which that
bot's seat reads in the room as it would have in the chat, and the newcomer's seat, covered by
nothing, is shown every message.

The join runs inside the summariser call (``participant_add`` from the fake's callback): the race
made deterministic, without threads."""

import pytest

from bots.models import ChatSession, Message
from bots.queries import session_seat
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


def coverage_of(session):
    """Per-bot coverage rows: (bot name, summary id, seq), in seq order."""
    return list(
        SummaryCoverage.objects.filter(message__session=session)
        .order_by("message__seq", "bot_id")
        .values_list("bot__name", "summary_id", "message__seq")
    )


def uncovered(session, bot) -> list[str]:
    """``EVERYTHING`` less the messages ``bot``'s summaries cover."""
    covered = set(
        SummaryCoverage.objects.filter(message__session=session, bot=bot).values_list(
            "message__seq", flat=True
        )
    )
    return [line for seq, line in enumerate(EVERYTHING[:-1], 1) if seq not in covered] + [
        EVERYTHING[-1]
    ]


def test_manual_pass_that_a_join_overtakes_commits_for_its_seat(
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
    assert (result.outcome, result.reason) == ("compacted", "")
    summary = result.summary
    assert (summary.bot_id, summary.first_seq, summary.last_seq) == (small_bot.pk, 1, 4)
    assert coverage_of(session) == [(small_bot.name, summary.pk, seq) for seq in range(1, 5)]
    planner = SeatState.objects.get(session=session, bot=small_bot)
    assert (planner.covered_tokens, planner.covered_messages) == (400, 4)
    assert not SeatState.objects.filter(session=session, bot=critic, covered_messages__gt=0)
    assert seats_after_a_turn(session, [small_bot, critic]) == {
        small_bot.name: uncovered(session, small_bot),
        "Critic": EVERYTHING,
    }
    assert uncovered(session, small_bot) == EVERYTHING[4:]


def test_fusion_that_a_join_overtakes_fuses_its_seats_summaries(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    a, b = _two_active_summaries(session, fake_openai)
    fake_openai.script(Reply(text=summary_text(80)))
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    engine.compaction_soft(session_id=session.pk)

    assert len(joined) == 1
    event = CompactionEvent.objects.get(session=session, trigger="fusion")
    assert (event.outcome, event.reason) == ("compacted", "fusion")
    fused = event.summary
    assert list(
        Summary.objects.filter(session=session).order_by("id").values_list("pk", "status")
    ) == [(a.pk, "superseded"), (b.pk, "superseded"), (fused.pk, "active")]
    assert coverage_of(session) == [(small_bot.name, fused.pk, seq) for seq in range(1, 11)]
    planner = SeatState.objects.get(session=session, bot=small_bot)
    assert (planner.covered_tokens, planner.covered_messages) == (1600, 10)


def test_resummary_that_a_join_overtakes_replaces_its_seats_summary(
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
    assert (result.outcome, result.reason) == ("compacted", "focus")
    new = result.summary
    assert list(
        Summary.objects.filter(session=session).order_by("id").values_list("pk", "status")
    ) == [(old.pk, "superseded"), (new.pk, "active")]
    assert coverage_of(session) == [(small_bot.name, new.pk, seq) for seq in range(1, 5)]
    contexts = seats_after_a_turn(session, [small_bot, critic])
    assert contexts[small_bot.name] == [
        "owner: m message 4",
        "owner: m message 5",
        "owner: And now?",
    ]
    assert contexts["Critic"] == EVERYTHING


def test_undo_that_a_join_overtakes_restores_its_seat(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    """Undo calls no summariser, but it too reads the session before its transaction: a join
    in between leaves the undo whole, the planner's messages back in its seat's context."""
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

    result = summary_revert(summary=summary)

    assert len(joined) == 1
    assert (result.restored_messages, result.restored_tokens) == (4, 600)
    summary.refresh_from_db()
    assert summary.status == "reverted"
    assert coverage_of(session) == []
    planner = SeatState.objects.get(session=session, bot=small_bot)
    assert (planner.covered_tokens, planner.covered_messages) == (0, 0)
    assert seats_after_a_turn(session, [small_bot, critic]) == {
        small_bot.name: EVERYTHING,
        "Critic": EVERYTHING,
    }


def test_soft_pass_that_a_join_overtakes_commits_for_its_seat(
    owner, session, small_bot, critic, fake_openai, monkeypatch
):
    """The soft (and hard) passes commit where the manual one does (``run_pass``)."""
    add_history(session, [300, 300, 300, 300, 300, 300])
    recount(session)
    fake_openai.default = Reply(text=GOOD)
    joined = join_during_the_call(monkeypatch, owner, session, critic)

    result = engine.compaction_soft(session_id=session.pk)

    assert len(joined) == 1
    assert (result.outcome, result.reason) == ("compacted", "")
    summary = Summary.objects.get(session=session, status="active")
    assert summary.bot_id == small_bot.pk
    rows = coverage_of(session)
    assert rows and {(name, pk) for name, pk, _ in rows} == {(small_bot.name, summary.pk)}
    assert [seq for _, _, seq in rows] == list(range(summary.first_seq, summary.last_seq + 1))
    assert not SummaryCoverage.objects.filter(bot=critic).exists()
