"""A user's message: write it and its pending reply, hand the turn over after commit; the
``/compact`` command. Pins, stop requests and waiting for a reply are ``turns.services.message``.
Every message write goes through ``bots.transitions``."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction

from attachments.models import Attachment
from attachments.queries import image_tokens_named
from attachments.services import (
    check_attachments_for_send,
    do_attachments_claim,
    message_text_with,
)
from bots import realtime, transitions
from bots.models import Bot, ChatSession, Message
from bots.queries import (
    bot_usable_in,
    participants_of,
    room_snapshot_take,
    session_get_for_use,
    session_usable,
    user_bot_scope,
    user_scope_subject,
)
from chat_platform.errors import (
    CompactionBusy,
    QuotaExceeded,
    ServiceUnavailable,
    ValidationFailed,
)
from chat_platform.heavy import heavy_request
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens
from compaction.engine import RunResult, compaction_manual
from compaction.pipeline import seat_key
from compaction.queries import manual_run_between
from compaction.services import compaction_notice_text, context_notify
from connections import usage
from turns import dispatch
from turns.room import answering_bots, compact_seat
from turns.services.content import COMPACT_COMMAND, check_message_content
from turns.services.fits import reply_refused_if_too_large
from turns.services.participants import reply_as_bot
from turns.services.retry import send_is_retry
from turns.services.session import do_session_title_default

log = structlog.get_logger(__name__)


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
    # Rooms: every reply the message asked for, in answer order (``assistant_message`` is the
    # first); empty in a one-bot session.
    replies: list[Message] = field(default_factory=list)

    @property
    def is_command(self) -> bool:
        return self.user_message.kind == Message.Kind.COMMAND


def _existing_send(*, session: ChatSession, client_id: str) -> SendResult | None:
    user_message = Message.objects.filter(session=session, client_id=client_id).first()
    if user_message is None:
        return None
    reply = Message.objects.filter(reply_to=user_message).first()
    if user_message.kind == Message.Kind.COMMAND:  # its notice and what it compacted
        run = manual_run_between(command=user_message, notice=reply)
        return SendResult(user_message, None, created=False, notice=reply, compaction=run)
    return SendResult(user_message=user_message, assistant_message=reply, created=False)


def _exchange_open(
    *,
    session: ChatSession,
    content: str,
    kind: str,
    client_id: str | None,
    replies: int = 1,
    answers: Sequence[tuple[Bot, str]] = (),
    charged_to: str = "",
    tokens: int | None = None,
) -> tuple[Message, list[Message]] | SendResult:
    """In the caller's transaction: the user's message at seq n, n+1 reserved for its answer,
    and the pending ``answers`` written with it (``transitions.exchange_open``); a repeated
    client_id returns the first result instead. ``tokens``: its count, made before the
    transaction (``message_tokens``); counted here when not given."""
    return transitions.exchange_open(
        session=session,
        content=content,
        kind=kind,
        client_id=client_id,
        tokens=message_tokens(session, content, kind=kind) if tokens is None else tokens,
        existing=partial(_existing_send, session=session, client_id=client_id or ""),
        replies=replies,
        answers=answers,
        charged_to=charged_to,
    )


def message_tokens(session: ChatSession, content: str, *, kind: str = Message.Kind.CHAT) -> int:
    """A message's count: its text with the chat's model, and the images it names
    (``image_tokens_named``: those it sends, whether attached now or typed)."""
    return count_message_tokens(content, model=session.chat_model) + (
        image_tokens_named(content) if kind == Message.Kind.CHAT else 0
    )


def do_message_pair_create(
    *,
    session: ChatSession,
    content: str,
    client_id: str | None,
    answering: list[Bot] | None = None,
    attachments: Sequence[Attachment] = (),
    charged_to: str = "",
    prepared: tuple[str, int] | None = None,
) -> SendResult:
    """Write the user message and its pending reply in one transaction (seqs n, n+1); in a
    room, one pending reply per answering bot (seqs n+1…, the order they answer in). On
    PostgreSQL the message and its replies are one statement (``transitions.exchange_insert``).
    ``charged_to``: see ``connections.usage.charge_subject``.

    ``attachments`` (checked, unsent files of the session) become part of the message: their
    text in its content, so in its token count, and they are claimed by it.

    With a ``client_id`` a concurrent duplicate can fail the insert: a savepoint lets the caller
    recover and return the first result. Without one nothing can, and the savepoint's two round
    trips are skipped.

    ``prepared``: the message's text with its files and that text's count, made before the
    caller's transaction (``message_prepared``): a file's text can be megabytes, and counting
    it took ~0.5 s of SQLite's one write lock (embedded mode)."""
    bots = answering or [session.bot]
    text, tokens = prepared or message_prepared(session, content, attachments)
    with transaction.atomic(savepoint=bool(client_id)):
        opened = _exchange_open(
            session=session,
            content=text,
            tokens=tokens,
            kind=Message.Kind.CHAT,
            client_id=client_id,
            replies=len(bots),
            # The chat's own model choice (per-chat settings) is its default bot's.
            answers=[
                (bot, session.chat_model if bot.pk == session.bot_id else bot.model) for bot in bots
            ],
            charged_to=charged_to,
        )
        if isinstance(opened, SendResult):
            return opened
        user_message, replies = opened
        do_attachments_claim(attachments=attachments, message=user_message)
    return SendResult(
        user_message=user_message,
        assistant_message=replies[0],
        created=True,
        replies=replies if answering else [],
    )


def message_prepared(
    session: ChatSession, content: str, attachments: Sequence[Attachment]
) -> tuple[str, int]:
    """The message as stored (what the user typed, then each file's text) and its count."""
    text = message_text_with(content, attachments) if attachments else content
    return text, message_tokens(session, text)


def _answering(
    *, user: AbstractBaseUser, session: ChatSession, text: str, reply_as: object
) -> list[Bot] | None:
    """Rooms: the bots that answer ``text``, in order; None in a one-bot session (its bot
    answers, and no participant is read).

    A request through an API key limited to some bots (``user_bot_scope``) makes none of the
    room's other bots speak: ``reply_as`` one of them is refused as a bot not in the chat, and
    mentions and ``all`` reach only the key's bots (docs/openai-api.md "Keys")."""
    scope = user_bot_scope(user)
    if reply_as is not None:
        bot = reply_as_bot(session=session, bot_id=reply_as)
        if scope is not None and bot.pk not in scope:
            raise ValidationFailed(details={"reply_as": ["Must be the id of a bot in this chat."]})
        return [bot] if session.is_room or bot.pk != session.bot_id else None
    if not session.is_room:
        return None
    # Read once for the send: the fit check's room view below reuses them.
    room_snapshot_take(session)
    participants = [
        p
        for p in participants_of(session=session)
        if bot_usable_in(session=session, bot=p.bot) and (scope is None or p.bot_id in scope)
    ]
    return answering_bots(session=session, text=text, participants=participants) or None


def _check_fits(*, session: ChatSession, result: SendResult) -> Message | None:
    assert result.assistant_message is not None
    return reply_refused_if_too_large(
        session=session, question=result.user_message, reply=result.assistant_message
    )


def session_message_send(
    *,
    user: AbstractBaseUser,
    session_id: object,
    content: object,
    client_id: object = None,
    reply_as: object = None,
    attachments: object = None,
    quota: Sequence[usage.Limit] = (),
    session: ChatSession | None = None,
) -> SendResult:
    """Send a user message: write it and a pending reply, then run the turn after commit. In a
    room, one pending reply per bot that answers (``turns.room``: mentions, ``all``, or
    ``reply_as``), run one at a time in that order.

    The same ``client_id`` twice returns the first result and writes nothing. ``attachments``:
    ids of files uploaded to this chat (``attachments.services.attachment_upload``), sent as
    part of the message.

    ``quota``: the daily limits of the API key the message came through (beside the user's): a
    spent one refuses the send, and ``/compact``, before anything is stored.

    ``session``: the session ``session_id`` names, as the caller read it for ``user``
    (``bots.queries.session_get_for_user``) in this request; it is not read again.
    """
    if session is not None and session.pk == session_id and session.user_id == user.pk:
        session = session_usable(session)
    else:
        session = session_get_for_use(user=user, session_id=session_id)
    text, cid = check_message_content(
        content=content, client_id=client_id, allow_blank=bool(attachments)
    )
    if cid and attachments:
        existing = _existing_send(session=session, client_id=cid)
        if existing is not None:  # a retry of a send whose files it already claimed
            return _redispatch_if_undelivered(existing)
    files = check_attachments_for_send(session=session, attachments=attachments)
    command = COMPACT_COMMAND.match(text.strip())
    if command and files:
        raise ValidationFailed(details={"attachments": ["/compact takes no attachments."]})
    limits = [*usage.user_limits(user.pk), *quota]
    # What its replies are charged to: the key's limit, and a bot-limited key's bots.
    charged_to = usage.charge_subject(quota, scope=user_scope_subject(user))
    if command:
        if not (cid and _existing_send(session=session, client_id=cid)):
            # /compact calls the summariser: a spent limit refuses it before the command is
            # stored (docs/connections.md "Daily token limits").
            usage.quota_check(limits)
        with heavy_request(user_id=user.pk, kind="compact"), usage.quota_scope(extra=quota):
            return session_compact_command(
                session=session,
                text=text,
                client_id=cid,
                focus=command["focus"] or "",
                scope=user_bot_scope(user),
            )
    if limits and not (cid and _existing_send(session=session, client_id=cid)):
        # A spent daily limit refuses before anything is stored (a retry of a message already
        # sent still gets its first result).
        usage.quota_check(limits)
    if not files and (
        retried := send_is_retry(session=session, text=text, client_id=cid, charged_to=charged_to)
    ):
        # A Retry sending the question again: its failed reply runs again, nothing is stored.
        question, replies = retried
        return SendResult(question, replies[0], False, replies=replies if replies[1:] else [])
    answering = _answering(user=user, session=session, text=text, reply_as=reply_as)
    result = _send_write(
        session=session, text=text, cid=cid, answering=answering, files=files, charged_to=charged_to
    )
    if not result.created:
        result = _redispatch_if_undelivered(result)
    log.info(
        "message_sent",
        session_id=session.pk,
        message_id=result.user_message.pk,
        created=result.created,
    )
    return result


def _send_write(
    *,
    session: ChatSession,
    text: str,
    cid: str | None,
    answering: list[Bot] | None,
    files: list[Attachment],
    charged_to: str,
) -> SendResult:
    """The send's one transaction: the user message and its pending replies (or the first
    result of a concurrent send with the same ``client_id``), a default title, the fit check;
    after commit the exchange's frames, then the hand-over to a worker (or the refusal)."""
    # The fit check below reads the answering models' windows from litellm's model map: its
    # one-time import (seconds) runs here, before the transaction takes the session's locks.
    gateway.model_info_load([session.chat_model] + [bot.model for bot in answering or ()])
    # So is the message's text with its files, and its count (megabytes for a big file).
    prepared = message_prepared(session, text, files)
    with transaction.atomic():
        try:
            result = do_message_pair_create(
                session=session,
                content=text,
                client_id=cid,
                answering=answering,
                attachments=files,
                charged_to=charged_to,
                prepared=prepared,
            )
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
                do_session_title_default(
                    session=session, text=text if text.strip() else files[0].name
                )
            rejected = _check_fits(session=session, result=result)
            # After commit: the exchange's message.created frames, then the hand-over to a worker,
            # which does not wait for those frames' round trips (a refusal's message.failed must
            # follow them, so it does).
            transaction.on_commit(
                partial(
                    realtime.notify_exchange_created,
                    [result.user_message, *(result.replies or [reply])],
                    wait=rejected is not None,
                )
            )
            if rejected is None:
                transaction.on_commit(partial(_dispatch_turn, result))
            else:
                transaction.on_commit(partial(realtime.notify_message_failed, rejected))
                if len(result.replies) > 1:
                    # The next bot's reply does not wait for a turn that never runs.
                    transaction.on_commit(partial(dispatch.turn_dispatch_next, session.pk))
    return result


def reply_again_open(
    *,
    session: ChatSession,
    user_message: Message,
    bot: Bot | None = None,
    quota: Sequence[usage.Limit] = (),
    scope: str = "",
) -> SendResult:
    """In the caller's transaction: a new pending reply to ``user_message`` by ``bot`` (default:
    the chat's), after the last message of ``session`` (a regenerated reply, on its branch);
    refused at once if it can never fit, else handed to the queue after commit, as a send's
    reply is. ``quota``: the limits of the API key it was asked for with (``usage.charge_subject``;
    the caller checked them)."""
    row = transitions.allocate_seqs(session_id=session.pk, count=1)
    session.last_seq = row.last_seq
    session.context_tokens, session.context_messages = row.context_tokens, row.context_messages
    speaker = bot or session.bot
    reply = transitions.reply_pending_create(
        user_message=user_message,
        model=session.chat_model if speaker.pk == session.bot_id else speaker.model,
        bot=speaker,
        offset=row.last_seq - user_message.seq,
        charged_to=usage.charge_subject(quota, scope=scope),
    )
    result = SendResult(user_message=user_message, assistant_message=reply, created=True)
    rejected = _check_fits(session=session, result=result)
    transaction.on_commit(
        partial(realtime.notify_exchange_created, [reply], wait=rejected is not None)
    )
    if rejected is None:
        transaction.on_commit(partial(_dispatch_turn, result))
    else:
        result.assistant_message = rejected
        transaction.on_commit(partial(realtime.notify_message_failed, rejected))
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
    *,
    session: ChatSession,
    text: str,
    client_id: str | None,
    focus: str,
    scope: frozenset[int] | None = None,
) -> SendResult:
    """``/compact [focus]`` typed in chat: no bot turn. Compact now, answer with a notice.

    The command and its notice stay in the transcript; neither is ever sent to a model (only
    chat/tool kinds are). In a room, ``/compact @slug [focus]`` compacts that participant's own
    context (its seat), else the default bot's; an ``@`` naming nobody in the room compacts
    nothing and the notice says so.
    """
    seat: ChatSession | None = session
    if session.is_room and focus.lstrip().startswith("@"):
        seat, focus = compact_seat(session, focus.strip(), scope=scope)
    with transaction.atomic():
        opened = _exchange_open(
            session=session, content=text, kind=Message.Kind.COMMAND, client_id=client_id
        )
        if isinstance(opened, SendResult):
            return opened
        command, _ = opened
        transaction.on_commit(partial(realtime.notify_message_created, command))
    try:
        if seat is None:
            result = RunResult("failed", "unknown_bot")
        else:
            # Typed in chat: a compaction that would not lower the context keeps nothing and
            # the notice says so (docs/compaction.md "/compact").
            result = compaction_manual(session=seat, focus=focus.strip(), must_lower=True)
    except CompactionBusy:
        result = RunResult("failed", "busy")
    except QuotaExceeded as exc:  # the summariser's input did not fit in what is left today
        result = RunResult("failed", "quota_exceeded", quota=exc.details)
    except ServiceUnavailable:
        result = RunResult("failed", "service_unavailable")
    except Exception:  # the command is stored: it must get its notice (and seq n+1) regardless
        log.exception("compact_command_crashed", session_id=session.pk)
        result = RunResult("failed", "internal_error")
    text = compaction_notice_text(result, session=seat)
    if seat is None:
        text = f"Nothing was compacted: {focus.split()[0]} is not a bot in this chat."
    elif seat is not session:
        text = f"{seat.bot.name}: {text}"
    notice = transitions.notice_create(command=command, content=text)
    realtime.notify_message_created(notice)
    if result.compacted and seat is not None:
        context_notify(session_id=session.pk, bot_id=seat_key(seat))
    log.info("compact_command", session_id=session.pk, outcome=result.outcome, reason=result.reason)
    return SendResult(
        user_message=command, assistant_message=None, created=True, notice=notice, compaction=result
    )
