"""The database holds memory's invariants (docs/memory.md): scopes, names, ranges, cascades."""

import pytest
from django.db import DataError, IntegrityError, connection, transaction

from bots.models import ChatSession
from memory import services
from memory.models import MemoryRecord, RecallEvent
from tests.factories import MemoryRecordFactory, message_add

pytestmark = pytest.mark.django_db


def _bot_record(session, **fields):
    fields.setdefault("name", "favourite-colour")
    return MemoryRecordFactory(
        session=None, scope="bot", user=session.user, bot=session.bot, **fields
    )


def _refused(**fields):
    with pytest.raises((IntegrityError, DataError)), transaction.atomic():
        MemoryRecordFactory(**fields)


def test_session_scoped_names_are_unique_per_session(chat_session, sibling_session):
    MemoryRecordFactory(session=chat_session, name="dup")
    _refused(session=chat_session, name="dup")
    MemoryRecordFactory(session=sibling_session, name="dup")  # another session: fine
    assert MemoryRecord.objects.filter(name="dup").count() == 2


def test_bot_scoped_names_are_unique_per_user_and_bot(chat_session, other_bot_session):
    _bot_record(chat_session, name="dup")
    with pytest.raises(IntegrityError), transaction.atomic():
        _bot_record(chat_session, name="dup")
    _bot_record(other_bot_session, name="dup")  # same user, other bot: fine
    # A session-scoped record may share the name (it shadows the bot one in its session).
    MemoryRecordFactory(session=chat_session, name="dup")
    assert MemoryRecord.objects.filter(name="dup").count() == 3


@pytest.mark.parametrize(
    "shape",
    [
        # session scope must name a session and no user/bot
        {"scope": "session", "session": None},
        {"scope": "session", "user_from_session": True},
        # bot scope: user and bot, no session; info only
        {"scope": "bot"},
        {"scope": "bot", "session": None, "bot_only": True},
        {"scope": "bot", "session": None, "user_bot": True, "kind": "snapshot"},
        {"scope": "elsewhere"},
    ],
)
def test_scope_shape_is_enforced_by_the_database(chat_session, shape):
    fields = {"session": chat_session, "scope": shape["scope"]}
    if "session" in shape:
        fields["session"] = shape["session"]
    if shape.get("user_from_session"):
        fields["user"] = chat_session.user
    if shape.get("bot_only"):
        fields["bot"] = chat_session.bot
    if shape.get("user_bot"):
        fields.update(user=chat_session.user, bot=chat_session.bot)
    if "kind" in shape:
        fields.update(kind=shape["kind"], first_seq=1, last_seq=2)
    _refused(**fields)
    assert MemoryRecord.objects.count() == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"name": "Bad Name"},
        {"name": "a" * 81},
        {"name": "ok\n"},
        {"name": ""},
        {"kind": "other"},
        {"first_seq": 5, "last_seq": 2},
        {"first_seq": 5},
        {"kind": "snapshot"},  # a snapshot always has its range
    ],
)
def test_invalid_rows_are_refused(chat_session, fields):
    _refused(session=chat_session, **fields)
    assert MemoryRecord.objects.count() == 0


def test_deleting_a_chat_keeps_the_bot_scoped_records_saved_in_it(chat_session, sibling_session):
    own = MemoryRecordFactory(session=chat_session, name="own")
    shared = _bot_record(chat_session)
    chat_session.delete()
    assert not MemoryRecord.objects.filter(pk=own.pk).exists()
    assert list(MemoryRecord.objects.values_list("pk", flat=True)) == [shared.pk]


def test_deleting_the_bot_or_the_user_deletes_their_bot_scoped_records(
    chat_session, other_bot_session
):
    doomed = _bot_record(chat_session, name="doomed")
    kept = _bot_record(other_bot_session, name="kept")
    chat_session.bot.delete()
    assert list(MemoryRecord.objects.values_list("pk", flat=True)) == [kept.pk]
    assert not MemoryRecord.objects.filter(pk=doomed.pk).exists()
    other_bot_session.user.delete()
    assert MemoryRecord.objects.count() == 0


def test_snapshot_write_still_writes_a_session_scoped_snapshot(chat_session):
    record = services.snapshot_write(
        session=chat_session, first_seq=3, last_seq=9, body="[3] user: The cello lessons start."
    )
    record.refresh_from_db()
    assert (record.scope, record.kind, record.name, record.indexed) == (
        "session",
        "snapshot",
        "snapshot_3_9",
        False,
    )
    # it names the bot whose compaction wrote it (a room's seat; here the chat's bot)
    assert (record.session_id, record.user_id, record.bot_id) == (
        chat_session.pk,
        None,
        chat_session.bot_id,
    )


def test_snapshot_write_makes_a_new_snapshot_in_three_statements_and_refreshes_a_retried_one(
    chat_session, django_assert_num_queries
):
    """A pass's snapshot (every ~2 steps of a long tool task): the other records' heads for its
    description, an UPDATE that finds no such name, the INSERT. A retried range keeps its row
    and gets the new text, unindexed until its compaction succeeds."""
    with django_assert_num_queries(3):
        first = services.snapshot_write(
            session=chat_session, first_seq=3, last_seq=9, body="[3] user: The cello lessons."
        )
    MemoryRecord.objects.filter(pk=first.pk).update(indexed=True)
    again = services.snapshot_write(
        session=chat_session, first_seq=3, last_seq=9, body="[3] user: The viola lessons."
    )
    assert again.pk == first.pk
    assert MemoryRecord.objects.filter(session=chat_session).count() == 1
    again.refresh_from_db()
    assert (again.body, again.indexed, again.kind) == (
        "[3] user: The viola lessons.",
        False,
        "snapshot",
    )
    assert again.updated_at > first.updated_at


def test_recall_event_round_and_tool_are_checked(chat_session):
    for bad in ({"round": 0, "tool": "read"}, {"round": 1, "tool": "write"}):
        with pytest.raises(IntegrityError), transaction.atomic():
            RecallEvent.objects.create(session=chat_session, **bad)
    assert RecallEvent.objects.count() == 0


def test_recall_event_outlives_its_message_but_not_its_session(chat_session):
    reply = message_add(chat_session, role="assistant", content="Porto.")
    event = RecallEvent.objects.create(session=chat_session, message=reply, round=1, tool="read")
    reply.delete()
    event.refresh_from_db()
    assert event.message_id is None
    ChatSession.objects.filter(pk=chat_session.pk).delete()
    assert RecallEvent.objects.count() == 0


def test_postgres_trigger_keeps_the_search_vector_current(chat_session):
    record = MemoryRecordFactory(session=chat_session, name="city", body="I live in Porto.")

    def vector():
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT search_vector::text FROM memory_memoryrecord WHERE id = %s", [record.pk]
            )
            return cursor.fetchone()[0]

    assert "'porto':" in vector() and "'citi':1A" in vector()
    MemoryRecord.objects.filter(pk=record.pk).update(body="Now in Lisbon.")
    assert "'lisbon':" in vector() and "'porto'" not in vector()
    # Updates that do not touch the text keep the vector (no re-parse)
    MemoryRecord.objects.filter(pk=record.pk).update(indexed=False)
    assert "'lisbon':" in vector()


def test_postgres_gin_index_exists():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT indexdef FROM pg_indexes WHERE indexname = 'memory_record_search_gin'"
        )
        (indexdef,) = cursor.fetchone()
    assert "USING gin (search_vector)" in indexdef
