"""The one module that changes a message's state (and the session counters that move with it).

Every status, seq and stamp write of a message goes through here, like Zulip's ``do_*``
functions are the only writers of their rows: the turn's claim and checkpoints, its finish,
failure and interruption, seq allocation (a send's exchange), the outbox stamp, the heartbeat,
stop requests and pins. Two siblings complete it: ``bots.bulk`` the bulk copies and imports (a
branch's prefix, an imported history, an API client's history), ``bots.exchanges`` a recall or
tool exchange stored before its reply (moving the reply after its results). What a summary
covers is compaction's alone (``compaction.engine.coverage``): no column of a message says it.
Callers decide *when*; these modules know *how*: compare-and-set updates (a lost race returns
None or 0, never overwrites). This module is the reference implementation, the plain ORM; on
PostgreSQL the claim and a counted finish run as one statement each (``bots.fast_paths``, built
on the same conditional updates and tested against these).

Part of the chat core: it imports only the models and the platform, so compaction and memory may
ask it too.
"""

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import transaction
from django.db.models import Count, Exists, F, OuterRef, Q, QuerySet, Sum
from django.utils import timezone

from bots import fast_paths
from bots.models import Bot, ChatSession, Message
from chat_platform.compiled import CompiledValues
from chat_platform.dbwrite import fast_paths as fast_paths_on
from chat_platform.dbwrite import update_returning
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


def _running_first(session_id: int) -> Any:
    return (
        Message.objects.filter(
            session_id=session_id, role=Message.Role.ASSISTANT, status__in=UNFINISHED
        )
        .order_by("seq")
        .values_list("pk", "status")[:1]
    )


# Read as every turn ends: compiled once per process (chat_platform/compiled.py).
_RUNNING_FIRST = CompiledValues(_running_first, name="reply_running_first")


def reply_running_first(*, session_id: int) -> tuple[int, str] | None:
    """The session's earliest unfinished reply ``(id, status)``: the one running, or the one to
    run next; None when every reply has ended."""
    rows = _RUNNING_FIRST.rows(session_id=session_id)
    return rows[0] if rows else None


# --- seqs and the session's running totals ---------------------------------------------------


def allocate_seqs(
    *, session_id: int, count: int, context_tokens: int = 0, context_messages: int = 0
) -> ChatSession:
    """Reserve ``count`` consecutive seqs: ``last_seq - count + 1`` to ``last_seq`` of the row
    returned (the UPDATE's row lock serialises concurrent senders). What the new messages add to
    the context goes into the running totals in the same statement. Returns the session row as
    it now stands, read back by that statement (no second query)."""
    now = timezone.now()
    if fast_paths_on():  # the statement built once per process (~0.4 ms of CPU a send)
        return fast_paths.seqs_allocate(
            _seqs_update, session_id=session_id, count=count, now=now,
            tokens=context_tokens, messages=context_messages,
        )  # fmt: skip
    queryset, values = _seqs_update(session_id, count, now, context_tokens, context_messages)
    (row,) = update_returning(queryset, **values)
    return row


def _seqs_update(
    session_id: int, count: int, now: Any, tokens: int = 0, messages: int = 0
) -> tuple[QuerySet, dict[str, Any]]:
    values: dict[str, Any] = {"last_seq": F("last_seq") + count, "updated_at": now}
    if tokens > 0:
        values["context_tokens"] = F("context_tokens") + tokens
        values["context_messages"] = F("context_messages") + messages
    return ChatSession.objects.filter(pk=session_id), values


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
    """Take messages that left the context out of the session's running totals."""
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
    answers: Sequence[tuple[Bot, str]] = (),
    charged_to: str = "",
) -> tuple[Message, list[Message]] | T:
    """In the caller's transaction: reserve seqs n and n+1 and write the user's message at n
    (its answer takes n+1). A chat message joins the context: the session's running totals (on
    ``session`` too, as the same statement returns them) count it. A repeated client_id returns
    what ``existing()`` finds instead, and gives the two seqs back (seqs stay gap-free).

    ``replies``: how many answers to reserve (a room where several bots answer): seqs n+1 to
    n+replies. ``answers``: the pending replies to write with the message, ``(bot, model)`` in
    answer order from n+1 (``reply_pending``), in one statement with it on PostgreSQL
    (``exchange_insert``). Returns the message and those replies."""
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
    question = Message(
        session=session,
        seq=row.last_seq - replies,
        role=Message.Role.USER,
        kind=kind,
        content=content,
        status=Message.Status.COMPLETE,
        token_count=tokens,
        client_id=client_id or "",
    )
    pending = [
        reply_pending(question, model=model, bot=bot, offset=offset, charged_to=charged_to)
        for offset, (bot, model) in enumerate(answers, start=1)
    ]
    exchange_insert(question, pending)
    return question, pending


def exchange_insert(question: Message, replies: Sequence[Message]) -> None:
    """Write a user message and the pending replies answering it (unsaved instances built with
    it, ``reply_pending``): on PostgreSQL one statement (``bots.fast_paths.exchange_insert``),
    else one ``INSERT`` each, as ``save()`` writes them. Either way the ids follow the order
    given, the question's first."""
    if replies and fast_paths.enabled() and fast_paths.exchange_insert(question, replies):
        return
    question.save(force_insert=True)
    for reply in replies:
        reply.save(force_insert=True)


def reply_pending(
    user_message: Message,
    *,
    model: str,
    bot: Bot | None = None,
    offset: int = 1,
    charged_to: str = "",
) -> Message:
    """The pending reply at the seq its user message reserved (the outbox row of the turn),
    spoken by ``bot`` (default: the session's), unsaved. In a room where several bots answer,
    the first (``offset`` 1) is *the* reply to the message; the others follow it at the next
    reserved seqs, answering the same message with the replies before them in view.

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
    return reply


def reply_pending_create(
    *,
    user_message: Message,
    model: str,
    bot: Bot | None = None,
    offset: int = 1,
    charged_to: str = "",
) -> Message:
    """``reply_pending``, written (a reply asked for again: ``reply_again_open``)."""
    reply = reply_pending(user_message, model=model, bot=bot, offset=offset, charged_to=charged_to)
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
    """The notice answering a command, at the seq the command reserved: the one after the
    command's seq as it is now. A recall or tool round of a reply before it, stored while the
    command ran, moves it and its reserved seq up (``bots.exchanges``); the session row, locked
    here as there, keeps the read and the write together."""
    with transaction.atomic():
        locked = ChatSession.objects.select_for_update().filter(pk=command.session_id)
        locked.values_list("pk").first()
        command.seq = Message.objects.values_list("seq", flat=True).get(pk=command.pk)
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
    now = timezone.now()
    if fast_paths.enabled():  # built once per process (every send's last statement)
        fast_paths.update_run(_dispatched, name="reply_dispatched", message_id=message_id, now=now)
        return
    queryset, values = _dispatched(message_id, now)
    queryset.update(**values)


def _dispatched(message_id: int, now: Any) -> tuple[QuerySet, dict[str, Any]]:
    return Message.objects.filter(pk=message_id), {"dispatched_at": now}


def reply_rerun(*, message_id: int, model: str, charged_to: str = "") -> bool:
    """``failed | interrupted -> pending``, as new: a Retry runs the reply again for the same user
    message, at the same seq, with ``model`` (the bot's settings may have been fixed since); its
    partial text, error and usage are cleared, and an interrupted reply's text leaves the
    session's running totals. ``charged_to``: the API key the Retry came through (blank: none),
    charged like a send's (``Message.charged_to``). False if it is no longer failed or
    interrupted (a concurrent Retry won)."""
    with transaction.atomic():
        row = (
            Message.objects.filter(
                pk=message_id,
                status__in=[Message.Status.FAILED, Message.Status.INTERRUPTED],
                kind=Message.Kind.CHAT,
            )
            .values("session_id", "status", "token_count")
            .first()
        )
        if row is None:
            return False
        updated = Message.objects.filter(pk=message_id, status=row["status"]).update(
            status=Message.Status.PENDING,
            model=model,
            charged_to=charged_to,
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
        if updated and counted:
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
    if counted and fast_paths.enabled():
        rows = fast_paths.finish_counted(queryset, values)
    elif counted:
        with transaction.atomic():
            rows = update_returning(queryset, **values)
            if rows:
                session_context_add(session_id=rows[0].session_id, tokens=rows[0].token_count)
    else:
        rows = update_returning(queryset, **values)
    return rows[0] if rows else None


def claim_update(message_id: int, now: Any) -> tuple[Any, dict[str, Any]]:
    """The claim's conditional update: the pending reply, if no earlier reply of its session is
    unfinished, becomes streaming (``bots.fast_paths`` builds its one statement on this)."""
    queryset = Message.objects.filter(pk=message_id, status=Message.Status.PENDING).exclude(
        earlier_reply_unfinished()
    )
    return queryset, {"status": Message.Status.STREAMING, "updated_at": now, "heartbeat_at": now}


def reply_claim(*, message_id: int) -> Message | None:
    """Claim a pending reply for its turn (``pending -> streaming``, heartbeat stamped) and
    return it with its session, bot, the session's user and user message loaded; None if it is
    not pending (already claimed by a duplicate delivery, finished, or gone) or if it is queued:
    an earlier reply of its session is still pending or streaming (that one's end hands this one
    over, ``turns.dispatch.turn_dispatch_next``). So a message sent while a reply streams is
    answered after it, seeing it.

    On PostgreSQL this is one statement, the turn's first: the conditional update and the reads
    the turn needs, joined in a CTE. Elsewhere (SQLite) it is the update, then the read."""
    now = timezone.now()
    if fast_paths.enabled():
        return fast_paths.reply_claim(message_id=message_id, now=now, update=claim_update)
    queryset, values = claim_update(message_id, now)
    if not queryset.update(**values):
        return None
    return Message.objects.select_related("session__bot", "session__user", "reply_to").get(
        pk=message_id
    )


def checkpoint_update(message_id: int, content: str, now: Any) -> tuple[Any, dict[str, Any]]:
    """The checkpoint's conditional update: a streaming reply's partial text (``bots.fast_paths``
    builds it once per process)."""
    queryset = Message.objects.filter(pk=message_id, status=Message.Status.STREAMING)
    return queryset, {"content": content, "updated_at": now}


def reply_checkpoint(*, message_id: int, content: str) -> None:
    """Save a streaming reply's partial text: if the worker dies, the watchdog keeps it. Every
    ``CHECKPOINT_SECONDS`` of a stream (``turns.stream``)."""
    now = timezone.now()
    if fast_paths.enabled():
        fast_paths.reply_checkpoint(
            message_id=message_id, content=content, now=now, update=checkpoint_update
        )
        return
    queryset, values = checkpoint_update(message_id, content, now)
    queryset.update(**values)


def replies_heartbeat(*, message_ids: list[int]) -> None:
    """The running turns of this process are alive."""
    Message.objects.filter(pk__in=message_ids, status=Message.Status.STREAMING).update(
        heartbeat_at=timezone.now()
    )


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
