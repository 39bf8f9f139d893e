"""Memory's frames (docs/api.md): ``memory.updated {records}`` and ``recall {…}``.

Transport and group names are the platform's (``chat_platform.realtime``, the one place that
knows them): memory publishes through it without importing ``bots``'s turn or frames.
"""

from bots.models import ChatSession
from chat_platform.realtime import frames_heard, send_frame
from memory.models import MemoryRecord, RecallEvent
from memory.payloads import recall_payload, record_payload
from memory.queries import memory_index_records

# A bot-scoped record changes the index of every chat of that user with that bot. Only chats
# open in a browser care, and those are the recently active ones; the rest resync over REST.
SIBLING_SESSIONS_NOTIFIED = 20


def memory_updated_frame(*, session: ChatSession) -> dict:
    records = memory_index_records(session=session, limit=session.bot.memory_index_size)
    return {"type": "memory.updated", "records": [record_payload(r) for r in records]}


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


def notify_recall(*, event: RecallEvent) -> None:
    send_frame(event.session_id, {"type": "recall", **recall_payload(event)})
