"""Migrations 0007–0008: a pending expansion per (session, bot). Run through Django's migration
executor on real PostgreSQL: rows written with the old schema (one per session, no bot) get
their bots; back to one per session, each session keeps its newest."""

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from bots.models import ChatSession
from compaction.models import ContextExpansion
from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("compaction", "0006_context_records")]
AFTER = [("compaction", "0008_expansion_bot_required")]


def _migrate(targets):
    executor = MigrationExecutor(connection)
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


def _latest():
    """Every app's newest migration: the database as the rest of the suite expects it (left at
    0008, later tests' ``tool`` summaries broke 0009's trigger constraint in that process)."""
    return MigrationExecutor(connection).loader.graph.leaf_nodes()


def _room(owner, bot):
    session = SessionFactory(user=owner, bot=bot)
    ChatSession.objects.filter(pk=session.pk).update(is_room=True)
    return session


def test_each_pending_expansion_gets_its_bot_and_going_back_keeps_the_newest(owner):
    planner, critic, solo_bot = (BotFactory(owner=owner) for _ in range(3))
    gone = BotFactory(owner=owner)
    gone_id = gone.pk
    gone.delete()
    solo = SessionFactory(user=owner, bot=solo_bot)
    room = _room(owner, planner)  # its pending expansion is the critic's seat's
    earlier = _room(owner, planner)  # set before it became a room: no seat suffix
    orphan = _room(owner, planner)  # names a bot that no longer exists
    try:
        old = _migrate(BEFORE)
        Old = old.get_model("compaction", "ContextExpansion")
        for session, record in (
            (solo, "snapshot_1_4"),
            (room, f"snapshot_1_4_b{critic.pk}"),
            (earlier, "snapshot_2_6"),
            (orphan, f"snapshot_1_4_b{gone_id}"),
        ):
            first, last = (int(n) for n in record.split("_")[1:3])
            Old.objects.create(session_id=session.pk, record=record, first_seq=first, last_seq=last)

        _migrate(AFTER)

        assert sorted(
            ContextExpansion.objects.values_list("session_id", "bot_id", "record", "reply_id")
        ) == sorted(
            [
                (solo.pk, solo_bot.pk, "snapshot_1_4", None),
                (room.pk, critic.pk, f"snapshot_1_4_b{critic.pk}", None),
                (earlier.pk, planner.pk, "snapshot_2_6", None),
            ]
        )

        # a second bot's row in the room: back to one per session keeps the newest
        ContextExpansion.objects.create(
            session=room,
            bot=planner,
            record=f"snapshot_1_4_b{planner.pk}",
            first_seq=1,
            last_seq=4,
        )
        old = _migrate(BEFORE)
        Old = old.get_model("compaction", "ContextExpansion")
        assert sorted(Old.objects.values_list("session_id", "record")) == sorted(
            [
                (solo.pk, "snapshot_1_4"),
                (room.pk, f"snapshot_1_4_b{planner.pk}"),
                (earlier.pk, "snapshot_2_6"),
            ]
        )
    finally:
        _migrate(_latest())
    assert sorted(ContextExpansion.objects.values_list("session_id", "bot_id")) == sorted(
        [(solo.pk, solo_bot.pk), (room.pk, planner.pk), (earlier.pk, planner.pk)]
    )
