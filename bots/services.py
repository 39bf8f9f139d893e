"""Writes for bots, sessions and messages. Validate (check_*), then do (do_*), then notify.

The chat turn itself lives in ``bots.turn``; this module writes the user's message and the pending
reply and schedules the turn once the transaction commits.
"""

import re
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Sum
from django.utils import timezone

from bots import dispatch, realtime
from bots.bot_validation import check_bot_settings
from bots.models import Bot, ChatSession, Message
from bots.queries import (
    bot_get_for_edit,
    bot_get_for_user,
    message_get_for_user,
    session_get_for_use,
    session_get_for_user,
)
from chat_platform.dbwrite import (
    instance_from_row,
    raw_rows,
    select_columns,
    update_returning,
    update_returning_sql,
)
from chat_platform.errors import (
    CompactionBusy,
    ContextTooLarge,
    PayloadTooLarge,
    ServiceUnavailable,
    ValidationFailed,
)
from chat_platform.llm.tokens import count_message_tokens
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from compaction.engine import RunResult, compaction_manual
from compaction.pipeline import context_fixed_fits, context_measure, context_precheck
from compaction.services import compaction_notice_text, context_notify

log = structlog.get_logger(__name__)

BOT_FIELDS = (
    "name",
    "system_prompt",
    "model",
    "api_base",
    "api_key_env",
    "temperature",
    "max_output_tokens",
    "context_window",
    "is_shared",
    "compaction_enabled",
    "compaction_threshold",
    "compaction_kept_percent",
    "compaction_model",
    "compaction_fallback_extractive",
    "memory_index_size",
    "recall_enabled",
)


def _full_clean(instance: Any, **kwargs: Any) -> None:
    try:
        instance.full_clean(**kwargs)
    except DjangoValidationError as exc:
        raise ValidationFailed(details=exc.message_dict) from None


# --- bots -------------------------------------------------------------------------------------


def bot_create(*, owner: AbstractBaseUser, **fields: Any) -> Bot:
    """The owner is the acting user: what they may set (api_base) depends on them."""
    unknown = set(fields) - set(BOT_FIELDS)
    if unknown:
        raise ValidationFailed(details={name: ["Unknown field."] for name in sorted(unknown)})
    bot = Bot(owner=owner, **fields)
    _full_clean(bot, exclude=["owner"])
    check_bot_settings(user=owner, bot=bot, previous_api_base=None, changed=set(fields))
    bot.save()
    log.info("bot_created", bot_id=bot.pk, owner_id=owner.pk, model=bot.model)
    return bot


def bot_update(*, user: AbstractBaseUser, bot_id: object, **fields: Any) -> Bot:
    unknown = set(fields) - set(BOT_FIELDS)
    if unknown:
        raise ValidationFailed(details={name: ["Unknown field."] for name in sorted(unknown)})
    bot = bot_get_for_edit(user=user, bot_id=bot_id)
    previous_api_base = bot.api_base
    changed = {name for name, value in fields.items() if getattr(bot, name) != value}
    for name, value in fields.items():
        setattr(bot, name, value)
    _full_clean(bot, exclude=["owner"])
    check_bot_settings(user=user, bot=bot, previous_api_base=previous_api_base, changed=changed)
    bot.save(update_fields=[*fields, "api_base_approved", "models_approved", "updated_at"])
    return bot


def bot_delete(*, user: AbstractBaseUser, bot_id: object) -> None:
    bot = bot_get_for_edit(user=user, bot_id=bot_id)
    bot.delete()


# --- sessions ---------------------------------------------------------------------------------


def session_create(*, user: AbstractBaseUser, bot_id: object, title: str = "") -> ChatSession:
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    session = ChatSession(user=user, bot=bot, title=title or "")
    _full_clean(session, exclude=["user", "bot"])
    session.save()
    return session


SESSION_TITLE_MAX_CHARS = 60


def session_title_from_text(text: str) -> str:
    """A chat's default title: the first non-blank line of its first message, whitespace
    collapsed, cut at a word boundary to at most ``SESSION_TITLE_MAX_CHARS`` characters."""
    line = next((part for part in text.splitlines() if part.strip()), "")
    words = " ".join(line.split())
    if len(words) <= SESSION_TITLE_MAX_CHARS:
        return words
    cut = words[: SESSION_TITLE_MAX_CHARS - 1]
    if words[len(cut)] != " " and " " in cut[SESSION_TITLE_MAX_CHARS // 2 :]:
        cut = cut.rsplit(" ", 1)[0]
    return cut.rstrip(" .,;:") + "…"


def session_rename(*, user: AbstractBaseUser, session_id: object, title: object) -> ChatSession:
    session = session_get_for_user(user=user, session_id=session_id)
    if not isinstance(title, str):
        raise ValidationFailed(details={"title": ["A title must be text."]})
    session.title = " ".join(title.split())
    _full_clean(session, exclude=["user", "bot"])
    session.save(update_fields=["title"])  # a rename is not activity: the chat keeps its place
    return session


def do_session_title_default(*, session: ChatSession, text: str) -> None:
    """Title a blank-titled chat from its first message (a conditional UPDATE: a rename or a
    concurrent first message wins; ``updated_at`` is left alone)."""
    title = session_title_from_text(text)
    if title and ChatSession.objects.filter(pk=session.pk, title="").update(title=title):
        session.title = title


def session_delete(*, user: AbstractBaseUser, session_id: object) -> None:
    """Delete a session with everything that hangs off it (messages, summaries, records…)."""
    session = session_get_for_user(user=user, session_id=session_id)
    session.delete()


# --- messages ---------------------------------------------------------------------------------


@dataclass
class SendResult:
    user_message: Message
    assistant_message: Message | None
    created: bool
    # /compact: the notice answering the command and the compaction it ran.
    notice: Message | None = None
    compaction: Any = None
    # Whether the reply's turn reached the task queue: None until the send commits (or when
    # there is no turn to hand over), False when the broker was down (the watchdog hands it over
    # once the broker answers again).
    dispatched: bool | None = None

    @property
    def is_command(self) -> bool:
        return self.user_message.kind == Message.Kind.COMMAND


COMPACT_COMMAND = re.compile(r"^/compact(?:\s+(?P<focus>.*))?$", re.DOTALL)


def check_message_content(*, content: object, client_id: object = None) -> tuple[str, str | None]:
    if not isinstance(content, str):
        raise ValidationFailed(details={"content": ["This field is required and must be text."]})
    # Before measuring: a lone surrogate cannot even be encoded to count its bytes.
    if not text_is_storable(content):
        raise ValidationFailed(details={"content": [UNSTORABLE_MESSAGE]})
    if len(content.encode("utf-8")) > settings.MESSAGE_MAX_BYTES:
        raise PayloadTooLarge(details={"max_bytes": settings.MESSAGE_MAX_BYTES})
    if not content.strip():
        raise ValidationFailed(details={"content": ["This field may not be blank."]})
    if client_id is not None and client_id != "":
        if not isinstance(client_id, str) or len(client_id) > 100:
            raise ValidationFailed(details={"client_id": ["Must be a string of ≤ 100 chars."]})
        if not text_is_storable(client_id):
            raise ValidationFailed(details={"client_id": [UNSTORABLE_MESSAGE]})
        return content, client_id
    return content, None


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
    if counted and connection.vendor == "postgresql":
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
    claimed by a duplicate delivery, finished, or gone).

    On PostgreSQL this is one statement, the turn's first: the conditional update and the reads
    the turn needs, joined in a CTE. Elsewhere (SQLite) it is the update, then the read."""
    now = timezone.now()
    queryset = Message.objects.filter(pk=message_id, status=Message.Status.PENDING)
    values = {"status": Message.Status.STREAMING, "updated_at": now, "heartbeat_at": now}
    if connection.vendor != "postgresql":
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


def _existing_send(*, session: ChatSession, client_id: str) -> SendResult | None:
    user_message = Message.objects.filter(session=session, client_id=client_id).first()
    if user_message is None:
        return None
    reply = Message.objects.filter(reply_to=user_message).first()
    if user_message.kind == Message.Kind.COMMAND:
        return SendResult(
            user_message=user_message, assistant_message=None, created=False, notice=reply
        )
    return SendResult(user_message=user_message, assistant_message=reply, created=False)


def _exchange_open(
    *, session: ChatSession, content: str, kind: str, client_id: str | None
) -> Message | SendResult:
    """In the caller's transaction: reserve seqs n and n+1 and write the user's message at n
    (its answer takes n+1). A chat message joins the context: the session's running totals (on
    ``session`` too, as the same statement returns them) count it. A repeated client_id returns
    the first result instead."""
    tokens = count_message_tokens(content, model=session.bot.model)
    counted = tokens if kind == Message.Kind.CHAT else 0
    row = allocate_seqs(session_id=session.pk, count=2, context_tokens=counted, context_messages=1)
    if client_id:
        existing = _existing_send(session=session, client_id=client_id)
        if existing is not None:
            transaction.set_rollback(True)  # give the two seqs back: seqs stay gap-free
            return existing
    session.last_seq = row.last_seq
    session.context_tokens, session.context_messages = row.context_tokens, row.context_messages
    return Message.objects.create(
        session=session,
        seq=row.last_seq - 1,
        role=Message.Role.USER,
        kind=kind,
        content=content,
        status=Message.Status.COMPLETE,
        token_count=tokens,
        client_id=client_id or "",
    )


def do_message_pair_create(
    *, session: ChatSession, content: str, client_id: str | None
) -> SendResult:
    """Write the user message and its pending reply in one transaction (seqs n, n+1).

    With a ``client_id`` a concurrent duplicate can fail the insert: a savepoint lets the caller
    recover and return the first result. Without one nothing can, and the savepoint's two round
    trips are skipped."""
    model = session.bot.model
    with transaction.atomic(savepoint=bool(client_id)):
        opened = _exchange_open(
            session=session, content=content, kind=Message.Kind.CHAT, client_id=client_id
        )
        if isinstance(opened, SendResult):
            return opened
        user_message = opened
        reply = Message.objects.create(
            session=session,
            seq=user_message.seq + 1,
            role=Message.Role.ASSISTANT,
            kind=Message.Kind.CHAT,
            status=Message.Status.PENDING,
            reply_to=user_message,
            model=model,
        )
    return SendResult(user_message=user_message, assistant_message=reply, created=True)


def _check_fits(*, session: ChatSession, result: SendResult) -> Message | None:
    """Fail the reply at once, without a model call, if the new message can never fit.

    The user message stays stored. Returns the failed reply, or None when the turn may run.
    """
    reply = result.assistant_message
    assert reply is not None
    # ``session`` carries the running totals the exchange's own statement returned. Whether the
    # fixed part fits is told without the memory index; a refusal, rare, is measured whole for
    # its record (log, ``last_admission``).
    measure = context_measure(
        session=session, new_message=result.user_message, before_seq=reply.seq, with_index=False
    )
    if context_fixed_fits(measure):
        return None
    measure = context_measure(
        session=session, new_message=result.user_message, before_seq=reply.seq
    )
    try:
        context_precheck(measure, path="send")
    except ContextTooLarge as exc:
        Message.objects.filter(pk=reply.pk, status=Message.Status.PENDING).update(
            status=Message.Status.FAILED,
            error_code=exc.code,
            error_message=exc.message,
            finish_reason="error",
            updated_at=timezone.now(),
        )
        reply.refresh_from_db()
        return reply
    return None


def session_message_send(
    *, user: AbstractBaseUser, session_id: object, content: object, client_id: object = None
) -> SendResult:
    """Send a user message: write it and a pending reply, then run the turn after commit.

    The same ``client_id`` twice returns the first result and writes nothing.
    """
    session = session_get_for_use(user=user, session_id=session_id)
    text, cid = check_message_content(content=content, client_id=client_id)
    command = COMPACT_COMMAND.match(text.strip())
    if command:
        return session_compact_command(
            session=session, text=text, client_id=cid, focus=command["focus"] or ""
        )
    with transaction.atomic():
        try:
            result = do_message_pair_create(session=session, content=text, client_id=cid)
        except IntegrityError:
            # A concurrent request with the same client_id won the race.
            existing = _existing_send(session=session, client_id=cid) if cid else None
            if existing is None:
                raise
            result = existing
        if result.created:
            reply = result.assistant_message
            assert reply is not None
            if not session.title:
                do_session_title_default(session=session, text=text)
            rejected = _check_fits(session=session, result=result)
            # After commit: the exchange's message.created frames, then the hand-over to a worker,
            # which does not wait for those frames' round trips (a refusal's message.failed must
            # follow them, so it does).
            transaction.on_commit(
                partial(
                    realtime.notify_exchange_created,
                    [result.user_message, reply],
                    wait=rejected is not None,
                )
            )
            if rejected is None:
                transaction.on_commit(partial(_dispatch_turn, result))
            else:
                transaction.on_commit(partial(realtime.notify_message_failed, rejected))
    if not result.created:
        result = _redispatch_if_undelivered(result)
    log.info(
        "message_sent",
        session_id=session.pk,
        message_id=result.user_message.pk,
        created=result.created,
    )
    return result


def _dispatch_turn(result: SendResult) -> None:
    """After commit: hand the pending reply (the outbox row) to the task queue."""
    assert result.assistant_message is not None
    result.dispatched = dispatch.turn_dispatch(result.assistant_message.pk)


def _redispatch_if_undelivered(result: SendResult) -> SendResult:
    """A repeated client_id whose reply never reached the queue (the broker was down): try the
    hand-over again now, so a client's retry is also the way to get the reply going."""
    reply = result.assistant_message
    if reply is None:
        return result
    reply.refresh_from_db()
    if reply.status == Message.Status.PENDING and reply.dispatched_at is None:
        result.dispatched = dispatch.turn_dispatch(reply.pk)
        reply.refresh_from_db()
    return result


def session_compact_command(
    *, session: ChatSession, text: str, client_id: str | None, focus: str
) -> SendResult:
    """``/compact [focus]`` typed in chat: no bot turn. Compact now, answer with a notice.

    The command and its notice stay in the transcript; neither is ever sent to a model (only
    chat/tool kinds are).
    """
    with transaction.atomic():
        opened = _exchange_open(
            session=session, content=text, kind=Message.Kind.COMMAND, client_id=client_id
        )
        if isinstance(opened, SendResult):
            return opened
        command = opened
        transaction.on_commit(partial(realtime.notify_message_created, command))
    try:
        result = compaction_manual(session=session, focus=focus.strip())
    except CompactionBusy:
        result = RunResult("failed", "busy")
    except ServiceUnavailable:
        result = RunResult("failed", "service_unavailable")
    except Exception:  # the command is stored: it must get its notice (and seq n+1) regardless
        log.exception("compact_command_crashed", session_id=session.pk)
        result = RunResult("failed", "internal_error")
    notice = Message.objects.create(
        session=session,
        seq=command.seq + 1,
        role=Message.Role.SYSTEM,
        kind=Message.Kind.NOTICE,
        content=compaction_notice_text(result),
        status=Message.Status.COMPLETE,
        reply_to=command,
    )
    realtime.notify_message_created(notice)
    if result.compacted:
        context_notify(session_id=session.pk)
    log.info("compact_command", session_id=session.pk, outcome=result.outcome, reason=result.reason)
    return SendResult(
        user_message=command, assistant_message=None, created=True, notice=notice, compaction=result
    )


def message_pin_set(*, user: AbstractBaseUser, message_id: object, pinned: bool) -> Message:
    message = message_get_for_user(user=user, message_id=message_id)
    if message.pinned != pinned:
        Message.objects.filter(pk=message.pk).update(pinned=pinned, updated_at=timezone.now())
        message.refresh_from_db()
    return message


def generation_stop(*, user: AbstractBaseUser, session_id: object) -> int:
    """Ask the session's running replies to stop; the turn keeps the partial text."""
    session = session_get_for_user(user=user, session_id=session_id)
    return Message.objects.filter(
        session=session,
        role=Message.Role.ASSISTANT,
        status__in=[Message.Status.PENDING, Message.Status.STREAMING],
    ).update(stop_requested=True)


def message_wait_finished(*, message_id: int, timeout: float) -> Message:
    """Block until a reply leaves pending/streaming (or the timeout passes); return it. Woken by
    the turn's finish (Redis pub/sub), not by polling the database."""
    latest: list[Message] = []

    def is_finished() -> bool:
        latest[:] = [Message.objects.get(pk=message_id)]
        return latest[0].is_finished

    realtime.wait_reply_finished(message_id, is_finished=is_finished, timeout=timeout)
    # The last check read the row: on a wake-up it is the finished reply, no second read.
    return latest[0] if latest else Message.objects.get(pk=message_id)
