"""Smoke test of bench/memory_search.py: its seeding at tiny sizes, exact row counts, and one
search over what it wrote. No timing is asserted."""

import pytest

from bench import memory_search, search_seed
from bots.models import ChatSession, Message
from memory.models import MessageIndex
from memory.queries import records_search


@pytest.fixture(scope="module")
def pool():
    return memory_search.build_pool(300)


def test_texts_are_varied(pool):
    for role in ("user", "assistant"):
        assert len(pool.texts[role]) == 300
        assert len(set(pool.texts[role])) == 300
        assert all(pool.terms[role]) and all(n > 0 for n in pool.lengths[role])
    assert len(set(memory_search.QUESTIONS)) == len(memory_search.QUESTIONS) == 50


@pytest.mark.django_db
def test_grow_in_place_exact_counts(pool):
    corpus = memory_search.corpus_start(pool=pool, per_session=20, per_snapshot=5)
    memory_search.grow(corpus, 40)
    assert memory_search.row_counts(corpus) == {
        "sessions": 2,
        "messages": 40,
        "compacted": 40,
        "indexed": 40,
        "indexed_with_record": 40,
        "summaries": 2,
        "snapshots": 8,
        "infos": search_seed.BOT_INFOS + 2 * search_seed.SESSION_INFOS,
    }
    memory_search.grow(corpus, 100)
    assert memory_search.row_counts(corpus) == {
        "sessions": 5,
        "messages": 100,
        "compacted": 100,
        "indexed": 100,
        "indexed_with_record": 100,
        "summaries": 5,
        "snapshots": 20,
        "infos": search_seed.BOT_INFOS + 5 * search_seed.SESSION_INFOS,
    }
    assert len(corpus.session_ids) == 5

    # Each message is held by the snapshot of its stretch of 5, and search finds messages.
    row = MessageIndex.objects.select_related("record").get(
        session_id=corpus.session_ids[-1], seq=7
    )
    assert (row.record.first_seq, row.record.last_seq) == (6, 10)
    assert row.record.name == "snapshot_6_10"
    session = ChatSession.objects.get(pk=corpus.session_ids[-1])
    said = Message.objects.get(session=session, seq=7).content
    hits = records_search(session=session, query=said)
    assert any(7 in hit.seqs for hit in hits)


@pytest.mark.django_db
def test_words_once_searches_by_words_only_and_gives_the_model_back(pool, monkeypatch):
    from chat_platform.llm import builtin

    corpus = memory_search.corpus_start(
        pool=pool, per_session=20, per_snapshot=5, embedding_model="builtin/embed"
    )
    memory_search.grow(corpus, 20)
    session = ChatSession.objects.select_related("bot").get(pk=corpus.session_ids[0])
    embedded = []
    real = builtin.embed
    monkeypatch.setattr(builtin, "embed", lambda m, t: embedded.append(t) or real(m, t))

    assert memory_search.words_once(session, memory_search.QUESTIONS[0]) >= 0
    assert (embedded, session.bot.embedding_model) == ([], "builtin/embed")
    memory_search.search_once(session, memory_search.QUESTIONS[0])
    assert embedded == [[memory_search.QUESTIONS[0]]]


@pytest.mark.django_db
def test_one_search_costs_a_fixed_number_of_statements(pool):
    """records_search as the bench runs it (hybrid, the built-in model): the statements one
    search sends through Django, each listed, plus the vector read on its own binary cursor
    (docs/performance.md, "Search latency"). The first search of a session in a process reads
    its vectors; the next ones check their version instead (one statement through Django,
    memory/vector_cache.py): the same count either way. The info records matching are read
    once, with their excerpts (memory.search.search_ranked_records; one statement less than
    before issue 33's third pass)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from memory import embeddings, vector_cache

    corpus = memory_search.corpus_start(
        pool=pool, per_session=20, per_snapshot=5, embedding_model="builtin/embed"
    )
    memory_search.grow(corpus, 20)
    session = ChatSession.objects.select_related("bot").get(pk=corpus.session_ids[0])
    question = Message.objects.get(session=session, seq=7).content
    records_search(session=session, query=question)  # warm: the model loaded
    counted = []
    for kept in (False, True):
        if not kept:
            vector_cache.cache.clear()
        reads = []
        real = embeddings._vector_chunks
        with CaptureQueriesContext(connection) as captured:
            embeddings._vector_chunks = lambda params: reads.append(params) or real(params)
            try:
                hits = records_search(session=session, query=question)
            finally:
                embeddings._vector_chunks = real
        assert any(7 in hit.seqs for hit in hits)
        firsts = [" ".join(q["sql"].split())[:90] for q in captured.captured_queries]
        counted.append((len(captured.captured_queries), len(reads), firsts))
    assert [(n, r) for n, r, _ in counted] == [(7, 1), (8, 0)], counted
    assert "md5(string_agg" in " ".join(counted[1][2])


@pytest.mark.django_db
def test_a_hybrid_ranking_is_read_for_its_lines_in_one_query(pool, monkeypatch):
    """The fill reads the transcript lines of a whole hybrid ranking (its lexical candidates and
    up to VECTOR_CANDIDATES by meaning) in one query, not in rounds of 60 (docs/performance.md,
    "Search latency")."""
    from memory import queries, search_hits

    corpus = memory_search.corpus_start(
        pool=pool, per_session=300, per_snapshot=50, embedding_model="builtin/embed"
    )
    memory_search.grow(corpus, 300)
    session = ChatSession.objects.select_related("bot").get(pk=corpus.session_ids[0])
    fills, reads = [], []
    real_fill, real_lines = search_hits.fill, search_hits._message_lines
    monkeypatch.setattr(queries, "fill", lambda s, r, **k: fills.append(r) or real_fill(s, r, **k))
    monkeypatch.setattr(
        search_hits, "_message_lines", lambda s, m, **k: reads.append(m) or real_lines(s, m, **k)
    )

    hits = records_search(session=session, query="What did we say about the weather this week?")

    assert hits
    assert len(fills[0]) > 60  # more than the first round read before
    assert len(reads) == 1
