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
"""

from collections.abc import Callable
from functools import partial
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
