"""The other records a snapshot's description is measured against (``memory.services``,
``snapshot_write``), read by one statement compiled once per process: every compaction pass
reads them (docs/performance.md, "The tool task, eighth pass")."""

from django.db.models import Q, QuerySet
from django.db.models.functions import Substr

from bots.models import ChatSession
from chat_platform.compiled import CompiledValues
from memory.models import MemoryRecord
from memory.queries import records_for_session


def _other_heads_query(
    *, session_id: int, user_id: int, bot_id: int, name: str, chars: int, limit: int, room: bool
) -> QuerySet:
    """The heads of the records the index may list beside ``name`` (no failed pass's snapshot),
    newest first: what a snapshot's description is measured against."""
    session = ChatSession(pk=session_id, user_id=user_id, bot_id=bot_id, is_room=room)
    return (
        records_for_session(session=session)
        .exclude(Q(name=name) | Q(kind=MemoryRecord.Kind.SNAPSHOT, indexed=False))
        .annotate(head=Substr("body", 1, chars))
        .values_list("head")[:limit]
    )


_OTHER_HEADS = CompiledValues(_other_heads_query, shape=("chars", "limit", "room"))


def other_record_heads(*, session: ChatSession, name: str, chars: int, limit: int) -> list[str]:
    """The first ``chars`` characters of up to ``limit`` newest records ``session`` may read
    but ``name`` and failed passes' snapshots (``memory.services.snapshot_write``)."""
    rows = _OTHER_HEADS.rows(
        session_id=session.pk,
        user_id=session.user_id,
        bot_id=session.bot_id,
        name=name,
        chars=chars,
        limit=limit,
        room=session.is_room,
    )
    return [row[0] for row in rows]
