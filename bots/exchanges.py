"""A recall or tool exchange stored before its reply: the one writer that moves a running reply
after the messages of its rounds. A sibling of ``bots.transitions`` (whose seq allocation and
context counters it uses), kept apart because it writes whole rows, not one message's state.
"""

from typing import Any

from django.db.models import F

from bots.models import Message
from bots.transitions import allocate_seqs
from chat_platform.compiled import CompiledValues


def recall_exchange_store(
    *, reply: Message, call: dict[str, Any], results: list[dict[str, Any]]
) -> tuple[list[Message], list[Message]]:
    """Store a recall exchange before its reply (caller's transaction): the request (``call``:
    the assistant ``tool`` message's fields) takes the reply's seq, one ``tool`` message per
    result follows, and the reply moves after them (``reply.seq`` says where, without a read);
    the stored messages join the context.

    Messages sent while the reply ran (queued exchanges, after it by seq) move up by as many
    seqs, so they stay after the reply they wait for: seqs stay gap-free and in the order the
    model sees them. Returns the stored messages and the moved ones (re-read, for their frames).
    """
    session = reply.session
    count = len(results) + 1
    rows = [
        Message(
            session=session,
            seq=reply.seq,
            role=Message.Role.ASSISTANT,
            kind=Message.Kind.TOOL,
            status=Message.Status.COMPLETE,
            bot_id=reply.bot_id,
            **call,
        ),
        *(
            Message(
                session=session,
                seq=reply.seq + 1 + offset,
                role=Message.Role.TOOL,
                kind=Message.Kind.TOOL,
                status=Message.Status.COMPLETE,
                bot_id=reply.bot_id,
                **result,
            )
            for offset, result in enumerate(results)
        ),
    ]
    # The session row stays locked until the caller commits: no send slips in meanwhile. The
    # stored messages join the running totals in the same statement.
    tokens = sum(m.token_count for m in rows)
    allocate_seqs(
        session_id=session.pk,
        count=count,
        context_tokens=tokens,
        context_messages=len(rows) if tokens > 0 else 0,
    )
    old_seq = reply.seq
    later = [row[0] for row in _LATER.rows(session_id=session.pk, seq=old_seq)]
    # Highest first, one row at a time: each move lands on a seq already free, so the unique
    # (session, seq) constraint holds after every statement.
    for pk in later:
        Message.objects.filter(pk=pk).update(seq=F("seq") + count)
    Message.objects.filter(pk=reply.pk).update(seq=old_seq + count)
    reply.seq = old_seq + count  # where it now stands (the row is locked): no read back
    # The call and its results, one INSERT (docs/performance.md, "The tool task, seventh pass").
    stored = Message.objects.bulk_create(rows)
    moved = list(Message.objects.filter(pk__in=later).order_by("seq")) if later else []
    return stored, moved


# Every round's store reads them: compiled once per process (docs/performance.md, "The tool
# task, eighth pass").
_LATER = CompiledValues(
    lambda session_id, seq: (
        Message.objects.filter(session_id=session_id, seq__gt=seq)
        .order_by("-seq")
        .values_list("pk")
    ),
    name="messages_after_reply",
)
