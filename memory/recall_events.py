"""Recall events: the audit row of each read or search a model asked for, with its ``recall``
frame (docs/memory.md)."""

from collections.abc import Sequence
from functools import partial

from django.db import transaction

from bots.models import ChatSession, Message
from chat_platform.textcheck import text_is_storable
from memory import realtime
from memory.models import RecallEvent

RECALL_QUERY_MAX_CHARS = 1000
RECALL_NAME_MAX_CHARS = 80


def _storable(value: object, limit: int) -> str:
    """Audit text from a model: never fail the turn over it, store what can be stored."""
    text = str(value)[:limit]
    if text_is_storable(text):
        return text
    return "".join(ch for ch in text if text_is_storable(ch))


def recall_event_write(
    *,
    session: ChatSession,
    message: Message | None,
    recall_round: int,
    tool: str,
    names: Sequence[object] = (),
    query: str = "",
    found: Sequence[object] = (),
    tokens: int = 0,
) -> RecallEvent:
    """Record one read or search (``tool`` ``read``/``search``; ``recall_round`` from 1) and send
    the ``recall`` frame after commit. ``names``: asked for (read); ``found``: the names that came
    back, in the order given to the model."""
    if tool not in RecallEvent.Tool.values:
        raise ValueError(f"Unknown recall tool {tool!r}")
    event = RecallEvent(
        session=session,
        message=message,
        round=recall_round,
        tool=tool,
        names=[_storable(n, RECALL_NAME_MAX_CHARS) for n in names],
        query=_storable(query, RECALL_QUERY_MAX_CHARS),
        found=[_storable(n, RECALL_NAME_MAX_CHARS) for n in found],
        tokens=max(0, int(tokens)),
    )
    with transaction.atomic():
        event.save()
        transaction.on_commit(partial(realtime.notify_recall, event=event, session=session))
    return event
