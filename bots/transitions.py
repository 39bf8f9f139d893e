"""The one module that changes a message's state (and the session counters that move with it).

Every status, seq and stamp write of a message goes through here, like Zulip's ``do_*``
functions are the only writers of their rows: the turn's claim and checkpoints, its finish,
failure and interruption, seq allocation (a send's exchange, a recall exchange moving the reply
after its results), the outbox stamp, the heartbeat, stop requests, pins and compaction coverage
(``compacted_by_id``). Callers decide *when*; this module knows *how*: compare-and-set updates
(a lost race returns None or 0, never overwrites), and on PostgreSQL the raw CTEs that do a
write and its reads in one statement.

Part of the chat core: it imports only the models and the platform, so compaction and memory may
ask it too.
"""

from collections.abc import Callable
from typing import Any, TypeVar

from django.db import connection, transaction
from django.db.models import Count, Exists, F, Max, OuterRef, Q, Subquery, Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from bots.models import Bot, ChatSession, Message
from chat_platform.dbwrite import (
    fast_paths,
    instance_from_row,
    raw_rows,
    select_columns,
    update_returning,
    update_returning_sql,
)
from chat_platform.llm.tokens import count_message_tokens

T = TypeVar("T")

UNFINISHED = [Message.Status.PENDING, Message.Status.STREAMING]


def earlier_reply_unfinished() -> Exists:
    """An earlier reply of the same session is still pending or streaming (for a filter on
    ``Message``): replies of one session run one at a time, in seq order (docs/rooms.md)."""
    return Exists(
        Message.objects.filter(
            session_id=OuterRef("session_id"),
            role=Message.Role.ASSISTANT,
            status__in=UNFINISHED,
            seq__lt=OuterRef("seq"),
        )
    )


def reply_running_first(*, session_id: int) -> tuple[int, str] | None:
    """The session's earliest unfinished reply ``(id, status)``: the one running, or the one to
    run next; None when every reply has ended."""
    return (
        Message.objects.filter(
            session_id=session_id, role=Message.Role.ASSISTANT, status__in=UNFINISHED
        )
        .order_by("seq")
        .values_list("pk", "status")
        .first()
    )


# --- seqs and the session's running totals ---------------------------------------------------


def allocate_seqs(
    *, session_id: int, count: int, context_tokens: int = 0, context_messages: int = 0
) -> ChatSession:
    """Reserve ``count`` consecutive seqs: ``last_seq - count + 1`` to ``last_seq`` of the row
    returned (the UPDATE's row lock serialises concurrent senders). What the new messages add to
    the context goes into the running totals in the same statement. Returns the session row as
    it now stands, read back by that statement (no second query)."""
    values: dict[str, Any] = {"last_seq": F("last_seq") + count, "updated_at": timezone.now()}
    if context_tokens > 0:
        values["context_tokens"] = F("context_tokens") + context_tokens
        values["context_messages"] = F("context_messages") + context_messages
    (row,) = update_returning(ChatSession.objects.filter(pk=session_id), **values)
    return row


def session_context_add(*, session_id: int, tokens: int, messages: int = 1) -> None:
    """Add a message that now counts toward the context to the session's running totals."""
    if tokens <= 0:
        return
    ChatSession.objects.filter(pk=session_id).update(
        context_tokens=F("context_tokens") + tokens,
        context_messages=F("context_messages") + messages,
    )


def session_context_recount(*, session_id: int) -> tuple[int, int]:
    """Recompute the running totals from the messages (repair tool; tests check they agree)."""
    totals = Message.objects.filter(Message.in_context_q(), session_id=session_id).aggregate(
        tokens=Sum("token_count"), messages=Count("id")
    )
    tokens, messages = totals["tokens"] or 0, totals["messages"]
    ChatSession.objects.filter(pk=session_id).update(
        context_tokens=tokens, context_messages=messages
    )
    return tokens, messages


def session_context_remove(*, session_id: int, tokens: int, messages: int) -> None:
    """Take messages that left the context (compacted) out of the session's running totals."""
    ChatSession.objects.filter(pk=session_id).update(
        context_tokens=F("context_tokens") - tokens,
        context_messages=F("context_messages") - messages,
    )


# --- a send: the user's message, its pending reply, a command's notice ------------------------


def exchange_open(
    *,
    session: ChatSession,
    content: str,
    kind: str,
    client_id: str | None,
    tokens: int,
    existing: Callable[[], T | None],
    replies: int = 1,
) -> Message | T:
    """In the caller's transaction: reserve seqs n and n+1 and write the user's message at n
    (its answer takes n+1). A chat message joins the context: the session's running totals (on
    ``session`` too, as the same statement returns them) count it. A repeated client_id returns
    what ``existing()`` finds instead, and gives the two seqs back (seqs stay gap-free).

    ``replies``: how many answers to reserve (a room where several bots answer): seqs n+1 to
    n+replies."""
    counted = tokens if kind == Message.Kind.CHAT else 0
    row = allocate_seqs(
        session_id=session.pk, count=1 + replies, context_tokens=counted, context_messages=1
    )
    if client_id:
        found = existing()
        if found is not None:
            transaction.set_rollback(True)  # give the two seqs back: seqs stay gap-free
            return found
    session.last_seq = row.last_seq
    session.context_tokens, session.context_messages = row.context_tokens, row.context_messages
    return Message.objects.create(
        session=session,
        seq=row.last_seq - replies,
        role=Message.Role.USER,
        kind=kind,
        content=content,
        status=Message.Status.COMPLETE,
        token_count=tokens,
        client_id=client_id or "",
    )


def reply_pending_create(
    *,
    user_message: Message,
    model: str,
    bot: Bot | None = None,
    offset: int = 1,
    charged_to: str = "",
) -> Message:
    """The pending reply at the seq its user message reserved (the outbox row of the turn),
    spoken by ``bot`` (default: the session's). In a room where several bots answer, the first
    (``offset`` 1) is *the* reply to the message; the others follow it at the next reserved
    seqs, answering the same message with the replies before them in view.

    ``charged_to``: the daily-limit subject of the API key the reply was asked for with
    (``Message.charged_to``), charged by its turn beside the user's own."""
    session = user_message.session
    reply = Message(
        session=session,
        seq=user_message.seq + offset,
        role=Message.Role.ASSISTANT,
        kind=Message.Kind.CHAT,
        status=Message.Status.PENDING,
        reply_to=user_message if offset == 1 else None,
        prompted_by=user_message,
        model=model,
        charged_to=charged_to,
    )
    reply.bot = bot if bot is not None else session.bot
    reply.save(force_insert=True)
    return reply


def reply_handover_create(*, after: Message, bot: Bot, hop: int, prompted_by_id: int) -> Message:
    """Rooms: a pending reply of ``bot`` at the session's next seq, handed the floor by the
    reply ``after`` (which mentioned it): the ``hop``-th bot-triggered reply of its chain. It
    is charged where ``after`` was (a key's send pays for the hand-overs it set off)."""
    row = allocate_seqs(session_id=after.session_id, count=1)
    reply = Message(
        session_id=after.session_id,
        seq=row.last_seq,
        role=Message.Role.ASSISTANT,
        kind=Message.Kind.CHAT,
        status=Message.Status.PENDING,
        prompted_by_id=prompted_by_id,
        hop=hop,
        model=bot.model,
        charged_to=after.charged_to,
    )
    reply.bot = bot
    reply.save(force_insert=True)
    return reply


def room_notice_create(*, session_id: int, content: str) -> Message:
    """Rooms: a notice at the session's next seq (a bound stopped a chain of hand-overs)."""
    row = allocate_seqs(session_id=session_id, count=1)
    return Message.objects.create(
        session_id=session_id,
        seq=row.last_seq,
        role=Message.Role.SYSTEM,
        kind=Message.Kind.NOTICE,
        content=content,
        status=Message.Status.COMPLETE,
    )


def notice_create(*, command: Message, content: str) -> Message:
    """The notice answering a command, at the seq the command reserved."""
    return Message.objects.create(
        session=command.session,
        seq=command.seq + 1,
        role=Message.Role.SYSTEM,
        kind=Message.Kind.NOTICE,
        content=content,
        status=Message.Status.COMPLETE,
        reply_to=command,
    )


def reply_dispatched(*, message_id: int) -> None:
    """The outbox stamp: the reply's turn reached the task queue."""
    Message.objects.filter(pk=message_id).update(dispatched_at=timezone.now())


def reply_rerun(*, message_id: int, model: str) -> bool:
    """``failed | interrupted -> pending``, as new: a Retry runs the reply again for the same user
    message, at the same seq, with ``model`` (the bot's settings may have been fixed since); its
    partial text, error and usage are cleared, and an interrupted reply's text leaves the
    session's running totals. False if it is no longer failed or interrupted
    (a concurrent Retry won)."""
    with transaction.atomic():
        row = (
            Message.objects.filter(
                pk=message_id,
                status__in=[Message.Status.FAILED, Message.Status.INTERRUPTED],
                kind=Message.Kind.CHAT,
            )
            .values("session_id", "status", "token_count", "compacted_by_id")
            .first()
        )
        if row is None:
            return False
        updated = Message.objects.filter(pk=message_id, status=row["status"]).update(
            status=Message.Status.PENDING,
            model=model,
            content="",
            token_count=0,
            error_code="",
            error_message="",
            finish_reason="",
            prompt_tokens=None,
            completion_tokens=None,
            tool_calls=[],
            stop_requested=False,
            dispatched_at=None,
            heartbeat_at=None,
            updated_at=timezone.now(),
        )
        counted = row["status"] == Message.Status.INTERRUPTED and row["token_count"] > 0
        if updated and counted and row["compacted_by_id"] is None:
            session_context_remove(
                session_id=row["session_id"], tokens=row["token_count"], messages=1
            )
        return bool(updated)


def message_client_id_set(*, message_id: int, client_id: str) -> None:
    """A Retry sent as the question again with a new ``client_id``: the question answers to that
    id from now on, so the same send repeated (a client confirming it) finds this exchange."""
    Message.objects.filter(pk=message_id).update(client_id=client_id)


def reply_refuse(*, message_id: int, code: str, message: str) -> bool:
    """``pending -> failed`` without a model call (the message can never fit)."""
    return bool(
        Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
            status=Message.Status.FAILED,
            error_code=code,
            error_message=message,
            finish_reason="error",
            updated_at=timezone.now(),
        )
    )


# --- the turn: claim, heartbeat, checkpoint, finish, recall exchange, stop --------------------


def message_finish(
    *, message_id: int, from_status: str, counted: bool, **values: Any
) -> Message | None:
    """Move a message from ``from_status`` to where ``values`` say (a conditional update) and,
    if that won and ``counted`` (its text now counts toward the context), add its tokens to the
    session's running totals, atomically. Returns the fresh row, or None if the update lost.

    On PostgreSQL both writes are one statement: one round trip and one commit, the last write
    of a turn before its ``message.completed`` frame. Elsewhere (SQLite, embedded mode) they are
    the same two writes in one transaction."""
    queryset = Message.objects.filter(pk=message_id, status=from_status)
    if counted and connection.vendor == "postgresql" and fast_paths():
        compiled = update_returning_sql(queryset, **values)
        if compiled is None:
            return None
        sql, params = compiled
        quote = connection.ops.quote_name
        table = quote(ChatSession._meta.db_table)
        tokens, messages = quote("context_tokens"), quote("context_messages")
        # Identifiers from the models, values in ``params``: nothing here comes from a user.
        rows = raw_rows(
            queryset,
            f"WITH finished AS ({sql}), counted AS ("  # noqa: S608
            f"UPDATE {table} SET {tokens} = {table}.{tokens} + finished.{quote('token_count')}, "
            f"{messages} = {table}.{messages} + 1 FROM finished "
            f"WHERE {table}.{quote('id')} = finished.{quote('session_id')} "
            f"AND finished.{quote('token_count')} > 0"
            ") SELECT * FROM finished",
            params,
        )
    elif counted:
        with transaction.atomic():
            rows = update_returning(queryset, **values)
            if rows:
                session_context_add(session_id=rows[0].session_id, tokens=rows[0].token_count)
    else:
        rows = update_returning(queryset, **values)
    return rows[0] if rows else None


def reply_claim(*, message_id: int) -> Message | None:
    """Claim a pending reply for its turn (``pending -> streaming``, heartbeat stamped) and
    return it with its session, bot and user message loaded; None if it is not pending (already
    claimed by a duplicate delivery, finished, or gone) or if it is queued: an earlier reply of
    its session is still pending or streaming (that one's end hands this one over,
    ``turns.dispatch.turn_dispatch_next``). So a message sent while a reply streams is answered
    after it, seeing it.

    On PostgreSQL this is one statement, the turn's first: the conditional update and the reads
    the turn needs, joined in a CTE. Elsewhere (SQLite) it is the update, then the read."""
    now = timezone.now()
    queryset = Message.objects.filter(pk=message_id, status=Message.Status.PENDING).exclude(
        earlier_reply_unfinished()
    )
    values = {"status": Message.Status.STREAMING, "updated_at": now, "heartbeat_at": now}
    if connection.vendor != "postgresql" or not fast_paths():
        if not queryset.update(**values):
            return None
        return Message.objects.select_related("session__bot", "reply_to").get(pk=message_id)
    compiled = update_returning_sql(queryset, **values)
    if compiled is None:
        return None
    sql, params = compiled
    quote = connection.ops.quote_name
    sessions, bots = ChatSession._meta.db_table, Bot._meta.db_table
    # Identifiers from the models, values in ``params``: nothing here comes from a user.
    sql = (
        f"WITH claimed AS ({sql}) SELECT "  # noqa: S608
        f"{select_columns(Message, 'claimed')}, {select_columns(ChatSession, 's')}, "
        f"{select_columns(Bot, 'b')}, {select_columns(Message, 'r')} FROM claimed "
        f"JOIN {quote(sessions)} s ON s.{quote('id')} = claimed.{quote('session_id')} "
        f"JOIN {quote(bots)} b ON b.{quote('id')} = s.{quote('bot_id')} "
        f"LEFT JOIN {quote(Message._meta.db_table)} r "
        f"ON r.{quote('id')} = claimed.{quote('reply_to_id')}"
    )
    with transaction.mark_for_rollback_on_error(), connection.cursor() as cursor:
        cursor.execute(sql, params)
        row = cursor.fetchone()
    if row is None:
        return None
    sizes = [len(model._meta.concrete_fields) for model in (Message, ChatSession, Bot)]
    ends = [sizes[0], sizes[0] + sizes[1], sum(sizes)]
    reply = instance_from_row(Message, row[: ends[0]])
    session = instance_from_row(ChatSession, row[ends[0] : ends[1]])
    session.bot = instance_from_row(Bot, row[ends[1] : ends[2]])
    reply.session = session
    reply.reply_to = (
        instance_from_row(Message, row[ends[2] :]) if reply.reply_to_id is not None else None
    )
    return reply


def reply_checkpoint(*, message_id: int, content: str) -> None:
    """Save a streaming reply's partial text: if the worker dies, the watchdog keeps it."""
    Message.objects.filter(pk=message_id, status=Message.Status.STREAMING).update(
        content=content, updated_at=timezone.now()
    )


def replies_heartbeat(*, message_ids: list[int]) -> None:
    """The running turns of this process are alive."""
    Message.objects.filter(pk__in=message_ids, status=Message.Status.STREAMING).update(
        heartbeat_at=timezone.now()
    )


def recall_exchange_store(
    *, reply: Message, call: dict[str, Any], results: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """Store a recall exchange before its reply (caller's transaction): the request (``call``:
    the assistant ``tool`` message's fields) takes the reply's seq, one ``tool`` message per
    result follows, and the reply moves after them; the stored messages join the context.

    Messages sent while the reply ran (queued exchanges, after it by seq) move up by as many
    seqs, so they stay after the reply they wait for: seqs stay gap-free and in the order the
    model sees them. Returns the stored messages and the moved ones (re-read, for their frames).
    """
    session = reply.session
    count = len(results) + 1
    # The session row stays locked until the caller commits: no send slips in meanwhile.
    allocate_seqs(session_id=session.pk, count=count)
    old_seq = reply.seq
    later = list(
        Message.objects.filter(session_id=session.pk, seq__gt=old_seq)
        .order_by("-seq")
        .values_list("pk", flat=True)
    )
    # Highest first, one row at a time: each move lands on a seq already free, so the unique
    # (session, seq) constraint holds after every statement.
    for pk in later:
        Message.objects.filter(pk=pk).update(seq=F("seq") + count)
    Message.objects.filter(pk=reply.pk).update(seq=old_seq + count)
    stored = [
        Message.objects.create(
            session=session,
            seq=old_seq,
            role=Message.Role.ASSISTANT,
            kind=Message.Kind.TOOL,
            status=Message.Status.COMPLETE,
            bot_id=reply.bot_id,
            **call,
        )
    ]
    for offset, result in enumerate(results):
        stored.append(
            Message.objects.create(
                session=session,
                seq=old_seq + 1 + offset,
                role=Message.Role.TOOL,
                kind=Message.Kind.TOOL,
                status=Message.Status.COMPLETE,
                bot_id=reply.bot_id,
                **result,
            )
        )
    session_context_add(
        session_id=session.pk,
        tokens=sum(m.token_count for m in stored),
        messages=len(stored),
    )
    moved = list(Message.objects.filter(pk__in=later).order_by("seq")) if later else []
    return stored, moved


def reply_interrupt(*, message_id: int, still: Q, error_message: str) -> Message | None:
    """Mark one unfinished reply interrupted if it still matches ``still`` (a racing turn that
    finished meanwhile wins); its partial text joins the context like any finished text.
    Returns the message as it was read (caller refreshes), or None if it did not change."""
    with transaction.atomic():
        message = Message.objects.filter(pk=message_id).first()
        if message is None:
            return None
        tokens = (
            count_message_tokens(message.content, model=message.model) if message.content else 0
        )
        claimed = (
            Message.objects.filter(still, pk=message_id, status__in=UNFINISHED).update(
                status=Message.Status.INTERRUPTED,
                token_count=tokens,
                error_code="interrupted",
                error_message=error_message,
                finish_reason="error",
                updated_at=timezone.now(),
            )
            > 0
        )
        if not claimed:
            return None
        session_context_add(session_id=message.session_id, tokens=tokens)
        return message


def replies_stop_request(*, session: ChatSession) -> int:
    """Ask the session's running reply to stop (the earliest unfinished one: replies run one at
    a time); the turn keeps the partial text. Replies queued behind it stay queued and run
    next."""
    first = reply_running_first(session_id=session.pk)
    if first is None:
        return 0
    return Message.objects.filter(pk=first[0], status__in=UNFINISHED).update(stop_requested=True)


def message_pinned_set(*, message_id: int, pinned: bool) -> None:
    Message.objects.filter(pk=message_id).update(pinned=pinned, updated_at=timezone.now())


# --- compaction coverage ----------------------------------------------------------------------


def session_one_bot_hold(*, session_id: int) -> bool:
    """A one-bot compaction's commit (caller's transaction), first of its writes: the session
    row locked, as ``participant_add`` locks it before it turns a session into a room and moves
    its coverage, so the two run one after the other and take their locks in the same order (the
    session row, then summaries, messages and coverage). True while the session is still one
    bot's; False when a bot joined meanwhile and made it a room: one-bot coverage
    (``compacted_by_id``) written now would cover nothing for any seat. One statement."""
    is_room = (
        ChatSession.objects.select_for_update()
        .filter(pk=session_id)
        .values_list("is_room", flat=True)
        .first()
    )
    return is_room is False


def messages_compact(*, message_ids: list[int], summary_id: int) -> int:
    """Conditional claim of exactly these messages for a new summary: one pinned, compacted or
    changed meanwhile is left alone (the caller compares the count and rolls back)."""
    return Message.objects.filter(
        pk__in=message_ids,
        compacted_by_id__isnull=True,
        status=Message.Status.COMPLETE,
        pinned=False,
    ).update(compacted_by_id=summary_id)


def messages_room_uncompact(*, session_id: int) -> tuple[int, int]:
    """A session becoming a room (caller's transaction, after compaction has written the
    coverage as rows per bot): its messages leave ``compacted_by_id`` empty, as a room's do, and
    count in the session's running totals again (every bot's own totals subtract what its
    summaries cover). Returns the (tokens, messages) added."""
    covered = Message.objects.filter(session_id=session_id, compacted_by_id__isnull=False)
    totals = covered.filter(
        kind__in=[Message.Kind.CHAT, Message.Kind.TOOL],
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
        token_count__gt=0,
    ).aggregate(tokens=Sum("token_count"), messages=Count("id"))
    covered.update(compacted_by_id=None)
    tokens, messages = totals["tokens"] or 0, totals["messages"]
    session_context_add(session_id=session_id, tokens=tokens, messages=messages)
    return tokens, messages


def messages_compaction_move(*, from_summary_ids: list[int], to_summary_id: int) -> int:
    """Fusion: the messages of the parents are now covered by the fused summary."""
    return Message.objects.filter(compacted_by_id__in=from_summary_ids).update(
        compacted_by_id=to_summary_id
    )


def messages_uncompact(*, summary_id: int) -> tuple[int, int]:
    """Undo: the messages ``summary_id`` covers are no longer covered, and those a model may see
    (``Message.in_context_q``) are added back to the session's running totals. Returns the
    (tokens, messages) that came back into the context. Caller's transaction."""
    covered = Message.objects.filter(compacted_by_id=summary_id)
    first = covered.values("session_id").first()
    back = covered.filter(
        kind__in=[Message.Kind.CHAT, Message.Kind.TOOL],
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
        token_count__gt=0,
    ).aggregate(tokens=Sum("token_count"), messages=Count("id"))
    covered.update(compacted_by_id=None)
    tokens, messages = back["tokens"] or 0, back["messages"]
    if first is not None:
        session_context_add(session_id=first["session_id"], tokens=tokens, messages=messages)
    return tokens, messages


def messages_compaction_restore(
    *, from_summary_id: int, to_summary_id: int, first_seq: int, last_seq: int
) -> int:
    """Undo of a fusion: the fused summary's messages in one parent's span point at that
    parent again (the reverse of ``messages_compaction_move``)."""
    return Message.objects.filter(
        compacted_by_id=from_summary_id, seq__gte=first_seq, seq__lte=last_seq
    ).update(compacted_by_id=to_summary_id)


# --- branches: a chat that starts as a copy of another's first messages ------------------------


def messages_copy_prefix(*, source_id: int, target: ChatSession, before_seq: int) -> int:
    """Copy ``source_id``'s messages before ``before_seq`` into the empty chat ``target``, as
    they are (seqs, text, counts, timestamps, pins), in one INSERT … SELECT: no message text
    passes through Python, so a long history copies in one statement. A copy's ``reply_to``
    points to the copied message; coverage (``compacted_by_id``) starts empty (the caller
    carries over the summaries that cover only copied messages). The target's ``last_seq`` is
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
        "compacted_by_id": "NULL",
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


def messages_coverage_copy(
    *, source_id: int, target_id: int, from_summary_id: int, to_summary_id: int
) -> int:
    """A carried-over summary covers, in the branch, the copies of what it covered."""
    seqs = Message.objects.filter(session_id=source_id, compacted_by_id=from_summary_id).values(
        "seq"
    )
    return Message.objects.filter(session_id=target_id, seq__in=seqs).update(
        compacted_by_id=to_summary_id
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
    Message.objects.bulk_update(created, ["created_at", "updated_at", "reply_to"])
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
    Message.objects.bulk_update(created, ["created_at", "updated_at", "reply_to"], batch_size=500)
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
