"""Migrations compaction 0011 and bots 0024: one store for "compacted" (docs/rooms.md "A seat's
bounded read"). Run through Django's migration executor on real PostgreSQL: a one-bot chat
compacted with the old schema (coverage on its messages, out of its running totals) gets its
bot's seat's coverage rows, the seat's totals and floor, and running totals that count every
message again, and measures the same context; back, its messages carry their summary again."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from bots.models import ChatSession
from compaction.measure import context_measure
from compaction.models import SeatState, SummaryCoverage
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("bots", "0023_slug_kept_by_a_retired_bot"), ("compaction", "0010_seat_floor")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _old_chat(apps, session, bot):
    """Eight messages of 10 tokens; a summary covers 1–5 the old way; 6 is interrupted, 7
    pinned, 8 plain: the running totals hold 6–8 (30 tokens, 3 messages)."""
    Message = apps.get_model("bots", "Message")
    Summary = apps.get_model("compaction", "Summary")
    summary = Summary.objects.create(
        session_id=session.pk,
        bot_id=bot.pk,
        level=1,
        text="Five messages about the depot.",
        token_count=7,
        first_seq=1,
        last_seq=5,
        source_tokens=50,
        model="builtin/extractive",
        trigger="manual",
        retention=1.0,
    )
    for seq in range(1, 9):
        Message.objects.create(
            session_id=session.pk,
            seq=seq,
            role="user" if seq % 2 else "assistant",
            content=f"message {seq}",
            token_count=10,
            status="interrupted" if seq == 6 else "complete",
            pinned=seq == 7,
            compacted_by_id=summary.pk if seq <= 5 else None,
        )
    apps.get_model("bots", "ChatSession").objects.filter(pk=session.pk).update(
        last_seq=8, context_tokens=30, context_messages=3
    )
    return summary.pk


def test_a_one_bot_chats_coverage_becomes_its_seats_rows_and_comes_back(owner):
    bot = BotFactory(owner=owner, memory_index_size=0)
    session = SessionFactory(user=owner, bot=bot)
    try:
        old = _migrate(BEFORE)
        summary_id = _old_chat(old, session, bot)

        _migrate(_latest())

        assert sorted(
            SummaryCoverage.objects.filter(message__session=session).values_list(
                "summary_id", "bot_id", "message__seq"
            )
        ) == [(summary_id, bot.pk, seq) for seq in range(1, 6)]
        seat = SeatState.objects.get(session=session, bot=bot)
        assert (seat.covered_tokens, seat.covered_messages) == (50, 5)
        assert (seat.covered_through_seq, seat.uncovered_ids) == (5, [])
        fresh = ChatSession.objects.select_related("bot").get(pk=session.pk)
        assert (fresh.context_tokens, fresh.context_messages) == (80, 8)
        measure = context_measure(session=fresh)
        # the context it measures is the one it measured before: 6, 7 (a pin) and 8
        assert (measure.history_totals.count, measure.history_totals.tokens) == (2, 20)
        assert [p.seq for p in measure.pinned] == [7]
        assert [s.id for s in measure.summaries] == [summary_id]

        back = _migrate(BEFORE)
        Message = back.get_model("bots", "Message")
        assert sorted(
            Message.objects.filter(session_id=session.pk).values_list("seq", "compacted_by_id")
        ) == [(seq, summary_id if seq <= 5 else None) for seq in range(1, 9)]
        assert not back.get_model("compaction", "SummaryCoverage").objects.exists()
        old_session = back.get_model("bots", "ChatSession").objects.get(pk=session.pk)
        assert (old_session.context_tokens, old_session.context_messages) == (30, 3)
    finally:
        _migrate(_latest())
