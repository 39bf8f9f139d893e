"""Full-text ranking over memory records, one entry point with a vendor branch inside.

PostgreSQL: ``websearch_to_tsquery`` against the trigger-maintained ``search_vector`` (GIN),
ranked by ``ts_rank`` (name > description > body weights), excerpts by ``ts_headline``.
SQLite (embedded mode): FTS5 ``MATCH`` ranked by ``bm25`` with the same column weights, excerpts
by ``snippet()``.

The query is data, never syntax: on PostgreSQL it is a bound parameter of
``websearch_to_tsquery``, which accepts any text; on SQLite it is reduced to its words, each
written as an FTS5 string literal (``"word"``), so quotes, ``*``, ``NEAR``, ``OR``, ``-``, column
filters and SQL fragments are just words or nothing. Text PostgreSQL or UTF-8 cannot carry (NUL,
lone surrogates; ``chat_platform.textcheck``) is dropped first.

Two passes: every word must match; when nothing does, any word may (ranked), so a question in
full sentences still finds the record holding the answer.
"""

import math
import re
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection
from django.db.models import F, QuerySet

from chat_platform.stopwords import QUERY_STOPWORDS as STOPWORDS
from chat_platform.stopwords import WORD
from chat_platform.textcheck import text_is_storable
from chat_platform.transcript import LINE_LABEL
from memory.models import MemoryRecord
from memory.terms import terms as message_terms

QUERY_MAX_CHARS = 1000
QUERY_MAX_TERMS = 16
HIGHLIGHT = ("**", "**")
FRAGMENT_DELIMITER = " … "
# An excerpt that starts inside a transcript line gets the line's start back (its label: who
# said it and when) when at most this many characters lie between the label and the excerpt.
LINE_START_MAX_CHARS = 80
# ... and the rest of the line it ends in, up to this many characters.
LINE_END_MAX_CHARS = 240
# A line holding only a label cut short: "[307] 2024-03-08 13:56Z user".
_CUT_LABEL = re.compile(r"\[\d+\][^:\n]{0,60}")
PG_CONFIG = "english"
# bm25 weights (name 10, description 4, body 1) as ts_rank weighs A > B > C; higher rank is
# better on both backends (bm25 is negated). Excerpts: 48 tokens (FTS5 allows at most 64).
_FTS_SQL = """
SELECT rowid,
       -bm25(memory_record_fts, 10.0, 4.0, 1.0),
       snippet(memory_record_fts, 2, %s, %s, %s, 48)
FROM memory_record_fts
WHERE memory_record_fts MATCH %s AND rowid IN ({readable})
ORDER BY bm25(memory_record_fts, 10.0, 4.0, 1.0), rowid DESC
LIMIT %s
"""

_WORD = re.compile(r"\w+")

Ranked = list[tuple[int, float, str]]  # (record id, rank: higher is better, excerpt)


def clean_query(text: str) -> str:
    text = text[:QUERY_MAX_CHARS]
    if not text_is_storable(text):
        text = "".join(ch for ch in text if text_is_storable(ch))
    return text.strip()


def query_terms(text: str) -> list[str]:
    """Distinct lower-case words of the query without stop words, at most QUERY_MAX_TERMS."""
    words = (w.lower() for w in _WORD.findall(text))
    terms = [w for w in dict.fromkeys(words) if w not in STOPWORDS]
    return terms[:QUERY_MAX_TERMS]


def search_ranked(*, records: QuerySet[MemoryRecord], query: str, limit: int) -> Ranked:
    """Up to ``limit`` (id, rank, excerpt) of ``records`` matching ``query``, best first
    (ties: newest first)."""
    text = clean_query(query)
    if not text or limit <= 0:
        return []
    bodies: dict[int, str] | None = None
    if connection.vendor == "postgresql":
        ranked, rows = _postgres(lambda: records, text, limit)
        bodies = {pk: record.body for pk, record in rows.items()}
    elif connection.vendor == "sqlite":
        ranked = _sqlite(records, text, limit)
    else:
        raise NotImplementedError(f"No record search for {connection.vendor}")
    return _with_line_labels(ranked, bodies)


# The rows of one PostgreSQL ranking pass, given the values of its query (``pg_pass_binds``),
# run by a statement the caller compiled once (``memory.queries``): (record id, rank), best first.
PassRows = Callable[[dict[str, str]], list[tuple[int, float]]]


def search_ranked_records(
    *,
    records: Callable[[], QuerySet[MemoryRecord]],
    query: str,
    limit: int,
    pass_rows: PassRows | None = None,
) -> list[tuple[MemoryRecord, float, str]]:
    """``search_ranked`` with each hit's record (``search_vector`` not loaded) in place of its
    id, read once: on PostgreSQL with the excerpts (docs/performance.md). A hit deleted between
    the ranking and the read is left out. ``records``: the function that builds them (called only
    when a pass needs it); ``pass_rows``: on PostgreSQL the ranking passes as the caller runs
    them."""
    text = clean_query(query)
    if not text or limit <= 0:
        return []
    if connection.vendor == "postgresql":
        ranked, rows = _postgres(records, text, limit, pass_rows)
    elif connection.vendor == "sqlite":
        ranked = _sqlite(records(), text, limit)
        rows = MemoryRecord.objects.defer("search_vector").in_bulk([pk for pk, _, _ in ranked])
    else:
        raise NotImplementedError(f"No record search for {connection.vendor}")
    bodies = {pk: record.body for pk, record in rows.items()}
    return [
        (rows[pk], rank, excerpt)
        for pk, rank, excerpt in _with_line_labels(ranked, bodies)
        if pk in rows
    ]


def _with_line_labels(ranked: Ranked, bodies: dict[int, str] | None = None) -> Ranked:
    """``bodies``: the hits' bodies when the caller has read them already (PostgreSQL reads
    them with the excerpts: one statement less per search, docs/performance.md)."""
    if not ranked:
        return ranked
    if bodies is None:
        bodies = dict(
            MemoryRecord.objects.filter(pk__in=[pk for pk, _, _ in ranked]).values_list(
                "pk", "body"
            )
        )
    return [
        (pk, rank, with_line_label(bodies.get(pk, ""), excerpt)) for pk, rank, excerpt in ranked
    ]


def _plain(text: str) -> str:
    for marker in HIGHLIGHT:
        text = text.replace(marker, "")
    return text


def with_line_label(body: str, excerpt: str) -> str:
    """``excerpt`` of ``body`` in whole transcript lines: ``ts_headline`` and ``snippet()`` start
    at a matched word, which cuts off ``[12] 2024-03-08 13:56Z user:``, and stop after a number
    of words, mid-sentence. The excerpt gets back the start of the line it starts in (so a hit
    says who said it and when) and the rest of the line it ends in, or loses that line when all
    it holds of it is a label cut short. Unchanged where it cannot be placed in the body exactly
    once."""
    text = excerpt.strip(" \u2026")
    plain = _plain(text)
    if FRAGMENT_DELIMITER.strip() in plain or len(plain) < 8 or body.count(plain) != 1:
        return _with_head(body, excerpt)
    at = body.index(plain)
    end = at + len(plain)
    head = body[body.rfind("\n", 0, at) + 1 : at]
    label = LINE_LABEL.match(head)
    if head and label is not None:
        gap = head[label.end() :]
        text = (
            head if len(gap) <= LINE_START_MAX_CHARS else head[: label.end()] + "\u2026 "
        ) + text
    last = plain.rsplit("\n", 1)[-1]
    if "\n" in text and _CUT_LABEL.fullmatch(last.strip()):
        return text.rsplit("\n", 1)[0]
    line_end = body.find("\n", end)
    tail = body[end : len(body) if line_end < 0 else line_end]
    if len(tail) > LINE_END_MAX_CHARS:
        tail = tail[:LINE_END_MAX_CHARS].rsplit(" ", 1)[0] + " \u2026"
    return text + tail


def _with_head(body: str, excerpt: str) -> str:
    """The excerpt led by the label of the line it starts in (its first line placed alone)."""
    first = _plain(excerpt.split("\n", 1)[0])
    lead = first.strip(" \u2026").split(FRAGMENT_DELIMITER.strip())[0].strip()
    if len(lead) < 8 or body.count(lead) != 1:
        return excerpt
    at = body.index(lead)
    head = body[body.rfind("\n", 0, at) + 1 : at]
    label = LINE_LABEL.match(head)
    if not head or label is None:
        return excerpt
    gap = head[label.end() :]
    prefix = head if len(gap) <= LINE_START_MAX_CHARS else head[: label.end()] + "\u2026 "
    return prefix + excerpt.lstrip(" \u2026")


# --- PostgreSQL -------------------------------------------------------------------------------


def _pg_queries(text: str) -> list[SearchQuery]:
    return [pg_pass_query(**binds) for binds in pg_pass_binds(text)]


def pg_pass_binds(text: str) -> list[dict[str, str]]:
    """The PostgreSQL ranking passes of ``text`` as the values their query is built of
    (``pg_pass_query``): every word (``websearch_to_tsquery``), then any word when there is one."""
    passes = [{"text": text}]
    terms = query_terms(text)
    if terms:
        passes.append({f"term_{index:02}": term for index, term in enumerate(terms)})
    return passes


def pg_pass_query(*, text: str = "", **terms: str) -> SearchQuery:
    """One pass's query: ``text`` (every word), or else its ``terms`` (any word, in order)."""
    if not terms:
        return SearchQuery(text, search_type="websearch", config=PG_CONFIG)
    words = [terms[name] for name in sorted(terms)]
    any_word = SearchQuery(words[0], search_type="plain", config=PG_CONFIG)
    for term in words[1:]:
        any_word |= SearchQuery(term, search_type="plain", config=PG_CONFIG)
    return any_word


def pg_ranked(records: QuerySet[MemoryRecord], query: SearchQuery, limit: int) -> QuerySet:
    """One pass: (record id, rank) of ``records`` matching ``query``, best first (ties newest)."""
    return (
        records.filter(search_vector=query)
        .annotate(rank=SearchRank(F("search_vector"), query))
        .order_by("-rank", "-updated_at", "-id")
        .values_list("pk", "rank")[:limit]
    )


def _postgres(
    records: Callable[[], QuerySet[MemoryRecord]],
    text: str,
    limit: int,
    pass_rows: PassRows | None = None,
) -> tuple[Ranked, dict[int, MemoryRecord]]:
    """The ranked hits, and their records (read with the excerpts, ``search_vector`` not)."""
    for binds in pg_pass_binds(text):
        query = pg_pass_query(**binds)
        if pass_rows is not None:
            rows = pass_rows(binds)
        else:
            rows = list(pg_ranked(records(), query, limit))
        if rows:
            break
    else:
        return [], {}
    # Headlines only for the hits: ts_headline re-parses the whole body.
    read = list(
        MemoryRecord.objects.filter(pk__in=[pk for pk, _ in rows])
        .defer("search_vector")
        .annotate(
            _headline=SearchHeadline(
                "body",
                query,
                config=PG_CONFIG,
                start_sel=HIGHLIGHT[0],
                stop_sel=HIGHLIGHT[1],
                max_words=60,
                min_words=20,
            )
        )
    )
    # The headline taken off the record: a record is the same whoever read it.
    excerpts = {record.pk: record.__dict__.pop("_headline") for record in read}
    return [(pk, float(rank), excerpts.get(pk, "")) for pk, rank in rows], {
        record.pk: record for record in read
    }


# --- SQLite FTS5 ------------------------------------------------------------------------------


def fts5_match_expressions(text: str) -> list[str]:
    """FTS5 MATCH strings: all words, then any word. Every word is an FTS5 string literal; a
    word is ``\\w+``, so it never contains the ``"`` that would end the literal."""
    terms = [f'"{term}"' for term in query_terms(text)]
    if not terms:
        return []
    if len(terms) == 1:
        return terms
    return [" ".join(terms), " OR ".join(terms)]


def _sqlite(records: QuerySet[MemoryRecord], text: str, limit: int) -> Ranked:
    readable_sql, readable_params = records.order_by().values("pk").query.sql_with_params()
    # The readable-records subquery is Django's own compiled SQL; every value is a parameter.
    sql = _FTS_SQL.replace("{readable}", readable_sql)
    start, stop = HIGHLIGHT
    with connection.cursor() as cursor:
        for expression in fts5_match_expressions(text):
            params = [start, stop, FRAGMENT_DELIMITER, expression, *readable_params, limit]
            cursor.execute(sql, params)
            rows = cursor.fetchall()
            if rows:
                return [(pk, float(rank), excerpt or "") for pk, rank, excerpt in rows]
    return []


# --- messages ---------------------------------------------------------------------------------
# Search is at message level (docs/memory.md): every compacted message is a document of its
# session (``MessageIndex``), its terms computed once by ``memory.terms``. The database finds the
# candidates (messages holding any query term; OR semantics), Python ranks them by Okapi BM25
# from the terms themselves, so both vendors rank identically and rare words weigh more than a
# name that is in every other message.

BM25_K1 = 1.2
BM25_B = 0.75

# Each candidate row carries its collection's size and mean length (one round trip). The
# collection is one session's compacted messages (recall: what left the model's context) or every
# indexed message of one user's sessions (search all my chats). Literal SQL; every value is a
# parameter ({scope} and {query} become "%s"-placeholders only).
# Recall's collection: the session's compacted messages, and (``live_before``) its live ones
# older than the message the turn answers, which the answering request may not show.
_SCOPE_SESSION = "{t}session_id = %s AND {t}record_id IS NOT NULL"
_SCOPE_SESSION_LIVE = "{t}session_id = %s AND ({t}record_id IS NOT NULL OR {t}seq < %s)"
# A branch chat's messages before its branch point are copies of its original's (which is
# searched itself): they are left out, so a hit is never listed once per branch. A branch whose
# original was deleted has no ``branch_of`` any more, and its messages are its own.
_SCOPE_USER = (
    "{t}session_id IN (SELECT id FROM bots_chatsession WHERE user_id = %s) AND NOT EXISTS ("
    "SELECT 1 FROM bots_chatsession b WHERE b.id = {t}session_id "
    "AND b.branch_of_id IS NOT NULL AND {t}seq < b.branch_seq)"
)
_PG_CANDIDATES = """
SELECT message_id, seq, record_id, terms, session_id,
       (SELECT count(*) FROM memory_messageindex WHERE {scope}),
       (SELECT coalesce(avg(length), 0) FROM memory_messageindex WHERE {scope})
FROM memory_messageindex
WHERE {scope} AND terms_vector @@ ({query})
"""
_SQLITE_CANDIDATES = """
SELECT m.message_id, m.seq, m.record_id, m.terms, m.session_id,
       (SELECT count(*) FROM memory_messageindex WHERE {scope}),
       (SELECT coalesce(avg(length), 0) FROM memory_messageindex WHERE {scope})
FROM memory_message_fts f JOIN memory_messageindex m ON m.message_id = f.rowid
WHERE memory_message_fts MATCH %s AND {m_scope}
"""


@dataclass(frozen=True)
class MessageScore:
    message_id: int
    seq: int
    record_id: int | None
    score: float
    session_id: int = 0
    # The query terms the message holds and how many distinct terms it has (lexical rankings
    # only: a message the vectors found alone holds none of the question's words).
    holds: frozenset[str] = frozenset()
    distinct_terms: int = 0


@dataclass(frozen=True)
class Collection:
    """A session's indexed messages as BM25 sees them, for one query."""

    documents: int
    mean_length: float
    frequency: dict[str, int]  # query term -> how many messages hold it

    def idf(self, term: str) -> float:
        found = self.frequency.get(term, 0)
        return math.log(1 + (self.documents - found + 0.5) / (found + 0.5))

    def score(self, query: list[str], document: list[str]) -> float:
        counts = Counter(document)
        norm = BM25_K1 * (1 - BM25_B + BM25_B * len(document) / max(self.mean_length, 1.0))
        total = 0.0
        for term in query:
            tf = counts.get(term, 0)
            if tf:
                total += self.idf(term) * tf * (BM25_K1 + 1) / (tf + norm)
        return total


def messages_ranked(
    *,
    query: list[str],
    session_id: int | None = None,
    user_id: int | None = None,
    live_before: int | None = None,
) -> tuple[list[MessageScore], Collection]:
    """Every indexed message holding a term of ``query``, best first (ties: newest first), and
    the statistics they were ranked with. Exactly one scope: ``session_id``, that session's
    compacted messages (recall), and with ``live_before`` its uncompacted ones of a lower seq
    (history the request does not show: ``record_id`` None); ``user_id``, every indexed message
    of that user's sessions, compacted or not (search all my chats: one query over all of
    them)."""
    if (session_id is None) == (user_id is None):
        raise ValueError("messages_ranked needs exactly one of session_id and user_id")
    empty = Collection(documents=0, mean_length=0.0, frequency={})
    if not query:
        return [], empty
    if session_id is None:
        scope, owner = _SCOPE_USER, [user_id]
    elif live_before is None:
        scope, owner = _SCOPE_SESSION, [session_id]
    else:
        scope, owner = _SCOPE_SESSION_LIVE, [session_id, live_before]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Every term a bound parameter: ``plainto_tsquery`` of one stored-form word.
            ored = " || ".join(["plainto_tsquery('simple', %s)"] * len(query))
            sql = _PG_CANDIDATES.replace(
                "{scope}", scope.replace("{t}", "memory_messageindex.")
            ).replace("{query}", ored)
            cursor.execute(sql, [*owner, *owner, *owner, *query])
        elif connection.vendor == "sqlite":
            # Each term an FTS5 string literal; a term is word characters, never a quote.
            match = " OR ".join(f'"{term}"' for term in query)
            sql = _SQLITE_CANDIDATES.replace(
                "{scope}", scope.replace("{t}", "memory_messageindex.")
            ).replace("{m_scope}", scope.replace("{t}", "m."))
            cursor.execute(sql, [*owner, *owner, match, *owner])
        else:
            raise NotImplementedError(f"No message search for {connection.vendor}")
        fetched = cursor.fetchall()
    if not fetched:
        return [], empty
    documents, mean_length = fetched[0][5], fetched[0][6]
    rows = [
        (pk, seq, record_id, text.split(), sid) for pk, seq, record_id, text, sid, _, _ in fetched
    ]
    wanted = set(query)
    frequency: Counter[str] = Counter()
    for _, _, _, words, _ in rows:
        frequency.update(wanted.intersection(words))
    collection = Collection(
        documents=int(documents), mean_length=float(mean_length), frequency=dict(frequency)
    )
    scored = [
        MessageScore(
            pk,
            seq,
            record_id,
            collection.score(query, words),
            sid,
            holds=frozenset(wanted.intersection(words)),
            distinct_terms=len(set(words)),
        )
        for pk, seq, record_id, words, sid in rows
    ]
    scored.sort(key=lambda s: (-s.score, -s.seq))
    return scored, collection


# --- excerpts of one message ------------------------------------------------------------------

EXCERPT_BEFORE_CHARS = 80
EXCERPT_MAX_CHARS = 320


def message_excerpt(text: str, wanted: list[str]) -> str:
    """A one-line excerpt of a message around its first word whose search term is in
    ``wanted``, every such word in the window wrapped in ``**`` (the HIGHLIGHT convention the
    memory panel renders as <mark>). The message's own ``**`` are dropped first, so every pair
    in the excerpt is a hit."""
    flat = " ".join(text.replace(HIGHLIGHT[0], "").split())
    wanted_set = set(wanted)
    hits = [
        (m.start(), m.end())
        for m in WORD.finditer(flat)
        if wanted_set.intersection(message_terms(m.group()))
    ]
    start = 0
    if hits and hits[0][0] > EXCERPT_BEFORE_CHARS:
        start = flat.rfind(" ", 0, hits[0][0] - EXCERPT_BEFORE_CHARS) + 1
    end = len(flat)
    if end - start > EXCERPT_MAX_CHARS:
        end = flat.rfind(" ", start, start + EXCERPT_MAX_CHARS)
        if end <= start:
            end = start + EXCERPT_MAX_CHARS
    out, at = [], start
    for hit_start, hit_end in hits:
        if hit_start < start or hit_end > end:
            continue
        out += [flat[at:hit_start], HIGHLIGHT[0], flat[hit_start:hit_end], HIGHLIGHT[1]]
        at = hit_end
    out.append(flat[at:end])
    return ("\u2026 " if start else "") + "".join(out) + (" \u2026" if end < len(flat) else "")
