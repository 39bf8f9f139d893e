"""Bulk writes of messages: a branch's copied prefix (one INSERT … SELECT), an imported history
and an API client's history, each a fixed number of statements whatever its length. Messages
come finished (or end interrupted, a copy of an unfinished one), so no claim races them.

Split from ``bots.transitions`` (the state machine of a message, whose ``allocate_seqs`` a
client's history uses): the chat core's other writer of messages (docs/architecture.md).
"""

from typing import Any

from django.db import connection
from django.db.models import Count, Max, OuterRef, Subquery, Sum
from django.db.models.functions import Coalesce

from bots.models import ChatSession, Message
from bots.transitions import UNFINISHED, allocate_seqs
from chat_platform.dbwrite import rows_update

# What an imported message keeps of its own once inserted (auto_now stamped it on insert).
STAMPS_AND_ANSWER = ("created_at", "updated_at", "reply_to", "prompted_by")

# --- branches: a chat that starts as a copy of another's first messages ------------------------


def messages_copy_prefix(*, source_id: int, target: ChatSession, before_seq: int) -> int:
    """Copy ``source_id``'s messages before ``before_seq`` into the empty chat ``target``, as
    they are (seqs, text, counts, timestamps, pins), in one INSERT … SELECT: no message text
    passes through Python, so a long history copies in one statement. A copy's ``reply_to``
    points to the copied message; nothing covers a copy yet (the caller carries over the
    summaries that cover only copied messages, with their coverage). The target's ``last_seq`` is
    the last copied seq. Returns how many were copied."""
    copied = messages_copy_prefixes(source_id=source_id, targets=[(target.pk, before_seq)])
    target.last_seq = before_seq - 1 if copied else 0
    return copied


def messages_copy_prefixes(*, source_id: int, targets: list[tuple[int, int]]) -> int:
    """``messages_copy_prefix`` into several empty chats at once, ``targets`` being
    ``(chat id, before_seq)`` pairs: the same statements, each over all of them (an import's
    branches of one conversation copy their shared prefixes in one INSERT … SELECT, whatever
    their number). Returns how many were copied in all."""
    if not targets:
        return 0
    quote = connection.ops.quote_name
    table = quote(Message._meta.db_table)
    columns = [f.column for f in Message._meta.concrete_fields if not f.primary_key]
    replaced = {
        "session_id": "b.target_id",
        "client_id": "''",
        "charged_to": "''",
        # One reply per message: the copy answers the copy, set below (and a room's reply
        # belongs to the copy of the message that prompted it).
        "reply_to_id": "NULL",
        "prompted_by_id": "NULL",
    }
    selected = ", ".join(replaced.get(c, f"m.{quote(c)}") for c in columns)
    seq, session_col, pk = quote("seq"), quote("session_id"), quote("id")
    ids = [target_id for target_id, _ in targets]
    values = ", ".join(["(CAST(%s AS BIGINT), CAST(%s AS INTEGER))"] * len(targets))
    in_targets = ", ".join(["%s"] * len(ids))
    with connection.cursor() as cursor:
        # Identifiers from the model, values in params: nothing here comes from a user.
        cursor.execute(
            f"WITH b(target_id, before_seq) AS (VALUES {values}) "  # noqa: S608
            f"INSERT INTO {table} ({', '.join(quote(c) for c in columns)}) "
            f"SELECT {selected} FROM {table} m JOIN b ON m.{seq} < b.before_seq "
            f"WHERE m.{session_col} = %s ORDER BY b.target_id, m.{seq}",
            [v for pair in targets for v in pair] + [source_id],
        )
        copied = cursor.rowcount
        # reply_to, prompted_by: the copy of the message the original pointed to (same seqs,
        # in the same target).
        for column in (quote("reply_to_id"), quote("prompted_by_id")):
            cursor.execute(
                f"UPDATE {table} SET {column} = ("  # noqa: S608
                f"SELECT n.{pk} FROM {table} o JOIN {table} r ON r.{pk} = o.{column} "
                f"JOIN {table} n ON n.{seq} = r.{seq} AND n.{session_col} = {table}.{session_col} "
                f"WHERE o.{session_col} = %s AND o.{seq} = {table}.{seq}) "
                f"WHERE {session_col} IN ({in_targets})",
                [source_id, *ids],
            )
    # No turn will ever finish an unfinished copy: it ends interrupted there.
    Message.objects.filter(session_id__in=ids, status__in=UNFINISHED).update(
        status=Message.Status.INTERRUPTED
    )
    ChatSession.objects.filter(pk__in=ids).update(last_seq=Coalesce(_highest_seq(), 0))
    return copied


def _highest_seq() -> Subquery:
    return Subquery(
        Message.objects.filter(session_id=OuterRef("pk"))
        .order_by()
        .values("session_id")
        .annotate(highest=Max("seq"))
        .values("highest")
    )


# --- an imported history (transfer) -------------------------------------------------------------


def messages_import(
    *, session_id: int, messages: list[Message], reply_to_seqs: list[int | None]
) -> list[Message]:
    """Write one batch of an imported history at the seqs its messages carry (ascending, above
    the session's last seq), keeping their own ``created_at``/``updated_at`` (auto_now would
    stamp them now), each ``reply_to`` resolved by seq (an earlier message of the session), and
    raise the session's ``last_seq`` to the batch's highest. The importer recounts the running
    totals once at the end (``session_context_recount``): messages come finished, so no claim
    races them."""
    if not messages:
        return []
    stamps = [(m.created_at, m.updated_at) for m in messages]
    created = Message.objects.bulk_create(messages)
    for message, (created_at, updated_at) in zip(created, stamps, strict=True):
        message.created_at, message.updated_at = created_at, updated_at
    wanted = {seq for seq in reply_to_seqs if seq is not None}
    ids = dict(
        Message.objects.filter(session_id=session_id, seq__in=wanted).values_list("seq", "pk")
    )
    for message, seq in zip(created, reply_to_seqs, strict=True):
        message.reply_to_id = ids.get(seq) if seq is not None else None
        if message.role == Message.Role.ASSISTANT and message.prompted_by_id is None:
            # The question a reply answers: what Retry and Regenerate run it again for (an
            # imported failed reply could not be retried: "answers no message").
            message.prompted_by_id = message.reply_to_id
    # Their own stamps and answers, without bulk_update's CASE per row (chat_platform.dbwrite).
    rows_update(Message, created, STAMPS_AND_ANSWER)
    ChatSession.objects.filter(pk=session_id, last_seq__lt=created[-1].seq).update(
        last_seq=created[-1].seq
    )
    return created


def branches_messages_import(
    *, messages: list[Message], reply_to_seqs: list[int | None]
) -> list[Message]:
    """The own messages of several imported branch chats (each already holding its copied
    prefix, ``messages_copy_prefixes``), in one batched insert: each at the seq it carries,
    keeping its own stamps, its ``reply_to`` resolved by seq in its own chat (a copied message
    or an earlier one of the batch). Then each chat's ``last_seq`` and running totals, in one
    UPDATE over all of them. Messages come finished, so no claim races them."""
    if not messages:
        return []
    stamps = [(m.created_at, m.updated_at) for m in messages]
    created = Message.objects.bulk_create(messages, batch_size=500)
    by_seq = {(m.session_id, m.seq): m.pk for m in created}
    sessions = {m.session_id for m in created}
    wanted = {
        (m.session_id, seq)
        for m, seq in zip(created, reply_to_seqs, strict=True)
        if seq is not None and (m.session_id, seq) not in by_seq
    }
    if wanted:
        by_seq.update(
            ((session_id, seq), pk)
            for session_id, seq, pk in Message.objects.filter(
                session_id__in={s for s, _ in wanted}, seq__in={q for _, q in wanted}
            ).values_list("session_id", "seq", "pk")
        )
    for message, (created_at, updated_at), seq in zip(created, stamps, reply_to_seqs, strict=True):
        # Their own stamps where they carry them (auto_now stamped them now on insert).
        message.created_at = created_at or message.created_at
        message.updated_at = updated_at or message.updated_at
        message.reply_to_id = by_seq.get((message.session_id, seq)) if seq is not None else None
    # Their own stamps and answers, without bulk_update's CASE per row (chat_platform.dbwrite).
    rows_update(Message, created, STAMPS_AND_ANSWER)
    in_context = Message.objects.filter(
        Message.in_context_q(), session_id=OuterRef("pk")
    ).order_by()
    ChatSession.objects.filter(pk__in=sessions).update(
        last_seq=Coalesce(_highest_seq(), 0),
        context_tokens=Coalesce(
            Subquery(in_context.values("session_id").annotate(t=Sum("token_count")).values("t")),
            0,
        ),
        context_messages=Coalesce(
            Subquery(in_context.values("session_id").annotate(n=Count("id")).values("n")), 0
        ),
    )
    return created


# --- history a client already holds (the OpenAI-compatible API) -------------------------------


def history_append(*, session: ChatSession, messages: list[dict[str, Any]]) -> list[Message]:
    """Store finished turns an API client sent as its conversation's history (``role``,
    ``content``, ``token_count`` each; optionally ``kind``, ``client_id`` and the tool protocol's
    ``tool_calls``, ``tool_call_id``, ``tool_name``), after the session's last message:
    consecutive seqs from one ``allocate_seqs``, counted in the running totals like any
    finished chat message."""
    if not messages:
        return []
    tokens = sum(m["token_count"] for m in messages)
    row = allocate_seqs(
        session_id=session.pk,
        count=len(messages),
        context_tokens=tokens,
        context_messages=len(messages),
    )
    first = row.last_seq - len(messages) + 1
    session.last_seq = row.last_seq
    session.context_tokens, session.context_messages = row.context_tokens, row.context_messages
    return Message.objects.bulk_create(
        [
            Message(
                session=session,
                seq=first + i,
                role=m["role"],
                kind=m.get("kind", Message.Kind.CHAT),
                content=m["content"],
                status=Message.Status.COMPLETE,
                token_count=m["token_count"],
                client_id=m.get("client_id", ""),
                tool_calls=m.get("tool_calls", []),
                tool_call_id=m.get("tool_call_id", ""),
                tool_name=m.get("tool_name", ""),
            )
            for i, m in enumerate(messages)
        ]
    )
