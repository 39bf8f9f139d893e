"""Compaction coverage of one-bot chats: which summary covers a message (``compacted_by_id``),
and the session's running totals that move with it. Claims are conditional updates (a message
pinned, compacted or changed meanwhile is left alone); the caller owns the transaction.

Split from ``bots.transitions`` (the state machine of a message), which these writes complete:
the two are the chat core's only writers of a message's fields (docs/architecture.md).
"""

from django.db.models import Count, Sum

from bots.models import ChatSession, Message
from bots.transitions import session_context_add


def session_one_bot_hold(*, session_id: int) -> bool:
    """A one-bot compaction's commit (caller's transaction), first of its writes: the session
    row locked, as ``participant_add`` locks it before it turns a session into a room and moves
    its coverage, so the two run one after the other and take their locks in the same order (the
    session row, then summaries, messages and coverage). True while the session is still one
    bot's; False when a bot joined meanwhile and made it a room: one-bot coverage
    (``compacted_by_id``) written now would cover nothing for any seat. One statement."""
    is_room = (
        ChatSession.objects.select_for_update()
        .filter(pk=session_id)
        .values_list("is_room", flat=True)
        .first()
    )
    return is_room is False


def messages_compact(*, message_ids: list[int], summary_id: int) -> int:
    """Conditional claim of exactly these messages for a new summary: one pinned, compacted or
    changed meanwhile is left alone (the caller compares the count and rolls back)."""
    return Message.objects.filter(
        pk__in=message_ids,
        compacted_by_id__isnull=True,
        status=Message.Status.COMPLETE,
        pinned=False,
    ).update(compacted_by_id=summary_id)


def messages_room_uncompact(*, session_id: int) -> tuple[int, int]:
    """A session becoming a room (caller's transaction, after compaction has written the
    coverage as rows per bot): its messages leave ``compacted_by_id`` empty, as a room's do, and
    count in the session's running totals again (every bot's own totals subtract what its
    summaries cover). Returns the (tokens, messages) added."""
    covered = Message.objects.filter(session_id=session_id, compacted_by_id__isnull=False)
    totals = covered.filter(
        kind__in=[Message.Kind.CHAT, Message.Kind.TOOL],
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
        token_count__gt=0,
    ).aggregate(tokens=Sum("token_count"), messages=Count("id"))
    covered.update(compacted_by_id=None)
    tokens, messages = totals["tokens"] or 0, totals["messages"]
    session_context_add(session_id=session_id, tokens=tokens, messages=messages)
    return tokens, messages


def messages_compaction_move(*, from_summary_ids: list[int], to_summary_id: int) -> int:
    """Fusion: the messages of the parents are now covered by the fused summary."""
    return Message.objects.filter(compacted_by_id__in=from_summary_ids).update(
        compacted_by_id=to_summary_id
    )


def messages_uncompact(*, summary_id: int) -> tuple[int, int]:
    """Undo: the messages ``summary_id`` covers are no longer covered, and those a model may see
    (``Message.in_context_q``) are added back to the session's running totals. Returns the
    (tokens, messages) that came back into the context. Caller's transaction."""
    covered = Message.objects.filter(compacted_by_id=summary_id)
    first = covered.values("session_id").first()
    back = covered.filter(
        kind__in=[Message.Kind.CHAT, Message.Kind.TOOL],
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
        token_count__gt=0,
    ).aggregate(tokens=Sum("token_count"), messages=Count("id"))
    covered.update(compacted_by_id=None)
    tokens, messages = back["tokens"] or 0, back["messages"]
    if first is not None:
        session_context_add(session_id=first["session_id"], tokens=tokens, messages=messages)
    return tokens, messages


def messages_compaction_restore(
    *, from_summary_id: int, to_summary_id: int, first_seq: int, last_seq: int
) -> int:
    """Undo of a fusion: the fused summary's messages in one parent's span point at that
    parent again (the reverse of ``messages_compaction_move``)."""
    return Message.objects.filter(
        compacted_by_id=from_summary_id, seq__gte=first_seq, seq__lte=last_seq
    ).update(compacted_by_id=to_summary_id)


def messages_coverage_copy(
    *, source_id: int, target_id: int, from_summary_id: int, to_summary_id: int
) -> int:
    """A carried-over summary covers, in the branch, the copies of what it covered."""
    seqs = Message.objects.filter(session_id=source_id, compacted_by_id=from_summary_id).values(
        "seq"
    )
    return Message.objects.filter(session_id=target_id, seq__in=seqs).update(
        compacted_by_id=to_summary_id
    )
