import pytest
from django.db import transaction
from django.db.models import F

from bots.models import ChatSession, Message
from chat_platform.dbwrite import update_returning
from tests.factories import SessionFactory


@pytest.fixture
def session(owner):
    return SessionFactory(user=owner, bot__owner=owner, title="t")


def test_returns_the_fresh_rows_in_one_statement(session, django_assert_num_queries):
    ChatSession.objects.filter(pk=session.pk).update(last_seq=7, context_tokens=100)
    with django_assert_num_queries(1):
        rows = update_returning(
            ChatSession.objects.filter(pk=session.pk),
            last_seq=F("last_seq") + 2,
            context_tokens=F("context_tokens") + 5,
        )
    assert [(r.pk, r.last_seq, r.context_tokens, r.title) for r in rows] == [
        (session.pk, 9, 105, "t")
    ]
    assert isinstance(rows[0], ChatSession)
    session.refresh_from_db()
    assert (session.last_seq, session.context_tokens) == (9, 105)


def test_a_conditional_update_that_matches_nothing_returns_nothing(session):
    message = Message.objects.create(session=session, seq=1, role="assistant", status="complete")
    rows = update_returning(
        Message.objects.filter(pk=message.pk, status=Message.Status.STREAMING), status="failed"
    )
    assert rows == []
    message.refresh_from_db()
    assert message.status == "complete"


def test_every_field_comes_back_converted(session):
    message = Message.objects.create(
        session=session,
        seq=1,
        role="assistant",
        status="streaming",
        tool_calls=[{"id": "c1"}],
    )
    (row,) = update_returning(
        Message.objects.filter(pk=message.pk), status="complete", content="done"
    )
    assert (row.status, row.content, row.tool_calls, row.session_id) == (
        "complete",
        "done",
        [{"id": "c1"}],
        session.pk,
    )
    assert row.created_at == message.created_at
    assert row.updated_at is not None


def test_a_failed_update_inside_atomic_marks_it_for_rollback(session):
    message = Message.objects.create(session=session, seq=1, role="assistant", status="pending")
    with pytest.raises(Exception), transaction.atomic():  # noqa: B017, PT011
        # seq 1 is taken by this very row's neighbour: the unique (session, seq) constraint fails
        Message.objects.create(session=session, seq=2, role="user", status="complete")
        update_returning(Message.objects.filter(pk=message.pk), seq=2)
    assert Message.objects.filter(session=session).count() == 1


def test_empty_filter_and_slices(session):
    assert update_returning(Message.objects.filter(pk__in=[]), status="failed") == []
    with pytest.raises(TypeError):
        update_returning(Message.objects.all()[:1], status="failed")


def test_a_compiled_statement_is_built_once_and_run_with_each_call_s_values():
    from datetime import UTC, datetime

    from chat_platform.dbwrite import CompiledStatement

    built = []

    def build(n: int, at: datetime) -> tuple[str, tuple]:
        built.append(n)
        return "SELECT %s, %s, %s", ("fixed", n, at)

    statement = CompiledStatement(build, name="test")
    at = datetime(2026, 12, 5, tzinfo=UTC)
    assert statement.statement(n=7, at=at) == ("SELECT %s, %s, %s", ["fixed", 7, at])
    assert statement.statement(n=8, at=at) == ("SELECT %s, %s, %s", ["fixed", 8, at])
    assert len(built) == 2  # the two stand-in builds, none per call

    def folded(n: int) -> tuple[str, tuple]:  # a value that changes the SQL itself
        built.append(n)
        return f"SELECT {n}", ()

    statement = CompiledStatement(folded, name="folded")
    built.clear()
    assert statement.statement(n=3) == ("SELECT 3", [])
    assert statement.statement(n=4) == ("SELECT 4", [])
    assert built == [1_900_000_001, 1_800_000_003, 3, 4]  # built on every call


def test_rows_come_back_without_a_raw_queryset(session, monkeypatch):
    # A turn's finish returns its reply through ``raw_rows``: read off the cursor in column
    # order with the ORM's converters (``instance_from_row``), not through Django's RawQuerySet,
    # which resolves its columns by name and its converters on every call (~0.2 ms a turn,
    # docs/performance.md "A turn's CPU, sixth pass").
    from django.db.models.query import RawQuerySet

    message = Message.objects.create(
        session=session, seq=1, role="assistant", status="streaming", tool_calls=[{"id": "c1"}]
    )
    raw = []
    real_iter = RawQuerySet.__iter__
    monkeypatch.setattr(RawQuerySet, "__iter__", lambda self: raw.append(1) or real_iter(self))

    (row,) = update_returning(Message.objects.filter(pk=message.pk), status="complete")

    assert raw == []
    fresh = Message.objects.get(pk=message.pk)
    fields = [f.attname for f in Message._meta.concrete_fields]
    assert [getattr(row, f) for f in fields] == [getattr(fresh, f) for f in fields]
    assert (row._state.adding, row._state.db) == (False, "default")
