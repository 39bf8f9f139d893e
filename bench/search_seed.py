"""Seeding ``bench/memory_search.py``'s database in bulk: one user and bot, whole compacted sessions
added by PostgreSQL COPY (messages, a summary, snapshots, the message index with each message's
vector when the bot embeds), info records."""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from search_text import BOT_MODEL, Pool, _pick, make_text

PER_SESSION = 1000
PER_SNAPSHOT = 50
SESSION_INFOS = 2
BOT_INFOS = 30
BATCH_MESSAGES = 50_000  # rows per COPY transaction (whole sessions)
START = datetime(2023, 1, 2, 8, 0, tzinfo=UTC)
# Message vectors when the bot embeds: this many distinct random unit vectors of the built-in
# model's size, one per pool text by its index (modulo): what a search reads and multiplies is
# the same as with real vectors; what they rank is not measured here (bench/memory_retrieval.py).
VECTORS = 4096
POOL_OFFSET = 1013  # an assistant text takes another vector than the user text of its index
DIMENSIONS = 384


# --- seeding ------------------------------------------------------------------------------------


@dataclass
class Corpus:
    user: object
    bot: object
    per_session: int
    per_snapshot: int
    pool: Pool
    session_ids: list[int] = field(default_factory=list)
    vectors: list[bytes] = field(default_factory=list)  # empty: the bot searches by words only


def corpus_start(
    *,
    pool: Pool,
    per_session: int = PER_SESSION,
    per_snapshot: int = PER_SNAPSHOT,
    embedding_model: str = "builtin/embed",
):
    """The user, the bot (embedding with ``embedding_model``; blank: words only) and its
    bot-scoped info records; no sessions yet."""
    from django.contrib.auth import get_user_model

    from bots.models import Bot
    from memory.models import MemoryRecord

    user = get_user_model().objects.create(username="bench-search")
    bot = Bot.objects.create(
        owner=user,
        name="bench-search",
        model=BOT_MODEL,
        context_window=8192,
        embedding_model=embedding_model,
    )
    rng = random.Random(7)
    MemoryRecord.objects.bulk_create(
        MemoryRecord(
            scope=MemoryRecord.Scope.BOT,
            user=user,
            bot=bot,
            kind=MemoryRecord.Kind.INFO,
            name=f"fact-{n}",
            description=f"About {_pick(rng, 'name')} and {_pick(rng, 'place')}",
            body=make_text(rng, "user"),
        )
        for n in range(BOT_INFOS)
    )
    vectors: list[bytes] = []
    if embedding_model:
        import numpy as np

        from memory.embeddings import vector_bytes

        generator = np.random.default_rng(33)
        vectors = [vector_bytes(generator.standard_normal(DIMENSIONS)) for _ in range(VECTORS)]
    return Corpus(
        user=user,
        bot=bot,
        per_session=per_session,
        per_snapshot=per_snapshot,
        pool=pool,
        vectors=vectors,
    )


def grow(corpus: Corpus, messages: int) -> float:
    """Add whole sessions until the corpus holds ``messages`` indexed messages; seconds taken."""
    started = time.perf_counter()
    want = messages // corpus.per_session
    per_batch = max(1, BATCH_MESSAGES // corpus.per_session)
    while len(corpus.session_ids) < want:
        count = min(per_batch, want - len(corpus.session_ids))
        _add_sessions(corpus, count)
    return time.perf_counter() - started


def _copy(table: str, columns: list[str], rows) -> None:
    from django.db import connection

    names = ", ".join(f'"{c}"' for c in columns)
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


_Plan = dict[int, list[tuple[str, int, datetime]]]


def _plan(corpus: Corpus, sessions: list, first_number: int) -> _Plan:
    """Each session: which pool text every seq holds, and when it was said."""
    pool, per_session = corpus.pool, corpus.per_session
    plan: dict[int, list[tuple[str, int, datetime]]] = {}
    for i, session in enumerate(sessions):
        number = first_number + i
        rng = random.Random(1_000_003 * (number + 1))
        moment = START + timedelta(days=number * 0.7)
        rows = []
        for seq in range(1, per_session + 1):
            role = "user" if seq % 2 else "assistant"
            moment += timedelta(seconds=rng.randint(20, 400))
            rows.append((role, rng.randrange(len(pool.texts[role])), moment))
        plan[session.pk] = rows
    return plan


def _add_summaries(corpus: Corpus, sessions: list, plan: _Plan) -> dict[int, int]:
    from compaction.models import Summary

    pool, per_session = corpus.pool, corpus.per_session
    summaries = Summary.objects.bulk_create(
        Summary(
            session=session,
            level=1,
            text=f"[1] {plan[session.pk][0][2]:%Y-%m-%d} user: the chat so far.",
            token_count=40,
            first_seq=1,
            last_seq=per_session,
            source_tokens=sum(pool.tokens[r][i] for r, i, _ in plan[session.pk]),
            model="builtin/extractive",
            trigger=Summary.Trigger.SOFT,
            retention=1.0,
        )
        for session in sessions
    )
    summary_of = {s.session_id: s.pk for s in summaries}
    return summary_of


def _copy_snapshots(corpus: Corpus, sessions: list, plan: _Plan) -> dict[tuple[int, int], int]:
    """The snapshots, one per ``per_snapshot`` messages; (session id, first seq) -> record id."""
    from django.db import connection

    from chat_platform.transcript import line as transcript_line
    from memory.models import MemoryRecord
    from memory.services import snapshot_name

    pool, per_session, per_snapshot = corpus.pool, corpus.per_session, corpus.per_snapshot
    now = datetime.now(UTC)

    def snapshot_rows():
        for session in sessions:
            rows = plan[session.pk]
            for first in range(1, per_session + 1, per_snapshot):
                last = min(per_session, first + per_snapshot - 1)
                body = "\n".join(
                    transcript_line(
                        seq,
                        rows[seq - 1][2],
                        rows[seq - 1][0],
                        pool.texts[rows[seq - 1][0]][rows[seq - 1][1]],
                    )
                    for seq in range(first, last + 1)
                )
                tokens = sum(
                    pool.tokens[rows[s - 1][0]][rows[s - 1][1]] + 8 for s in range(first, last + 1)
                )
                yield (
                    session.pk,
                    "session",
                    snapshot_name(first, last),
                    "snapshot",
                    f"Pre-compaction snapshot of messages {first}–{last}",
                    body,
                    tokens,
                    first,
                    last,
                    True,
                    rows[last - 1][2],
                    now,
                )

    _copy(
        MemoryRecord._meta.db_table,
        [
            "session_id",
            "scope",
            "name",
            "kind",
            "description",
            "body",
            "token_count",
            "first_seq",
            "last_seq",
            "indexed",
            "created_at",
            "updated_at",
        ],
        snapshot_rows(),
    )
    ids = [s.pk for s in sessions]
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT session_id, first_seq, id FROM memory_memoryrecord "
            "WHERE session_id = ANY(%s) AND kind = 'snapshot'",
            [ids],
        )
        snapshot_of = {(sid, first): pk for sid, first, pk in cursor.fetchall()}
    return snapshot_of


def _copy_messages(
    corpus: Corpus, sessions: list, plan: _Plan, summary_of: dict[int, int]
) -> list[tuple[int, int, int]]:
    """The messages, compacted by their session's summary; their (id, session id, seq)."""
    from django.db import connection

    from bots.models import Message

    pool = corpus.pool
    ids = [s.pk for s in sessions]

    def message_rows():
        for session in sessions:
            for seq, (role, i, moment) in enumerate(plan[session.pk], start=1):
                yield (
                    session.pk,
                    seq,
                    role,
                    "chat",
                    pool.texts[role][i],
                    "complete",
                    pool.tokens[role][i],
                    False,
                    "",
                    "[]",
                    "",
                    "",
                    "",
                    "",
                    "",
                    "",
                    False,
                    moment,
                    moment,
                    0,
                )

    _copy(
        Message._meta.db_table,
        [
            "session_id",
            "seq",
            "role",
            "kind",
            "content",
            "status",
            "token_count",
            "pinned",
            "client_id",
            "tool_calls",
            "tool_call_id",
            "tool_name",
            "model",
            "finish_reason",
            "error_code",
            "error_message",
            "stop_requested",
            "created_at",
            "updated_at",
            "hop",
        ],
        message_rows(),
    )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, session_id, seq FROM bots_message WHERE session_id = ANY(%s)", [ids]
        )
        message_ids = cursor.fetchall()
        # Each session's messages are covered by its summary, for the seat of the corpus's bot.
        pairs = [(s.pk, summary_of[s.pk]) for s in sessions]
        cursor.execute(
            "INSERT INTO compaction_summarycoverage (summary_id, bot_id, message_id) "
            "SELECT s.summary_id, %s, m.id FROM bots_message m JOIN (VALUES "
            + ", ".join(["(CAST(%s AS BIGINT), CAST(%s AS BIGINT))"] * len(pairs))
            + ") AS s(session_id, summary_id) ON m.session_id = s.session_id",
            [corpus.bot.pk, *(v for pair in pairs for v in pair)],
        )
    return message_ids


def _copy_index(
    corpus: Corpus,
    plan: _Plan,
    message_ids: list[tuple[int, int, int]],
    snapshot_of: dict[tuple[int, int], int],
) -> None:
    from memory.models import MessageIndex

    pool, per_snapshot = corpus.pool, corpus.per_snapshot

    def index_rows():
        for pk, sid, seq in message_ids:
            role, i, _ = plan[sid][seq - 1]
            first = (seq - 1) // per_snapshot * per_snapshot + 1
            yield (
                pk,
                sid,
                seq,
                snapshot_of[(sid, first)],
                pool.terms[role][i],
                pool.lengths[role][i],
                model,
                vectors[(i + (role == "assistant") * POOL_OFFSET) % len(vectors)]
                if vectors
                else None,
            )

    model, vectors = corpus.bot.embedding_model, corpus.vectors
    _copy(
        MessageIndex._meta.db_table,
        [
            "message_id",
            "session_id",
            "seq",
            "record_id",
            "terms",
            "length",
            "embedding_model",
            "embedding",
        ],
        index_rows(),
    )


def _add_sessions(corpus: Corpus, count: int) -> None:
    from django.db import transaction

    from bots.models import ChatSession
    from memory.models import MemoryRecord

    per_session = corpus.per_session
    first_number = len(corpus.session_ids)
    with transaction.atomic():
        sessions = ChatSession.objects.bulk_create(
            ChatSession(
                user=corpus.user,
                bot=corpus.bot,
                title=f"chat {first_number + i + 1}",
                last_seq=per_session,
            )
            for i in range(count)
        )
        plan = _plan(corpus, sessions, first_number)
        summary_of = _add_summaries(corpus, sessions, plan)
        snapshot_of = _copy_snapshots(corpus, sessions, plan)
        message_ids = _copy_messages(corpus, sessions, plan, summary_of)
        _copy_index(corpus, plan, message_ids, snapshot_of)
        rng = random.Random(first_number)
        MemoryRecord.objects.bulk_create(
            MemoryRecord(
                scope=MemoryRecord.Scope.SESSION,
                session=session,
                kind=MemoryRecord.Kind.INFO,
                name=f"note-{n}",
                description=f"{_pick(rng, 'name')}'s plans for {_pick(rng, 'place')}",
                body=make_text(rng, "user"),
            )
            for session in sessions
            for n in range(SESSION_INFOS)
        )
    corpus.session_ids.extend(s.pk for s in sessions)


def tables_analyze() -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        for table in (
            "bots_chatsession",
            "bots_message",
            "compaction_summary",
            "memory_memoryrecord",
            "memory_messageindex",
        ):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    return time.perf_counter() - started


def row_counts(corpus: Corpus) -> dict[str, int]:
    """What the corpus holds, counted in the database (the smoke test checks these)."""
    from bots.models import ChatSession, Message
    from compaction.models import Summary, SummaryCoverage
    from memory.models import MemoryRecord, MessageIndex

    sessions = ChatSession.objects.filter(bot=corpus.bot)
    return {
        "sessions": sessions.count(),
        "messages": Message.objects.filter(session__bot=corpus.bot).count(),
        "compacted": SummaryCoverage.objects.filter(message__session__bot=corpus.bot).count(),
        "indexed": MessageIndex.objects.filter(session__bot=corpus.bot).count(),
        "indexed_with_record": MessageIndex.objects.filter(
            session__bot=corpus.bot, record__isnull=False
        ).count(),
        "summaries": Summary.objects.filter(session__bot=corpus.bot).count(),
        "snapshots": MemoryRecord.objects.filter(
            session__bot=corpus.bot, kind=MemoryRecord.Kind.SNAPSHOT
        ).count(),
        "infos": MemoryRecord.objects.filter(kind=MemoryRecord.Kind.INFO).count(),
    }
