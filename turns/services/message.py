"""A message's pin, a session's stop request, and waiting for a reply to finish (REST ``wait``,
``/v1``): small services beside the send path (``turns.services.send``). Every message write
goes through ``bots.transitions``."""

from django.contrib.auth.base_user import AbstractBaseUser

from bots import realtime, transitions
from bots.models import Bot, Message
from bots.queries import message_get_for_user, session_get_for_user
from chat_platform.compiled import CompiledValues, instances_from, model_fields
from chat_platform.dbconn import connection_release
from chat_platform.errors import NotFound, ValidationFailed

# A reply waited for (REST ``wait``, ``/v1``) whose chat another request deleted.
REPLY_GONE = "The chat was deleted while its reply was being written."


# What a pin cannot keep in the model's context: what is never sent to it (docs/api.md).
NOT_PINNABLE = (
    "Only a message the bot is sent can be pinned: a command, a notice or a failed reply never is."
)


def message_pin_set(*, user: AbstractBaseUser, message_id: object, pinned: bool) -> Message:
    message = message_get_for_user(user=user, message_id=message_id)
    never_sent = message.kind in (Message.Kind.COMMAND, Message.Kind.NOTICE) or (
        message.status == Message.Status.FAILED
    )
    if pinned and never_sent:
        raise ValidationFailed(NOT_PINNABLE, details={"message": [NOT_PINNABLE]})
    if message.pinned != pinned:
        transitions.message_pinned_set(message_id=message.pk, pinned=pinned)
        message.refresh_from_db()
    return message


def generation_stop(*, user: AbstractBaseUser, session_id: object) -> int:
    """Ask the session's running replies to stop; the turn keeps the partial text."""
    session = session_get_for_user(user=user, session_id=session_id)
    return transitions.replies_stop_request(session=session)


def message_wait_finished(*, message_id: int, timeout: float) -> Message:
    """Block until a reply leaves pending/streaming (or the timeout passes); return it. Woken by
    the turn's finish (Redis pub/sub), not by polling the database."""
    latest: list[Message] = []

    def is_finished() -> bool:
        latest[:] = [_reply_with_bot(message_id)]
        connection_release()  # not held between checks (docs/security.md)
        return latest[0].is_finished

    realtime.wait_reply_finished(message_id, is_finished=is_finished, timeout=timeout)
    # The last check read the row: on a wake-up it is the finished reply, no second read.
    return latest[0] if latest else _reply_with_bot(message_id)


# With its bot: the response names it (``MessageOutputSerializer``), one join instead of a
# second statement after the wait (docs/performance.md, "Since 410db82"); every REST ``wait``
# and ``/v1`` reply reads it, so it is compiled once per process (chat_platform/compiled.py).
_REPLY_WITH_BOT = CompiledValues(
    lambda message_id: Message.objects.filter(pk=message_id).values_list(
        *model_fields(Message), *model_fields(Bot, "bot__")
    ),
    name="reply_with_bot",
)


def _reply_with_bot(message_id: int) -> Message:
    rows = _REPLY_WITH_BOT.rows(message_id=message_id)
    if not rows:
        raise NotFound(REPLY_GONE)
    size = len(Message._meta.concrete_fields)
    (message,) = instances_from(rows[0][:size], Message)
    message.bot = None if message.bot_id is None else instances_from(rows[0][size:], Bot)[0]
    return message
