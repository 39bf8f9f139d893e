"""The chat core's PostgreSQL fast paths: the hot transitions of a turn as one statement each,
where the reference implementation (``bots.transitions``, the plain ORM, which SQLite and
``DB_FAST_PATHS=false`` run) takes two. Each builds on the reference's own conditional update,
so both decide the same race the same way; ``tests/test_db_fast_paths.py`` runs a turn and the
races through both and compares what they store and send.

- ``reply_claim``: the claim's conditional update and the rows the turn reads (the reply, its
  session, its bot, the session's user, its user message), joined in a CTE — one round trip, the
  turn's first.
- ``finish_counted``: a reply's finish and the session's running totals it moves — one round trip
  and one commit, the last write of a turn before its ``message.completed`` frame.
- ``exchange_insert``: a send's user message and its pending replies (the first answering it) —
  one round trip where two ``INSERT``s took two, on the path to the reply's first token.
"""

import re
from collections.abc import Callable, Sequence
from functools import lru_cache, partial
from typing import Any

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.db.models import QuerySet
from django.db.models.sql.subqueries import UpdateQuery

from bots.models import Bot, ChatSession, Message
from chat_platform.dbwrite import (
    CompiledStatement,
    fast_paths,
    instance_from_row,
    raw_rows,
    select_columns,
    update_returning_sql,
)

# The reference's conditional claim: (message id, now) -> (queryset, values to set).
ClaimUpdate = Callable[[int, Any], tuple[QuerySet, dict[str, Any]]]


def enabled() -> bool:
    """On PostgreSQL, unless ``DB_FAST_PATHS`` is off."""
    return connection.vendor == "postgresql" and fast_paths()


def _claim_sql(update: ClaimUpdate, message_id: int, now: Any) -> tuple[str, tuple]:
    queryset, values = update(message_id, now)
    compiled = update_returning_sql(queryset, **values)
    assert compiled is not None  # one pk: the filter can always match
    sql, params = compiled
    quote = connection.ops.quote_name
    sessions, bots, users = ChatSession._meta.db_table, Bot._meta.db_table, _user_table()
    # Identifiers from the models, values in ``params``: nothing here comes from a user.
    sql = (
        f"WITH claimed AS ({sql}) SELECT "  # noqa: S608
        f"{select_columns(Message, 'claimed')}, {select_columns(ChatSession, 's')}, "
        f"{select_columns(Bot, 'b')}, {select_columns(get_user_model(), 'u')}, "
        f"{select_columns(Message, 'r')} FROM claimed "
        f"JOIN {quote(sessions)} s ON s.{quote('id')} = claimed.{quote('session_id')} "
        f"JOIN {quote(bots)} b ON b.{quote('id')} = s.{quote('bot_id')} "
        f"JOIN {quote(users)} u ON u.{quote('id')} = s.{quote('user_id')} "
        f"LEFT JOIN {quote(Message._meta.db_table)} r "
        f"ON r.{quote('id')} = claimed.{quote('reply_to_id')}"
    )
    return sql, params


def _user_table() -> str:
    return get_user_model()._meta.db_table


# Built once per process (chat_platform/dbwrite.py, ``CompiledStatement``): ~0.45 ms a turn.
_claims: dict[ClaimUpdate, CompiledStatement] = {}


def reply_claim(*, message_id: int, now: Any, update: ClaimUpdate) -> Message | None:
    """``bots.transitions.reply_claim`` as one statement (``update``: its conditional update)."""
    statement = _claims.get(update)
    if statement is None:
        statement = _claims.setdefault(
            update, CompiledStatement(partial(_claim_sql, update), name="reply_claim")
        )
    sql, params = statement.statement(message_id=message_id, now=now)
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    models = (Message, ChatSession, Bot, get_user_model())
    sizes = [len(model._meta.concrete_fields) for model in models]
    ends = [sum(sizes[: i + 1]) for i in range(len(sizes))]
    reply = instance_from_row(Message, row[: ends[0]])
    session = instance_from_row(ChatSession, row[ends[0] : ends[1]])
    session.bot = instance_from_row(Bot, row[ends[1] : ends[2]])
    # The session's user: the turn checks it may still sign in (turns/turn.py).
    session.user = instance_from_row(models[3], row[ends[2] : ends[3]])
    reply.session = session
    reply.reply_to = (
        instance_from_row(Message, row[ends[3] :]) if reply.reply_to_id is not None else None
    )
    return reply


def _update_sql(update: Callable[..., tuple[QuerySet, dict[str, Any]]], **binds: Any) -> tuple:
    """The plain ``UPDATE`` that ``queryset.update(**values)`` runs, ``update(**binds)`` giving
    both."""
    queryset, values = update(**binds)
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(queryset.db).as_sql()
    return sql, tuple(params)


_updates: dict[Callable[..., Any], CompiledStatement] = {}


def update_run(
    update: Callable[..., tuple[QuerySet, dict[str, Any]]], *, name: str, **binds: Any
) -> None:
    """The plain ``UPDATE`` of ``update(**binds)`` (its queryset and values), built once per
    process (``CompiledStatement``): a write every send makes (the outbox stamp)."""
    statement = _updates.get(update)
    if statement is None:
        statement = _updates.setdefault(
            update, CompiledStatement(partial(_update_sql, update), name=name)
        )
    sql, params = statement.statement(**binds)
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)


_checkpoints: dict[Callable[..., Any], CompiledStatement] = {}


def reply_checkpoint(
    *, message_id: int, content: str, now: Any, update: Callable[..., Any]
) -> None:
    """``bots.transitions.reply_checkpoint``'s statement, built once per process: Django built
    it at every checkpoint (twice a second of every stream), ~0.15 ms of CPU each
    (docs/performance.md "A turn's CPU, sixth pass")."""
    statement = _checkpoints.get(update)
    if statement is None:
        statement = _checkpoints.setdefault(
            update, CompiledStatement(partial(_update_sql, update), name="reply_checkpoint")
        )
    sql, params = statement.statement(message_id=message_id, content=content, now=now)
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)


# ``bots.transitions.allocate_seqs``'s statement, without and with the running totals.
_seqs: dict[bool, CompiledStatement] = {}


def seqs_allocate(update: Callable[..., tuple[QuerySet, dict[str, Any]]], **binds: Any) -> Any:
    """``bots.transitions.allocate_seqs``'s ``UPDATE … RETURNING`` (``update(**binds)``: its
    queryset and values), built once per process: Django built it on every send. The session
    row as the statement returns it."""
    counted = binds["tokens"] > 0
    if not counted:
        binds = {k: v for k, v in binds.items() if k not in ("tokens", "messages")}
    statement = _seqs.get(counted)
    if statement is None:
        statement = _seqs.setdefault(
            counted,
            CompiledStatement(partial(_returning_sql, update), name=f"allocate_seqs_{counted}"),
        )
    (row,) = raw_rows(ChatSession.objects.all(), *statement.statement(**binds))
    return row


def _returning_sql(update: Callable[..., tuple[QuerySet, dict[str, Any]]], **binds: Any) -> tuple:
    queryset, values = update(**binds)
    compiled = update_returning_sql(queryset, **values)
    assert compiled is not None  # one pk: the filter can always match
    return compiled


def finish_counted(queryset: QuerySet, values: dict[str, Any]) -> list[Message]:
    """``bots.transitions.message_finish`` of a counted message as one statement: the
    conditional update (``queryset``, set to ``values``) and, if it won with tokens, the
    session's running totals moved by them. The updated rows (none: the update lost)."""
    compiled = update_returning_sql(queryset, **values)
    if compiled is None:
        return []
    sql, params = compiled
    quote = connection.ops.quote_name
    table = quote(ChatSession._meta.db_table)
    tokens, messages = quote("context_tokens"), quote("context_messages")
    # Identifiers from the models, values in ``params``: nothing here comes from a user.
    return raw_rows(
        queryset,
        f"WITH finished AS ({sql}), counted AS ("  # noqa: S608
        f"UPDATE {table} SET {tokens} = {table}.{tokens} + finished.{quote('token_count')}, "
        f"{messages} = {table}.{messages} + 1 FROM finished "
        f"WHERE {table}.{quote('id')} = finished.{quote('session_id')} "
        f"AND finished.{quote('token_count')} > 0"
        ") SELECT * FROM finished",
        params,
    )


def _insert_fields() -> list[Any]:
    """The columns an ``INSERT`` of a message writes, as ``Model.save`` writes them: every
    local concrete field but the generated id."""
    meta = Message._meta
    return [f for f in meta.local_concrete_fields if f is not meta.auto_field and not f.generated]


def _cast_type(field: Any) -> str:
    # The column's type without a length: a value too long for its column still fails there,
    # as a plain INSERT's does, rather than being cut by the cast.
    return re.sub(r"\(\d+\)$", "", field.db_type(connection))


# The reply's columns that name the question: its id, from the CTE (the first reply answers it).
_ANSWERS = ("reply_to_id", "prompted_by_id")
# The columns a chat question and its pending replies hold alike (the chat, the kind, and every
# column neither sets): a reply takes them from the question's row. Fewer parameters than
# psycopg's 50 keep the statement's conversion cached (266 µs a send without it, 0.4 with).
_SHARED = (
    "session_id", "kind", "pinned", "tool_calls", "tool_call_id", "tool_name", "tool_ok", "hop",
    "finish_reason", "prompt_tokens", "completion_tokens", "error_code", "error_message",
    "stop_requested", "dispatched_at", "heartbeat_at",
)  # fmt: skip


@lru_cache(maxsize=8)
def _exchange_sql(replies: int) -> str:
    quote = connection.ops.quote_name
    fields = _insert_fields()
    table, columns = quote(Message._meta.db_table), ", ".join(quote(f.column) for f in fields)
    shared = ", ".join(quote(name) for name in _SHARED)

    def reply_row(first: bool) -> str:
        cells = [
            f"q.{quote('id')}"
            if f.attname == "prompted_by_id" or (first and f.attname == "reply_to_id")
            else f"q.{quote(f.column)}"
            if f.attname in _SHARED
            else f"CAST(%s AS {_cast_type(f)})"
            for f in fields
        ]
        return f"SELECT {', '.join(cells)} FROM q"  # noqa: S608

    # Identifiers from the model, values in params: nothing here comes from a user. The replies
    # select from the question's CTE, so its row (and its id) is made before theirs.
    return (
        f"WITH q AS (INSERT INTO {table} ({columns}) "  # noqa: S608
        f"VALUES ({', '.join(['%s'] * len(fields))}) RETURNING {quote('id')}, {shared}) "
        f"INSERT INTO {table} ({columns}) "
        + " UNION ALL ".join(reply_row(i == 0) for i in range(replies))
        + f" RETURNING {quote('id')}, {quote('seq')}, {quote('prompted_by_id')}"
    )


def _insert_values(message: Message) -> dict[str, Any] | None:
    """The values ``save()`` would insert, by field (``pre_save`` stamps ``created_at`` on the
    instance too); None when one is an expression."""
    values = {}
    for field in _insert_fields():
        value = field.pre_save(message, True)
        if hasattr(value, "resolve_expression"):
            return None
        values[field.attname] = value
    return values


def _prepared(values: dict[str, Any], *, skip: tuple[str, ...] = ()) -> list[Any]:
    return [
        field.get_db_prep_save(values[field.attname], connection=connection)
        for field in _insert_fields()
        if field.attname not in skip
    ]


def exchange_insert(question: Message, replies: Sequence[Message]) -> bool:
    """``bots.transitions.exchange_insert`` as one statement: the question's ``INSERT`` in a
    CTE, its replies' selecting its id and the columns they share with it (``_SHARED``). False
    (nothing written) when a value is an expression or a reply's differs from the question's in
    a shared column: the reference writes them."""
    asked = _insert_values(question)
    if asked is None:
        return False
    params = _prepared(asked)
    for offset, reply in enumerate(replies):
        values = _insert_values(reply)
        if values is None or any(values[name] != asked[name] for name in _SHARED):
            return False
        params += _prepared(values, skip=_ANSWERS[offset > 0 :] + _SHARED)
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(_exchange_sql(len(replies)), params)
        rows = {seq: (pk, asked) for pk, seq, asked in cursor.fetchall()}
    for message in (question, *replies):
        message._state.adding, message._state.db = False, connection.alias
    for reply in replies:
        reply.pk, question.pk = rows[reply.seq]
    for offset, reply in enumerate(replies):
        # The instances, as ``save()`` leaves a relation assigned before its object was saved:
        # the id set and the object kept (setting the id alone would drop it).
        reply.prompted_by = question
        if offset == 0:
            reply.reply_to = question
    return True
