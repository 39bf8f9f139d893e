"""Does message search stay fast as one user's history with a bot grows? (issue 16, item 6)

What it measures
----------------
``memory.queries.records_search`` (the function the ``search_records`` tool and the records
API's ``?q=`` call) at 10k, 100k and 1M indexed messages. Search is per session (a session's
compacted messages plus the info records readable from it), so what grows is the size of the
tables and indexes that serve it: one user, one bot, and sessions of ``--per-session`` (1,000)
compacted messages each — 10, 100, 1,000 sessions — grown in place, so one run measures all
three sizes on the same data.

Every session looks like one a compacting bot leaves behind:

* messages alternating user / assistant, English chit-chat generated from word lists with a
  seeded random (Zipf-like word choice, so some words are in a large share of the messages and
  others in about one in a thousand; names, places, numbers and times said in passing), each
  dated;
* all of them compacted by one ``compaction.Summary`` of the session (its bot's coverage rows);
* one snapshot ``MemoryRecord`` per ``--per-snapshot`` (50) messages, its body the transcript
  of those messages (``[seq] stamp role: text``, as a compaction writes it; the record search
  trigger indexes it), each message indexed in ``MessageIndex`` with its ``memory.terms.terms``
  and held by that snapshot;
* two session-scoped info records per session, and 30 bot-scoped ones readable from all.

The bot embeds with its default model, the built-in ``builtin/embed`` (``--embedding``; ``""`` =
words only), so every search embeds the question in-process and fuses the session's vectors
with the words (``memory.embeddings``): each indexed message carries a vector, one of 4,096
random unit vectors of the model's size (384) — what a search reads and multiplies is what real
vectors cost; what they rank is ``bench/memory_retrieval.py``'s subject. The question embedded
alone is timed too (``query embedding p50 / p95``).

Loading is bulk: PostgreSQL COPY in batches of sessions; the texts come from a pool of distinct
generated texts (``POOL_TEXTS`` per role), their terms and token counts computed once and reused
across rows (a text recurs across sessions, rarely within one). After each growth step
``VACUUM (ANALYZE)`` of the loaded tables — the state autovacuum keeps a live table in (fresh
planner statistics, the GIN pending list merged).

At each size, after a warm-up pass (every question once, on a session that is not measured), each of
``QUESTIONS`` (50 natural questions, rare and common words mixed, "When did we talk about the boat
trip?") is asked once in each of ``--sessions`` (5) random sessions: ``records_search(session=…,
query=question)`` timed from the outside (wall clock, one process, the database on this machine).
Printed per size: p50 / p95 / max of ``records_search``, and beside it p50 / p95 of the same
searches by words only (plain BM25: the bot's embedding model blanked, nothing embedded); of its
mean, how much was spent inside ``cursor.execute`` (round trips, server, fetch) and outside it
(Python: the ORM, ranking, token counting), and the queries per search; p50 / p95 of its candidate
step alone (``memory.search.messages_ranked``, timed in a second pass); the mean number of candidate
messages and of hits; the machine's load average (the machine may be shared: read the times with
it); then the two ratios and whether the goal is met; at the largest size the ``EXPLAIN (ANALYZE)``
plan of the candidate query (``memory.search._PG_CANDIDATES``) for one rare and one common question,
so a reader sees which index served it.

Goal (issue 16): p95 at 1M <= 2 x p95 at 10k, and <= 50 ms; issue 33: p95 <= 50 ms at 100k with
the built-in embedding model, the question's embedding included.

The parts: ``search_text`` (the generated messages and questions), ``search_seed`` (loading).

    .venv/bin/python bench/memory_search.py [--sizes 10000,100000,1000000] [--quick] [--keep]
        [--embedding MODEL]
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench_search; the bench
    # drops and re-creates that database (its name must contain "bench") and drops it at the
    # end unless --keep. REDIS_URL is ignored.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

from search_seed import (  # noqa: E402  # noqa: E402
    PER_SESSION,
    PER_SNAPSHOT,
    Corpus,
    corpus_start,
    grow,
    row_counts,
    tables_analyze,
)
from search_text import QUESTIONS, build_pool  # noqa: E402

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/chat_bench_search"
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
SESSIONS_MEASURED = 5
POOL_TEXTS = 60_000  # distinct texts per role
GOAL_RATIO = 2.0
GOAL_MS = 50.0


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Measured:
    size: int
    total_ms: list[float] = field(default_factory=list)
    sql_ms: list[float] = field(default_factory=list)  # inside cursor.execute, per search
    queries: list[int] = field(default_factory=list)
    candidates_ms: list[float] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    embed_ms: list[float] = field(default_factory=list)  # the question embedded alone
    # records_search again with the bot's embedding model blanked: plain BM25 (words only)
    words_ms: list[float] = field(default_factory=list)
    load: float = 0.0  # the machine's 1-minute load average after measuring


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))
    return ordered[rank]


class _SqlClock:
    """Wall time spent in ``cursor.execute`` (round trip, server, fetch), and how many calls."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


def search_once(session, question: str) -> tuple[float, int, float, int]:
    """One ``records_search``: (ms, hits, ms inside SQL, queries)."""
    from django.db import connection

    from memory.queries import records_search

    clock = _SqlClock()
    with connection.execute_wrapper(clock):
        started = time.perf_counter()
        hits = records_search(session=session, query=question)
        elapsed = time.perf_counter() - started
    return elapsed * 1000, len(hits), clock.seconds * 1000, clock.calls


def candidates_once(session, question: str) -> tuple[float, int]:
    from memory import search
    from memory.terms import query_terms

    wanted = query_terms(search.clean_query(question), search.QUERY_MAX_TERMS)
    started = time.perf_counter()
    scored, _ = search.messages_ranked(session_id=session.pk, query=wanted)
    return (time.perf_counter() - started) * 1000, len(scored)


def words_once(session, question: str) -> float:
    """One ``records_search`` by words only (plain BM25: the bot's embedding model blanked for
    the call, nothing embedded): ms."""
    model, session.bot.embedding_model = session.bot.embedding_model, ""
    try:
        return search_once(session, question)[0]
    finally:
        session.bot.embedding_model = model


def embed_once(session, question: str) -> float:
    """The question embedded alone, as search embeds it (the bot's model, the gateway): ms."""
    from memory import embeddings

    started = time.perf_counter()
    embeddings.query_vector(session.bot, question, user_id=session.user_id)
    return (time.perf_counter() - started) * 1000


def measure(corpus: Corpus, size: int, *, sessions: int, seed: int) -> Measured:
    from bots.models import ChatSession

    rng = random.Random(seed)
    chosen = rng.sample(corpus.session_ids, min(len(corpus.session_ids), sessions + 1))
    loaded = {s.pk: s for s in ChatSession.objects.select_related("bot").filter(pk__in=chosen)}
    warm, measured = loaded[chosen[0]], [loaded[pk] for pk in chosen[1:]] or [loaded[chosen[0]]]
    for question in QUESTIONS:
        search_once(warm, question)
        candidates_once(warm, question)
    result = Measured(size=size)
    asks = [(session, question) for session in measured for question in QUESTIONS]
    rng.shuffle(asks)
    for session, question in asks:
        elapsed, hits, sql_ms, queries = search_once(session, question)
        result.total_ms.append(elapsed)
        result.hits.append(hits)
        result.sql_ms.append(sql_ms)
        result.queries.append(queries)
    for session, question in asks:
        elapsed, found = candidates_once(session, question)
        result.candidates_ms.append(elapsed)
        result.candidates.append(found)
        if session.bot.embedding_model:
            result.embed_ms.append(embed_once(session, question))
            result.words_ms.append(words_once(session, question))
    result.load = os.getloadavg()[0]
    return result


def explain_candidates(corpus: Corpus, question: str) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the candidate query as ``messages_ranked`` sends it."""
    from django.db import connection

    from memory import search
    from memory.terms import query_terms

    wanted = query_terms(search.clean_query(question), search.QUERY_MAX_TERMS)
    ored = " || ".join(["plainto_tsquery('simple', %s)"] * len(wanted))
    scope = search._SCOPE_SESSION.replace("{t}", "memory_messageindex.")
    sql = search._PG_CANDIDATES.replace("{scope}", scope).replace("{query}", ored)
    session_id = corpus.session_ids[len(corpus.session_ids) // 2]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", [session_id] * 3 + wanted)
        return [row[0] for row in cursor.fetchall()]


def _plan_summary(lines: list[str]) -> list[str]:
    keep = (
        "Scan",
        "Bitmap",
        "Index Cond",
        "Recheck Cond",
        "Filter",
        "Rows Removed",
        "Heap Blocks",
        "Buffers",
        "Planning Time",
        "Execution Time",
        "->",
    )
    return [ln for ln in lines if any(k in ln for k in keep)]


# --- database -----------------------------------------------------------------------------------


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def database_fresh(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    with _admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_drop(url: str) -> None:
    from django.db import connections

    connections.close_all()
    database_fresh(url)


# --- main ---------------------------------------------------------------------------------------


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--quick", action="store_true", help="10k and 100k only (a smoke run)")
    parser.add_argument("--per-session", type=int, default=PER_SESSION)
    parser.add_argument("--per-snapshot", type=int, default=PER_SNAPSHOT)
    parser.add_argument("--sessions", type=int, default=SESSIONS_MEASURED)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    parser.add_argument(
        "--embedding",
        default="builtin/embed",
        help="the bot's embedding model (default: the built-in one, every message with a "
        'vector; "" = words only)',
    )
    return parser.parse_args()


def _database() -> str:
    """A fresh, migrated database; its URL."""
    os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DATABASE_POOL", "false")
    url = os.environ["DATABASE_URL"]
    database_fresh(url)
    from _django import setup

    started = time.perf_counter()
    setup()
    print(
        f"database {url.rsplit('/', 1)[1]} created and migrated in "
        f"{time.perf_counter() - started:.1f} s"
    )
    return url


def _corpus(options: argparse.Namespace) -> Corpus:
    started = time.perf_counter()
    pool = build_pool(POOL_TEXTS)
    print(
        f"text pool: {len(pool.texts['user']):,} user + {len(pool.texts['assistant']):,} "
        f"assistant distinct texts, terms and tokens in {time.perf_counter() - started:.1f} s"
    )
    corpus = corpus_start(
        pool=pool,
        per_session=options.per_session,
        per_snapshot=options.per_snapshot,
        embedding_model=options.embedding,
    )
    print(
        f"bot embedding model: {options.embedding or '(none: words only)'}"
        + (
            f"; {len(corpus.vectors):,} random unit vectors stored with the messages, the "
            "question embedded by the model"
            if corpus.vectors
            else ""
        )
    )
    return corpus


def _grow_and_measure(
    corpus: Corpus, sizes: tuple[int, ...], options: argparse.Namespace
) -> tuple[list[Measured], list[tuple[str, list[str]]]]:
    results: list[Measured] = []
    plans: list[tuple[str, list[str]]] = []
    for size in sizes:
        seconds = grow(corpus, size)
        vacuum = tables_analyze()
        counts = row_counts(corpus)
        print(
            f"{size:>9,}: {counts['sessions']:,} sessions, {counts['indexed']:,} indexed messages, "
            f"{counts['snapshots']:,} snapshots, {counts['infos']:,} info records; "
            f"grown in {seconds:.0f} s, VACUUM ANALYZE {vacuum:.0f} s"
        )
        results.append(measure(corpus, size, sessions=options.sessions, seed=size))
        if size == sizes[-1]:
            for question in (QUESTIONS[0], QUESTIONS[2]):
                plans.append((question, explain_candidates(corpus, question)))
    return results, plans


def _table(results: list[Measured], options: argparse.Namespace) -> None:
    print()
    print(
        f"records_search, {len(QUESTIONS)} questions x {options.sessions} sessions per size "
        f"(ms; warm-up pass first)"
    )
    header = f"{'':>22}" + "".join(f"{m.size:>12,}" for m in results)
    print(header)
    rows = (
        ("p50", lambda m: f"{statistics.median(m.total_ms):12.1f}"),
        ("p95", lambda m: f"{percentile(m.total_ms, 0.95):12.1f}"),
        ("words only (BM25) p50", lambda m: f"{statistics.median(m.words_ms or [0]):12.1f}"),
        ("words only (BM25) p95", lambda m: f"{percentile(m.words_ms, 0.95):12.1f}"),
        ("max", lambda m: f"{max(m.total_ms):12.1f}"),
        ("in SQL mean", lambda m: f"{statistics.mean(m.sql_ms):12.1f}"),
        (
            "outside SQL mean",
            lambda m: f"{statistics.mean(m.total_ms) - statistics.mean(m.sql_ms):12.1f}",
        ),
        ("queries per search", lambda m: f"{statistics.mean(m.queries):12.1f}"),
        ("candidates p50", lambda m: f"{statistics.median(m.candidates_ms):12.1f}"),
        ("candidates p95", lambda m: f"{percentile(m.candidates_ms, 0.95):12.1f}"),
        ("candidate msgs mean", lambda m: f"{statistics.mean(m.candidates):12.0f}"),
        ("hits mean", lambda m: f"{statistics.mean(m.hits):12.1f}"),
        ("query embedding p50", lambda m: f"{statistics.median(m.embed_ms or [0]):12.1f}"),
        ("query embedding p95", lambda m: f"{percentile(m.embed_ms, 0.95):12.1f}"),
        ("load average (1 min)", lambda m: f"{m.load:12.1f}"),
    )
    for label, cell in rows:
        print(f"{label:>22}" + "".join(cell(m) for m in results))


def _verdict(results: list[Measured]) -> None:
    print()
    for m in results:
        if m.embed_ms and m.size in (10_000, 100_000):
            p95 = percentile(m.total_ms, 0.95)
            print(
                f"at {m.size:,} with the question embedded: p50 {statistics.median(m.total_ms):.1f}"
                f" / p95 {p95:.1f} ms (words only {statistics.median(m.words_ms):.1f} / "
                f"{percentile(m.words_ms, 0.95):.1f} ms)"
                + (f"  (issue 33 goal: p95 <= {GOAL_MS:g} ms)" if m.size == 100_000 else "")
            )
    small, large = results[0], results[-1]
    p95_small, p95_large = percentile(small.total_ms, 0.95), percentile(large.total_ms, 0.95)
    ratio = p95_large / p95_small if p95_small else float("inf")
    p50_ratio = statistics.median(large.total_ms) / statistics.median(small.total_ms)
    label = f"{large.size:,}/{small.size:,}"
    print(f"p95 ratio {label}: {ratio:.2f}  (goal <= {GOAL_RATIO:g})")
    print(f"p50 ratio {label}: {p50_ratio:.2f}")
    print(f"p95 at {large.size:,}: {p95_large:.1f} ms  (goal <= {GOAL_MS:g} ms)")
    met = ratio <= GOAL_RATIO and p95_large <= GOAL_MS
    if large.size < 1_000_000:
        print(
            f"goal {'met' if met else 'NOT met'} at {large.size:,} "
            "(the goal is stated at 1,000,000)"
        )
    else:
        print(
            f"goal {'met' if met else 'NOT met'}: p95 at 1M <= {GOAL_RATIO:g} x p95 at 10k "
            f"and <= {GOAL_MS:g} ms"
        )


def main() -> None:
    options = _options()
    sizes = QUICK_SIZES if options.quick else tuple(int(n) for n in options.sizes.split(","))
    sizes = tuple(sorted(sizes))
    url = _database()
    corpus = _corpus(options)
    results, plans = _grow_and_measure(corpus, sizes, options)
    _table(results, options)
    for question, lines in plans:
        print()
        print(f"EXPLAIN (ANALYZE) candidate query at {sizes[-1]:,}, {question!r}:")
        for ln in _plan_summary(lines):
            print(f"  {ln}")
    _verdict(results)
    if not options.keep:
        database_drop(url)


if __name__ == "__main__":
    main()
