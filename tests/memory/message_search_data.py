"""A small dated conversation compacted into snapshots, for the message-search tests
(tests/memory/test_message_search.py on PostgreSQL, tests/memory/message_search_sqlite_script.py
on SQLite): the same rows on both databases, so both must give the same hits.

Compaction is reproduced as the engine commits it (compaction/engine/passes.py): a Summary, the
messages pointed at it, the snapshot written (``memory.services.snapshot_write``) and marked
indexed (``memory.services.snapshot_mark_indexed``, which indexes the messages). Import only
after Django is set up.
"""

from datetime import UTC, datetime, timedelta

from bots.models import ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.engine.transcript import transcript_line
from compaction.models import Summary, SummaryCoverage
from memory import services
from memory.models import MemoryRecord
from tests.coverage import cover

# (day the talk happened, first message's time, [(role, text), ...]); one minute per message.
TALKS = [
    (
        datetime(2024, 3, 8, 18, 0, tzinfo=UTC),
        [
            ("user", "Last Friday we finally took the boat out to the lake."),
            ("assistant", "That sounds like a lovely trip. Who went with you?"),
            ("user", "My cousin Meera came along and she caught a huge trout."),
            ("assistant", "A trout! Did you cook it?"),
            ("user", "We grilled it with lemon that evening."),
            ("assistant", "Grilled trout with lemon is a classic."),
            ("user", "My first pet was a beagle puppy called Mango."),
            ("assistant", "Mango is a great name for a beagle."),
        ],
    ),
    (
        datetime(2024, 4, 19, 9, 30, tzinfo=UTC),
        [
            ("user", "I started a new job as a nurse at St Mary's hospital in Leeds."),
            ("assistant", "Congratulations on the new job! Which ward are you on?"),
            ("user", "The children's ward, mostly night shifts."),
            ("assistant", "Night shifts are tough. Take care of yourself."),
            ("user", "We also got another pet, a grey cat named Pixel."),
            ("assistant", "Pixel and Mango, what a pair."),
            ("user", "My sister Anjali plays the harmonica in a blues band."),
            ("assistant", "A blues harmonica player in the family, nice."),
        ],
    ),
    (
        datetime(2024, 5, 2, 20, 15, tzinfo=UTC),
        [
            ("user", "We are planning a hiking trip to Patagonia in November."),
            ("assistant", "Patagonia in November is beautiful. Will Meera join you?"),
            ("user", "No, Meera moved to Lisbon for her studies."),
            ("assistant", "Lisbon is a wonderful city to study in."),
            ("user", "The boat needs a new engine before summer."),
            ("assistant", "Engines are expensive; get a few quotes first."),
        ],
    ),
]
# The snapshots the three talks were compacted into, in order.
SNAPSHOTS = ["snapshot_1_8", "snapshot_9_16", "snapshot_17_22"]
FUSION = "snapshot_1_16"

# Ravi is named in every message but one; the one without him holds the only harmonica.
RAVI_TALKS = [
    (
        datetime(2024, 6, 1, 10, 0, tzinfo=UTC),
        [
            ("user", "Ravi called this morning about the garden."),
            ("assistant", "What did Ravi want to plant?"),
            ("user", "Ravi wants tomatoes, and Ravi wants them by June."),
            ("assistant", "Ravi should start the seedlings indoors."),
        ],
    ),
    (
        datetime(2024, 6, 9, 10, 0, tzinfo=UTC),
        [
            ("user", "Ravi came round for dinner with his brother."),
            ("assistant", "He has been practising the harmonica every evening."),
            ("user", "Ravi brought a cake that Ravi baked himself."),
            ("assistant", "Ravi sounds like a generous guest."),
        ],
    ),
    (
        datetime(2024, 6, 16, 10, 0, tzinfo=UTC),
        [
            ("user", "Ravi is moving to a flat near the station."),
            ("assistant", "Will Ravi keep the garden?"),
        ],
    ),
]
RAVI_SNAPSHOTS = ["snapshot_1_4", "snapshot_5_8", "snapshot_9_10"]


def said(session: ChatSession, role: str, content: str, when: datetime, **fields) -> Message:
    """Append a finished message with the next seq, said at ``when``."""
    session.last_seq += 1
    session.save(update_fields=["last_seq"])
    fields.setdefault("token_count", count_message_tokens(content))
    message = Message.objects.create(
        session=session, seq=session.last_seq, role=role, content=content, **fields
    )
    Message.objects.filter(pk=message.pk).update(created_at=when)
    message.refresh_from_db()
    return message


def compact(session: ChatSession, first_seq: int, last_seq: int) -> MemoryRecord:
    """What a successful compaction pass of ``first_seq``–``last_seq`` commits."""
    messages = list(
        Message.objects.filter(
            session=session, seq__gte=first_seq, seq__lte=last_seq, kind__in=["chat", "tool"]
        ).order_by("seq")
    )
    transcript = "\n".join(transcript_line(m) for m in messages)
    summary = Summary.objects.create(
        session=session,
        level=1,
        text=f"Messages {first_seq}-{last_seq} in brief.",
        token_count=10,
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=count_tokens(transcript),
        model="builtin/extractive",
        trigger="manual",
        retention=1.0,
    )
    cover(Message.objects.filter(pk__in=[m.pk for m in messages]), summary.pk)
    snapshot = services.snapshot_write(
        session=session, first_seq=first_seq, last_seq=last_seq, body=transcript
    )
    covered = SummaryCoverage.objects.filter(summary_id=summary.pk).values("message_id")
    services.snapshot_mark_indexed(snapshot=snapshot, covered=covered)
    snapshot.refresh_from_db()
    return snapshot


def fuse(session: ChatSession, first_seq: int, last_seq: int) -> MemoryRecord:
    """What a fusion of the active summaries over ``first_seq``–``last_seq`` commits: its
    snapshot holds the summaries and copies of the raw lines (fusion with snapshots)."""
    parents = list(
        Summary.objects.filter(
            session=session, status="active", first_seq__gte=first_seq, last_seq__lte=last_seq
        ).order_by("first_seq")
    )
    copies = []
    for parent in parents:
        body = MemoryRecord.objects.get(
            session=session, name=f"snapshot_{parent.first_seq}_{parent.last_seq}"
        ).body
        copies.append(f"{parent.text}\n[Raw messages {parent.first_seq}–{parent.last_seq}]\n{body}")
    transcript = "\n".join(copies)
    Summary.objects.filter(pk__in=[p.pk for p in parents]).update(status="superseded")
    fused = Summary.objects.create(
        session=session,
        level=2,
        text="Fused summary.",
        token_count=5,
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=sum(p.source_tokens for p in parents),
        model="builtin/extractive",
        trigger="fusion",
        retention=1.0,
    )
    fused.parents.set(parents)
    SummaryCoverage.objects.filter(summary_id__in=[p.pk for p in parents]).update(
        summary_id=fused.pk
    )
    snapshot = services.snapshot_write(
        session=session, first_seq=first_seq, last_seq=last_seq, body=transcript
    )
    covered = SummaryCoverage.objects.filter(summary_id=fused.pk).values("message_id")
    services.snapshot_mark_indexed(snapshot=snapshot, covered=covered)
    snapshot.refresh_from_db()
    return snapshot


def conversation(session: ChatSession, talks=TALKS) -> list[MemoryRecord]:
    """``talks`` said in ``session``, each compacted into its own snapshot, then one more turn
    (not compacted): the snapshots."""
    snapshots = []
    for start, turns in talks:
        first = session.last_seq + 1
        for i, (role, text) in enumerate(turns):
            said(session, role, text, start + timedelta(minutes=i))
        snapshots.append(compact(session, first, session.last_seq))
    latest = talks[-1][0] + timedelta(days=1)
    said(session, "user", "The boat and the lake can wait until Friday.", latest)
    said(session, "assistant", "Enjoy the lake on Friday.", latest + timedelta(minutes=1))
    return snapshots


def line(seq: int) -> str:
    """The transcript line of message ``seq`` of ``TALKS`` as a hit shows it."""
    for start, turns in TALKS:
        first = 1 + sum(len(t) for _, t in TALKS[: TALKS.index((start, turns))])
        if first <= seq < first + len(turns):
            role, text = turns[seq - first]
            moment = start + timedelta(minutes=seq - first)
            return f"[{seq}] {moment:%Y-%m-%d %H:%M}Z {role}: {text}"
    raise KeyError(seq)


QUESTIONS = [
    "Which hospital does she work at as a nurse?",
    "What pets do I have?",
    "When did we take the boat out to the lake?",
    "lovely trip",
    "lovely trip trout",
    "grilling lemons",
    "What is the boat called?",
    "zanzibar",
    "' OR 1=1 --",
    'a" OR "b',
    "NEAR(x y)",
    "*",
    "a\x00b",
    "x" * 10_240,
]


def answers(session: ChatSession, ravi: ChatSession) -> dict:
    """What search answers on the fixture, as JSON-able data (the same on both databases):
    ``session`` holds ``TALKS`` (plus an info record ``boat_name``), ``ravi`` ``RAVI_TALKS``."""
    from memory import queries, search
    from memory.terms import query_terms

    def hits(s, query, **kwargs):
        return [
            [h.name, list(h.seqs), h.excerpt if h.seqs else ""]
            for h in queries.records_search(session=s, query=query, **kwargs)
        ]

    def ranked(s, query):
        scored, _ = search.messages_ranked(
            session_id=s.pk, query=query_terms(query, search.QUERY_MAX_TERMS)
        )
        return [[m.seq, round(m.score, 9)] for m in scored]

    out = {
        "hits": {q: hits(session, q) for q in QUESTIONS},
        "ranked": {q: ranked(session, q) for q in QUESTIONS[:7]},
        "budget": {n: hits(session, "lovely trip trout pet boat", budget=n) for n in (30, 70, 120)},
        "ravi": hits(ravi, "What did Ravi say about the harmonica?"),
        "ravi_ranked": ranked(ravi, "What did Ravi say about the harmonica?"),
    }
    # The last turn, live: indexed as its reply ended; recall searches it below the first seq
    # its request shows (``live_before``), as a history hit.
    live = Message.objects.filter(session=session, seq__gt=22).values_list("pk", flat=True)
    services.messages_index_written(message_ids=list(live))
    asked = (None, 24, session.last_seq + 1)
    out["live"] = {n: hits(session, "boat lake Friday", live_before=n) for n in asked}
    fuse(session, 1, 16)
    out["after_fusion"] = hits(session, "boat lake")
    return out


def build(owner, bot, other_user) -> tuple[ChatSession, ChatSession]:
    """The fixture sessions: ``TALKS`` with an info record, ``RAVI_TALKS``, and two foreign
    sessions (same user other chat; other user) holding the codeword zanzibar."""

    session = ChatSession.objects.create(user=owner, bot=bot, title="talked")
    conversation(session)
    services.record_save(
        session=session,
        name="boat_name",
        description="The boat's name",
        body="The boat is called Seagull.",
    )
    ravi = ChatSession.objects.create(user=owner, bot=bot, title="ravi")
    conversation(ravi, talks=RAVI_TALKS)
    for user in (owner, other_user):
        foreign = ChatSession.objects.create(user=user, bot=bot, title="foreign")
        when = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
        said(foreign, "user", "The boat on the lake is hidden, codeword zanzibar.", when)
        said(foreign, "assistant", "Zanzibar it is: the boat, the lake, the trout.", when)
        compact(foreign, 1, 2)
    return session, ravi
