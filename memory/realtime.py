"""Memory's frames (docs/api.md): ``memory.updated {records}`` and ``recall {…}``.

Transport and group names are the platform's (``chat_platform.realtime``, the one place that
knows them): memory publishes through it without importing ``bots``'s turn or frames.
"""

from bots.models import ChatSession
from bots.realtime import room_frame_bot
from chat_platform.realtime import frames_heard, send_frame
from memory.models import MemoryRecord, RecallEvent
from memory.payloads import recall_payload, record_payload
from memory.queries import memory_index_records

# A bot-scoped record changes the index of every chat of that user with that bot. Only chats
# open in a browser care, and those are the recently active ones; the rest resync over REST.
SIBLING_SESSIONS_NOTIFIED = 20


def memory_updated_frame(*, session: ChatSession) -> dict:
    """The index of ``session``'s bot (in a room, the seat's, named by ``bot``)."""
    records = memory_index_records(session=session, limit=session.bot.memory_index_size)
    frame = {"type": "memory.updated", "records": [record_payload(r) for r in records]}
    bot = room_frame_bot(session)
    if bot is not None:
        frame["bot"] = bot
    return frame


def notify_memory_updated(*, session: ChatSession) -> None:
    """Send ``session`` its index as it now stands. Call after commit. Not read when nobody can
    hear it (``frames_heard``): each compaction of a long tool task read it for nobody."""
    if frames_heard(session.pk):
        send_frame(session.pk, memory_updated_frame(session=session))


def sessions_seeing(record: MemoryRecord) -> list[ChatSession]:
    """The chats whose index a change to ``record`` may alter."""
    if record.scope == MemoryRecord.Scope.SESSION:
        return list(ChatSession.objects.select_related("bot").filter(pk=record.session_id))
    return list(
        ChatSession.objects.select_related("bot")
        .filter(user_id=record.user_id, bot_id=record.bot_id)
        .order_by("-updated_at", "-id")[:SIBLING_SESSIONS_NOTIFIED]
    )


def notify_record_changed(*, record: MemoryRecord, session: ChatSession) -> None:
    """``memory.updated`` to ``session`` and, for a bot-scoped record, its sibling chats."""
    targets = {s.pk: s for s in sessions_seeing(record)}
    targets.setdefault(session.pk, session)
    for target in targets.values():
        notify_memory_updated(session=target)


def notify_recall(*, event: RecallEvent, session: ChatSession | None = None) -> None:
    """``session``: as the reply's turn read it: in a room, the seat of the bot that read or
    searched, named by ``bot`` (``room_frame_bot``)."""
    frame = {"type": "recall", **recall_payload(event)}
    bot = room_frame_bot(session) if session is not None else None
    if bot is not None:
        frame["bot"] = bot
    send_frame(event.session_id, frame)
