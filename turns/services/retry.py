"""Retry of a failed reply (docs/chat-turn.md "Retry"): the reply runs again for the same user
message, in place; nothing new is stored, so neither the transcript nor the model's request ever
holds the question twice.

Two ways in, one rule: ``POST /api/v1/messages/{reply id}/retry/``, and a send whose text is
the question of the chat's last exchange while that exchange's reply failed (a client's Retry
that sends the question again, as the chat page's does): ``session_message_send`` asks
``send_is_retry`` first and re-runs the reply instead of storing the question a second time.
"""

from collections.abc import Sequence
from functools import partial
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction

from bots import realtime, transitions
from bots.models import ChatSession, Message
from bots.queries import message_get_for_user, session_get_for_use, user_scope_subject
from chat_platform.compiled import CompiledValues
from chat_platform.errors import ValidationFailed
from compaction.records import context_record_discard
from connections import usage
from turns import dispatch
from turns.services.fits import reply_refused_if_too_large

log = structlog.get_logger(__name__)

RETRYABLE = [Message.Status.FAILED, Message.Status.INTERRUPTED]
RUNNING = [Message.Status.PENDING, Message.Status.STREAMING]
NOT_RETRYABLE = "Only a failed or interrupted reply can be retried."


def _exchange_after(session: ChatSession, question: Message) -> list[Message] | None:
    """The replies to ``question`` if they are the last messages of the chat (recall exchanges
    between them, and commands and notices after them, aside: no model is sent those) and have
    all ended with at least one failed or interrupted; else None."""
    later = list(Message.objects.filter(session=session, seq__gt=question.seq).order_by("seq"))
    replies = [m for m in later if m.role == Message.Role.ASSISTANT and m.kind == Message.Kind.CHAT]
    others = [m for m in later if m.kind == Message.Kind.CHAT and m not in replies]
    if others or not replies or not all(m.is_finished for m in replies):
        return None
    failed = [m for m in replies if m.status in RETRYABLE]
    return failed or None


def _rerun(
    session: ChatSession, question: Message, failed: list[Message], *, charged_to: str = ""
) -> list[Message]:
    """In the caller's transaction: the failed replies back to pending, handed over after
    commit (one at a time, in seq order, as a room's replies run). Returns them re-read."""
    again = []
    for reply in failed:
        bot = reply.bot or session.bot
        model = session.chat_model if bot.pk == session.bot_id else bot.model
        if transitions.reply_rerun(message_id=reply.pk, model=model, charged_to=charged_to):
            again.append(reply.pk)
    # The failed run's record of what the model saw goes with it; the rerun writes its own.
    context_record_discard(message_ids=again)
    rows = list(Message.objects.filter(pk__in=again).order_by("seq"))
    # A question that can never fit is refused again at once, as its send was: no turn runs
    # (the bot's window may have grown since, or the chat been compacted: then it runs).
    refused = {
        row.pk: failed_row
        for row in rows
        if (failed_row := reply_refused_if_too_large(session=session, question=question, reply=row))
    }
    rows = [refused.get(row.pk, row) for row in rows]
    if rows:
        # A refusal's message.failed must follow its message.created (``wait``).
        transaction.on_commit(partial(realtime.notify_exchange_created, rows, wait=bool(refused)))
        for failed_row in refused.values():
            transaction.on_commit(partial(realtime.notify_message_failed, failed_row))
        transaction.on_commit(partial(dispatch.turn_dispatch_next, session.pk))
        log.info("reply_retried", session_id=session.pk, message_ids=again, question=question.pk)
    return rows


def _last_question(session_id: int) -> Any:
    """The chat's last question: its newest user message that is no command."""
    return (
        Message.objects.filter(
            session_id=session_id, role=Message.Role.USER, kind=Message.Kind.CHAT
        )
        .order_by("-seq")
        .values_list("pk", "kind", "content")[:1]
    )


# Read on every send: compiled once per process (docs/performance.md, "A turn's CPU, fourth
# pass"); the question as a model only when its text is the send's.
_LAST_QUESTION = CompiledValues(_last_question, name="last_question")


def send_is_retry(
    *, session: ChatSession, text: str, client_id: str | None, charged_to: str = ""
) -> tuple[Message, list[Message]] | None:
    """A send of ``text`` that is a Retry: the chat's last question has exactly this text and its
    reply failed. Re-runs that reply (one transaction), gives the question the send's
    ``client_id`` (its repeat finds this exchange) and returns ``(question, replies)``; None for
    an ordinary send. A concurrent Retry that already re-ran it returns the same exchange with
    nothing re-run. A chat with no message yet (its ``last_seq`` as the send read it) has no
    question to retry: no statement."""
    if not session.last_seq:
        return None
    last = _LAST_QUESTION.rows(session_id=session.pk)
    if not last or last[0][1] != Message.Kind.CHAT or last[0][2] != text:
        return None
    question = Message.objects.get(pk=last[0][0])  # a Retry (or the same question again)
    with transaction.atomic():
        failed = _exchange_after(session, question)
        if failed is None:
            return None
        rows = _rerun(session, question, failed, charged_to=charged_to)
        if rows and client_id:
            transitions.message_client_id_set(message_id=question.pk, client_id=client_id)
            question.client_id = client_id
    return question, rows or list(Message.objects.filter(pk__in=[m.pk for m in failed]))


def reply_retry(
    *, user: AbstractBaseUser, message_id: object, quota: Sequence[usage.Limit] = ()
) -> Message:
    """``POST messages/{id}/retry/``: re-run a failed or interrupted reply for the same question;
    a reply running already (a concurrent Retry re-ran it) is answered as it stands, nothing run
    twice. Only the chat's last exchange can be retried (a later message would be answered out of
    order); an earlier reply is regenerated instead (a branch). ``quota``: the limit of the API
    key the Retry came through: spent, it refuses the Retry; else the re-run is charged to it,
    as a send through that key is (docs/connections.md "Daily token limits")."""
    reply = message_get_for_user(user=user, message_id=message_id)
    usage.quota_check([*usage.user_limits(user.pk), *quota])
    if reply.role != Message.Role.ASSISTANT or reply.kind != Message.Kind.CHAT:
        raise ValidationFailed(details={"message": [NOT_RETRYABLE]})
    session = session_get_for_use(user=user, session_id=reply.session_id)
    question = reply.prompted_by
    if reply.status in RUNNING and question is not None:
        return reply  # running again already (a concurrent Retry won): nothing to run twice
    if reply.status not in RETRYABLE or question is None:
        raise ValidationFailed(details={"message": [NOT_RETRYABLE]})
    with transaction.atomic():
        failed = _exchange_after(session, question)
        if failed is None or reply.pk not in [m.pk for m in failed]:
            reply.refresh_from_db()
            if reply.status in RUNNING:
                return reply
            raise ValidationFailed(
                details={
                    "message": [
                        "Only the chat's last reply can be retried; regenerate an earlier one."
                    ]
                }
            )
        _rerun(
            session,
            question,
            failed,
            charged_to=usage.charge_subject(quota, scope=user_scope_subject(user)),
        )
    reply.refresh_from_db()
    return reply
