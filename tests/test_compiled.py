"""chat_platform.compiled: an ORM query compiled once, run with new values, same rows."""

import pytest
from django.db.models import BooleanField, IntegerField, Value

from bots.models import Message
from chat_platform.compiled import CompiledValues
from chat_platform.errors import NotFound
from tests.factories import SessionFactory, message_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def sessions(owner):
    one = SessionFactory(user=owner, bot__owner=owner)
    two = SessionFactory(user=owner, bot=one.bot)
    for session in (one, two):
        for i in range(4):
            message_add(session, role="user", content=f"{session.pk}-{i}", pinned=i == 2)
    return one, two


def _messages(*, session_id, before_seq, role="user"):
    return (
        Message.objects.filter(session_id=session_id, seq__lt=before_seq, role=role)
        .annotate(flag=Value(True, output_field=BooleanField()))
        .annotate(one=Value(1, output_field=IntegerField()))
        .order_by("-seq")
        .values_list("pk", "content", "pinned", "flag", "one")
    )


def test_rows_are_the_orms_rows_for_every_set_of_values(sessions):
    compiled = CompiledValues(_messages)
    one, two = sessions
    for session, before in ((one, 5), (two, 5), (one, 3), (two, 1)):
        assert compiled.rows(session_id=session.pk, before_seq=before) == list(
            _messages(session_id=session.pk, before_seq=before)
        )
    rows = compiled.rows(session_id=one.pk, before_seq=4)
    # converters applied as the ORM does: booleans are bools, annotations their declared type
    assert rows == [
        (rows[0][0], f"{one.pk}-2", True, True, 1),
        (rows[1][0], f"{one.pk}-1", False, True, 1),
        (rows[2][0], f"{one.pk}-0", False, True, 1),
    ]
    assert all(type(row[2]) is bool and type(row[3]) is bool for row in rows)


def test_compiled_once_then_one_statement_per_call(sessions, django_assert_num_queries):
    built = []

    def build(**params):
        built.append(params)
        return _messages(**params)

    compiled = CompiledValues(build)
    one, two = sessions
    compiled.rows(session_id=one.pk, before_seq=5)
    assert len(built) == 2  # two sets of stand-ins, checked against each other
    with django_assert_num_queries(1):
        assert len(compiled.rows(session_id=two.pk, before_seq=5)) == 4
    assert len(built) == 2
    # a str parameter in place of the default keys a compilation of its own
    assert compiled.rows(session_id=two.pk, before_seq=5, role="assistant") == []
    assert len(built) == 4


def test_a_value_folded_into_the_sql_must_be_declared_as_shape(sessions):
    def first(*, session_id, limit):
        return (
            Message.objects.filter(session_id=session_id).order_by("seq").values_list("seq")[:limit]
        )

    one, _ = sessions
    with pytest.raises(TypeError, match="changes the SQL text; declare it as shape"):
        CompiledValues(first).rows(session_id=one.pk, limit=2)

    shaped = CompiledValues(first, shape=("limit",))
    assert shaped.rows(session_id=one.pk, limit=2) == [(1,), (2,)]
    assert shaped.rows(session_id=one.pk, limit=3) == [(1,), (2,), (3,)]


def test_values_that_cannot_be_bound_are_refused(sessions):
    one, _ = sessions
    compiled = CompiledValues(_messages)
    with pytest.raises(TypeError, match="'before_seq' is NoneType"):
        compiled.rows(session_id=one.pk, before_seq=None)
    with pytest.raises(TypeError, match="'before_seq' is list"):
        compiled.rows(session_id=one.pk, before_seq=[1, 2])
    with pytest.raises(TypeError, match="'session_id' is bool"):
        compiled.rows(session_id=True, before_seq=3)

    def ignores(*, session_id, unused):
        return Message.objects.filter(session_id=session_id).values_list("pk")

    with pytest.raises(TypeError, match=r"\['unused'\] never reach a placeholder"):
        CompiledValues(ignores).rows(session_id=one.pk, unused=3)


def _fields(instance) -> dict:
    return {f.attname: getattr(instance, f.attname) for f in type(instance)._meta.concrete_fields}


def test_whole_rows_build_the_instances_the_orm_builds(owner, sessions):
    """``model_fields`` / ``instances_from``: a session with its bot, and a token with its user,
    read by a compiled statement, hold every field the ORM's ``select_related`` gives them
    (JSON, dates, booleans converted); the access check still says not found for another
    user's session, and the token refusals are DRF's own words."""
    from rest_framework import exceptions
    from rest_framework.authtoken.models import Token

    from bots.models import ChatSession
    from bots.queries import session_get_for_user
    from chat_platform.account_gate import TokenAuthentication
    from chat_platform.compiled import instances_from, model_fields
    from chat_platform.errors import NotFound
    from tests.factories import UserFactory

    one, _ = sessions
    one.bot.tools = ["search/*", "clock/now"]
    one.bot.save()
    ChatSession.objects.filter(pk=one.pk).update(last_admission={"decision": "admit"})
    compiled = session_get_for_user(user=owner, session_id=str(one.pk))
    orm = ChatSession.objects.select_related("bot").get(pk=one.pk)
    assert _fields(compiled) == _fields(orm)
    assert _fields(compiled.bot) == _fields(orm.bot)
    assert compiled.bot.tools == ["search/*", "clock/now"]
    assert compiled.last_admission == {"decision": "admit"}
    with pytest.raises(NotFound):
        session_get_for_user(user=UserFactory(), session_id=one.pk)

    token = Token.objects.create(user=owner)
    user, read = TokenAuthentication().authenticate_credentials(token.key)
    assert (_fields(user), _fields(read)) == (_fields(owner), _fields(token))
    with pytest.raises(exceptions.AuthenticationFailed, match="Invalid token."):
        TokenAuthentication().authenticate_credentials(token.key + "x")
    owner.is_active = False
    owner.save()
    with pytest.raises(exceptions.AuthenticationFailed, match="User inactive or deleted."):
        TokenAuthentication().authenticate_credentials(token.key)
    with pytest.raises(TypeError):
        instances_from((1, 2), Token)
    assert model_fields(Token, "t__") == ("t__key", "t__user_id", "t__created")


def test_a_waited_reply_is_read_with_its_bot_or_none(sessions):
    """The REST wait's read (compiled once): the reply with every field the ORM gives it, its
    bot built when it has one, None when it has none, and not found for a missing id (its chat
    was deleted while it was waited for)."""
    from bots.models import Message
    from turns.services.message import _reply_with_bot

    one, _ = sessions
    spoken = message_add(one, role="assistant", content="with a bot")
    Message.objects.filter(pk=spoken.pk).update(bot=one.bot, tool_calls=[{"id": "c1"}])
    plain = message_add(one, role="assistant", content="without")
    read = _reply_with_bot(spoken.pk)
    orm = Message.objects.select_related("bot").get(pk=spoken.pk)
    assert _fields(read) == _fields(orm) and _fields(read.bot) == _fields(orm.bot)
    assert read.tool_calls == [{"id": "c1"}]
    assert _reply_with_bot(plain.pk).bot is None
    with pytest.raises(NotFound, match="The chat was deleted while its reply was being written."):
        _reply_with_bot(plain.pk + 1000)
