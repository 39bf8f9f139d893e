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

import re

from django.contrib.postgres.search import SearchHeadline, SearchQuery, SearchRank
from django.db import connection
from django.db.models import F, QuerySet

from chat_platform.llm.builtin.text import STOPWORDS
from chat_platform.textcheck import text_is_storable
from memory.models import MemoryRecord

QUERY_MAX_CHARS = 1000
QUERY_MAX_TERMS = 16
HIGHLIGHT = ("**", "**")
FRAGMENT_DELIMITER = " … "
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
    if connection.vendor == "postgresql":
        return _postgres(records, text, limit)
    if connection.vendor == "sqlite":
        return _sqlite(records, text, limit)
    raise NotImplementedError(f"No record search for {connection.vendor}")


# --- PostgreSQL -------------------------------------------------------------------------------


def _pg_queries(text: str) -> list[SearchQuery]:
    queries = [SearchQuery(text, search_type="websearch", config=PG_CONFIG)]
    terms = query_terms(text)
    if terms:
        any_word = SearchQuery(terms[0], search_type="plain", config=PG_CONFIG)
        for term in terms[1:]:
            any_word |= SearchQuery(term, search_type="plain", config=PG_CONFIG)
        queries.append(any_word)
    return queries


def _postgres(records: QuerySet[MemoryRecord], text: str, limit: int) -> Ranked:
    for query in _pg_queries(text):
        rows = list(
            records.filter(search_vector=query)
            .annotate(rank=SearchRank(F("search_vector"), query))
            .order_by("-rank", "-updated_at", "-id")
            .values_list("pk", "rank")[:limit]
        )
        if rows:
            break
    else:
        return []
    # Headlines only for the hits: ts_headline re-parses the whole body.
    excerpts = dict(
        MemoryRecord.objects.filter(pk__in=[pk for pk, _ in rows])
        .annotate(
            excerpt=SearchHeadline(
                "body",
                query,
                config=PG_CONFIG,
                start_sel=HIGHLIGHT[0],
                stop_sel=HIGHLIGHT[1],
                max_words=60,
                min_words=20,
            )
        )
        .values_list("pk", "excerpt")
    )
    return [(pk, float(rank), excerpts.get(pk, "")) for pk, rank in rows]


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
