"""A room seat's covered floor (docs/rooms.md "A seat's bounded read"): the seat's reads skip
what its summaries cover up to the floor, so a long compacted room is read like a short one,
and they read exactly what the unbounded read (every message against the bot's coverage) reads,
whatever pins, undos, retries and joins happen in between."""

import dataclasses
import random

import pytest
from django.db import transaction

from bots import transitions
from bots.models import ChatSession, Message, SessionParticipant
from compaction.engine import coverage as coverage_module
from compaction.engine.coverage import coverage_release, room_seat_open, seat_cover
from compaction.models import SeatState, Summary, SummaryCoverage
from compaction.seats import RoomView, Seat, in_context, room_view, seat_read
from tests.factories import BotFactory, message_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def seats(owner):
    """A room of Planner (the session's bot, whose seat is measured) and Critic."""
    planner = BotFactory(owner=owner, name="Planner")
    critic = BotFactory(owner=owner, name="Critic")
    session = ChatSession.objects.create(user=owner, bot=planner, title="room", is_room=True)
    SessionParticipant.objects.create(session=session, bot=planner, is_default=True)
    SessionParticipant.objects.create(session=session, bot=critic)
    SeatState.objects.create(session=session, bot=planner)
    return session, planner, critic


def _say(session, n: int, **fields) -> Message:
    fields.setdefault("role", "user")
    return message_add(session, content=f"message {n}", token_count=10, **fields)


View = tuple[Seat, RoomView | None]


def _view(session: ChatSession) -> View:
    """The seat of the session's bot and its view of the room."""
    return seat_read(session), room_view(session)


def _read(session: ChatSession, view: View) -> list[int]:
    """The seqs of the seat's in-context messages, as its history and range reads take them."""
    rows = in_context(session.pk, 10**9, *view).order_by("seq")
    return list(rows.values_list("seq", flat=True))


def _unbounded(view: View) -> View:
    """The same seat read against the bot's whole coverage: the reference."""
    return dataclasses.replace(view[0], covered_through_seq=0, uncovered_ids=()), view[1]


def _cover(session, messages: list[Message]) -> Summary:
    """The seat's bot summarises ``messages`` (the one writer of a seat's coverage)."""
    seqs = [m.seq for m in messages]
    summary = Summary.objects.create(
        session=session,
        bot=session.bot,
        text="summary",
        token_count=5,
        first_seq=min(seqs),
        last_seq=max(seqs),
        source_tokens=10 * len(seqs),
        model="builtin/extractive",
        trigger=Summary.Trigger.SOFT,
        retention=1.0,
    )
    with transaction.atomic():
        seat_cover(
            session,
            summary,
            [m.pk for m in messages],
            tokens=summary.source_tokens,
            seen_from=room_view(session).from_seq,
        )
    return summary


def _floor(session) -> tuple[int, list[int]]:
    return SeatState.objects.filter(session=session, bot=session.bot).values_list(
        "covered_through_seq", "uncovered_ids"
    )[0]


def test_a_seats_coverage_raises_its_floor_and_lists_what_it_left_below(seats):
    session, planner, critic = seats
    said = [_say(session, n) for n in range(1, 9)]
    pinned = said[2]
    transitions.message_pinned_set(message_id=pinned.pk, pinned=True)
    interrupted = _say(session, 9, role="assistant", bot=planner, status="interrupted")
    critics_tool = _say(session, 10, role="tool", kind="tool", bot=critic, tool_call_id="c1")
    pending = _say(session, 11, role="assistant", bot=critic, status="pending")
    taken = [m for m in said if m.pk != pinned.pk] + [_say(session, 12)]

    _cover(session, taken)

    # up to seq 12: the pin, the interrupted reply and the pending reply are left; the other
    # bot's recall exchange is never shown to this seat, so it is not listed
    assert _floor(session) == (12, [pinned.pk, interrupted.pk, pending.pk])
    assert critics_tool.pk not in _floor(session)[1]
    view = _view(session)
    assert (view[0].covered_through_seq, view[0].uncovered_ids) == (
        12,
        (pinned.pk, interrupted.pk, pending.pk),
    )
    assert _read(session, view) == [3, 9] == _read(session, _unbounded(view))

    # the pending reply finishes below the floor: it is listed, so the seat reads it
    Message.objects.filter(pk=pending.pk).update(status="complete", token_count=10)
    assert _read(session, view) == [3, 9, 11] == _read(session, _unbounded(view))

    # the next coverage drops what it covered from the list and keeps the rest
    _cover(session, [Message.objects.get(pk=pending.pk), _say(session, 13)])
    assert _floor(session) == (13, [pinned.pk, interrupted.pk])


def test_the_seats_read_does_not_look_below_its_floor(seats):
    """The bound is real: a covered message below the floor is not probed at all. Its coverage
    removed behind the writers' backs (never done by the platform), the bounded read still
    leaves it out; the unbounded read finds it."""
    session, planner, _critic = seats
    said = [_say(session, n) for n in range(1, 21)]
    _cover(session, said[:15])
    SummaryCoverage.objects.filter(message_id=said[4].pk).delete()

    view = _view(session)
    assert view[0].covered_through_seq == 15
    assert _read(session, view) == [16, 17, 18, 19, 20]
    assert _read(session, _unbounded(view)) == [5, 16, 17, 18, 19, 20]


def test_undo_lowers_the_floor_below_what_came_back(seats):
    session, _planner, _critic = seats
    said = [_say(session, n) for n in range(1, 21)]
    _cover(session, said[:5])
    second = _cover(session, said[5:12])
    assert _floor(session) == (12, [])

    with transaction.atomic():
        assert coverage_release(session, summary_id=second.pk) == (70, 7)

    assert _floor(session) == (5, [])
    assert _read(session, _view(session)) == list(range(6, 21))
    seat = SeatState.objects.get(session=session, bot=session.bot)
    assert (seat.covered_tokens, seat.covered_messages) == (50, 5)


def test_taking_the_seat_again_starts_its_floor_again(seats):
    """A bot that comes back may be shown more than before (it saw from its join, now it sees
    everything): its floor starts again at nothing, and its next coverage raises it."""
    session, planner, _critic = seats
    said = [_say(session, n) for n in range(1, 11)]
    _cover(session, said[:6])
    assert _floor(session)[0] == 6

    with transaction.atomic():
        room_seat_open(session=session, bot_id=planner.pk, sees_from_join=False)

    assert _floor(session) == (0, [])
    assert _read(session, _view(session)) == [7, 8, 9, 10]


def test_a_floor_lists_at_most_its_maximum_and_stops_below_the_first_left_out(seats, monkeypatch):
    """A window that leaves more than ``UNCOVERED_IDS_MAX`` uncovered (a room of many failed
    replies) lists that many, and the floor stops just below the first one it could not list."""
    monkeypatch.setattr(coverage_module, "UNCOVERED_IDS_MAX", 2)
    session, _planner, _critic = seats
    said = [
        _say(session, n, status="failed" if n in (3, 5, 7) else "complete") for n in range(1, 11)
    ]

    _cover(session, [m for m in said if m.status == "complete"])

    assert _floor(session) == (6, [said[2].pk, said[4].pk])
    view = _view(session)
    assert _read(session, view) == _read(session, _unbounded(view)) == []
    Message.objects.filter(pk__in=[said[2].pk, said[6].pk]).update(status="complete")
    assert _read(session, view) == _read(session, _unbounded(view)) == [3, 7]


@pytest.mark.parametrize("listed_max", [500, 3])
def test_the_bounded_read_equals_the_unbounded_one_through_every_change(
    seats, monkeypatch, listed_max
):
    """300 seeded random steps of what a room does to a seat's history: messages said and
    answered (some left pending, interrupted or failed), other bots' recall exchanges, pins
    and unpins, replies finished or retried below the floor, coverage of the oldest it may take
    (a unit left whole now and then), undo, and the bot taking its seat again from its join or
    from the start. After each, the seat's bounded read and the unbounded read agree; also with
    at most three ids listed below the floor."""
    monkeypatch.setattr(coverage_module, "UNCOVERED_IDS_MAX", listed_max)
    session, planner, critic = seats
    rng = random.Random(20261205)
    summaries: list[int] = []
    floors = set()
    n = 0
    for _ in range(300):
        step = rng.choice(
            ["say", "say", "say", "cover", "cover", "pin", "status", "undo", "join", "tool"]
        )
        messages = list(Message.objects.filter(session=session).order_by("seq"))
        if step == "say" or not messages:
            n += 1
            status = rng.choice(["complete"] * 6 + ["pending", "interrupted", "failed"])
            _say(session, n, role=rng.choice(["user", "assistant"]), bot=planner, status=status)
        elif step == "tool":
            n += 1
            bot = rng.choice([planner, critic])
            _say(session, n, role="tool", kind="tool", bot=bot, tool_call_id=f"c{n}")
        elif step == "pin":
            message = rng.choice(messages)
            transitions.message_pinned_set(message_id=message.pk, pinned=not message.pinned)
        elif step == "status":
            message = rng.choice(messages)
            if message.status in ("pending", "streaming"):
                Message.objects.filter(pk=message.pk).update(status="complete")
            elif message.status in ("failed", "interrupted"):
                transitions.reply_rerun(message_id=message.pk, model="m")
        elif step == "cover":
            view = _view(session)
            free = Message.objects.filter(
                pk__in=in_context(session.pk, 10**9, *_unbounded(view)),
                status="complete",
                pinned=False,
            ).order_by("seq")
            take = [m for m in free[: rng.randint(1, 12)] if rng.random() > 0.15]
            if take:
                summaries.append(_cover(session, take).pk)
        elif step == "undo" and summaries:
            summary_id = summaries.pop(rng.randrange(len(summaries)))
            with transaction.atomic():
                coverage_release(session, summary_id=summary_id)
        elif step == "join":
            sees = rng.random() < 0.5
            SessionParticipant.objects.filter(session=session, bot=planner).update(
                joined_seq=session.last_seq, sees_from_join=sees
            )
            with transaction.atomic():
                room_seat_open(session=session, bot_id=planner.pk, sees_from_join=sees)
        session.refresh_from_db()
        view = _view(session)
        floors.add(view[0].covered_through_seq)
        assert _read(session, view) == _read(session, _unbounded(view)), step
    # the floor was in play: raised often, and lowered or reset on the way (held lower when at
    # most three ids may be listed)
    assert len(floors) > (20 if listed_max == 500 else 10)


def test_a_message_the_seat_covers_already_ends_the_pass_without_a_savepoint(seats):
    """The unique (bot, message) pair refuses a second coverage: a ``Conflict`` that ends the
    caller's transaction (the pass's summary goes with it), with no savepoint of its own
    (docs/performance.md, "The tool task, eighth pass"): it was two statements a pass."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from compaction.engine.common import Conflict

    session, _, _ = seats
    first, second = _say(session, 1), _say(session, 2)
    _cover(session, [first])
    tokens = SeatState.objects.get(session=session, bot=session.bot).covered_tokens
    with (
        CaptureQueriesContext(connection) as queries,
        pytest.raises(Conflict),
        transaction.atomic(),
    ):
        again = Summary.objects.create(
            session=session,
            bot=session.bot,
            text="again",
            token_count=5,
            first_seq=first.seq,
            last_seq=second.seq,
            source_tokens=20,
            model="builtin/extractive",
            trigger=Summary.Trigger.SOFT,
            retention=1.0,
        )
        seat_cover(session, again, [first.pk, second.pk], tokens=20, seen_from=1)
    # Inside the test's transaction the block above is itself a savepoint; seat_cover adds none.
    savepoints = [q for q in queries.captured_queries if q["sql"].startswith("SAVEPOINT")]
    assert len(savepoints) == 1
    assert not Summary.objects.filter(pk=again.pk).exists()
    assert not SummaryCoverage.objects.filter(message=second).exists()
    assert SeatState.objects.get(session=session, bot=session.bot).covered_tokens == tokens
