"""The public shapes of records and recall events (REST and websocket, docs/api.md)."""

from typing import Any

from chat_platform.isotime import iso_utc
from memory.models import MemoryRecord, RecallEvent
from memory.queries import MessageHit


def record_payload(record: MemoryRecord) -> dict[str, Any]:
    """A list item; GET one adds ``body``, a search adds ``excerpt``."""
    return {
        "name": record.name,
        "kind": record.kind,
        "scope": record.scope,
        "description": record.description,
        "first_seq": record.first_seq,
        "last_seq": record.last_seq,
        "token_count": record.token_count,
        "created_at": iso_utc(record.created_at),
    }


def recall_payload(event: RecallEvent) -> dict[str, Any]:
    """The ``recall`` frame's fields."""
    return {
        "message_id": event.message_id,
        "round": event.round,
        "tool": event.tool,
        "names": event.names,
        "query": event.query,
        "found": event.found,
    }


def message_hit_payload(hit: MessageHit) -> dict[str, Any]:
    """One result of ``GET /api/v1/search/`` (search all my chats)."""
    session = hit.session
    return {
        "session": {
            "id": session.pk,
            "title": session.title,
            "bot": {"id": session.bot_id, "name": session.bot.name},
        },
        "message": {
            "id": hit.message_id,
            "seq": hit.seq,
            "role": hit.role,
            "created_at": iso_utc(hit.created_at),
        },
        "excerpt": hit.excerpt,
        "rank": hit.rank,
    }
