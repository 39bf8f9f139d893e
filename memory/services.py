"""Writes of the memory app. Snapshots: the exact transcript each compaction attempt sent to its
summariser, written before the call, kept on failure, indexed only once the compaction succeeded.
"""

import re
from collections import Counter

from django.db import transaction
from django.utils import timezone

from bots.models import ChatSession
from chat_platform.llm.builtin.text import STOPWORDS
from chat_platform.llm.tokens import count_tokens
from memory.models import MemoryRecord

DESCRIPTION_MAX = 140
_LINE_LABEL = re.compile(r"^\s*\[\d+\]\s*[a-z]+(?:\s*\([^)]*\))?:\s*", re.IGNORECASE | re.MULTILINE)
_TOPIC_WORD = re.compile(r"[^\W\d_][\w'-]{3,}")


def snapshot_name(first_seq: int, last_seq: int) -> str:
    return f"snapshot_{first_seq}_{last_seq}"


def snapshot_topics(body: str, *, limit: int = 4) -> list[str]:
    """The transcript's most frequent content words (ties: first seen), for the description."""
    words = [w.lower() for w in _TOPIC_WORD.findall(_LINE_LABEL.sub("", body))]
    counts = Counter(w for w in words if w not in STOPWORDS)
    first_seen = {w: i for i, w in reversed(list(enumerate(words)))}
    ranked = sorted(counts, key=lambda w: (-counts[w], first_seen[w]))
    return ranked[:limit]


def snapshot_description(first_seq: int, last_seq: int, body: str) -> str:
    head = f"Pre-compaction snapshot of messages {first_seq}–{last_seq}"
    topics = snapshot_topics(body)
    description = head
    for i, topic in enumerate(topics):
        candidate = f"{description}{': ' if i == 0 else ', '}{topic}"
        if len(candidate) > DESCRIPTION_MAX:
            break
        description = candidate
    return description


def snapshot_write(
    *, session: ChatSession, first_seq: int, last_seq: int, body: str
) -> MemoryRecord:
    """Write (or refresh, on a retried range) the snapshot before the summariser is called."""
    name = snapshot_name(first_seq, last_seq)
    with transaction.atomic():
        record, _ = MemoryRecord.objects.update_or_create(
            session=session,
            name=name,
            defaults={
                "kind": MemoryRecord.Kind.SNAPSHOT,
                "description": snapshot_description(first_seq, last_seq, body),
                "body": body,
                "token_count": count_tokens(body),
                "first_seq": first_seq,
                "last_seq": last_seq,
                "indexed": False,
            },
        )
    return record


def snapshot_mark_indexed(*, snapshot: MemoryRecord) -> None:
    MemoryRecord.objects.filter(pk=snapshot.pk).update(indexed=True, updated_at=timezone.now())


def snapshots_for(
    *, session: ChatSession, ranges: list[tuple[int, int]]
) -> dict[tuple[int, int], str]:
    names = {snapshot_name(first, last): (first, last) for first, last in ranges}
    return {
        names[name]: body
        for name, body in MemoryRecord.objects.filter(
            session=session, name__in=list(names), kind=MemoryRecord.Kind.SNAPSHOT
        ).values_list("name", "body")
    }
