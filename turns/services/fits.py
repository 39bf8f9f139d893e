"""A reply refused at once, without a model call, when its question can never fit its bot's
budget (``context_too_large``): checked by a send and by a Retry, so neither hands a worker a
turn that can only fail (docs/chat-turn.md)."""

from bots import transitions
from bots.models import ChatSession, Message
from bots.queries import session_seat
from chat_platform.errors import ContextTooLarge
from compaction.pipeline import (
    context_fixed_fits,
    context_measure,
    context_precheck,
    context_unshrinkable,
)


def reply_refused_if_too_large(
    *, session: ChatSession, question: Message, reply: Message
) -> Message | None:
    """Fail the pending ``reply`` if ``question`` can never fit; the question stays stored.
    Returns the failed reply, or None when the turn may run. ``session`` carries the running
    totals as the caller read them (a send: its exchange's own statement returned them)."""
    if reply.bot_id not in (None, session.bot_id):
        session = session_seat(session, reply.bot)
    # Whether the fixed part fits is told without the memory index; a refusal, rare, is
    # measured whole for its record (log, ``last_admission``).
    measure = context_measure(
        session=session, new_message=question, before_seq=reply.seq, with_index=False
    )
    if context_fixed_fits(context_unshrinkable(measure)):
        return None
    measure = context_unshrinkable(
        context_measure(session=session, new_message=question, before_seq=reply.seq)
    )
    try:
        context_precheck(measure, path="send")
    except ContextTooLarge as exc:
        transitions.reply_refuse(message_id=reply.pk, code=exc.code, message=exc.message)
        reply.refresh_from_db()
        return reply
    return None
