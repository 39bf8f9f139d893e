"""Invariants of the corpus of bench/memory_retrieval.py (issue 16, item 6). No database."""

import re

import pytest

from bench import retrieval_corpus
from chat_platform.llm.builtin.text import STOPWORDS, stem

_WORD = re.compile(r"[^\W_]+(?:'[^\W_]+)*")
# The speakers' names label every stored message, so they say nothing about overlap.
NAMES = {"ravi", "mei"}


def content_words(text: str) -> set[str]:
    return {
        stem(word)
        for word in _WORD.findall(text.lower())
        if word not in STOPWORDS and word not in NAMES and len(word) > 1
    }


@pytest.fixture(scope="module")
def corpus():
    return retrieval_corpus.build()


def test_sizes(corpus):
    assert len(corpus.sessions) >= 20
    assert len(corpus.turns) >= 500
    assert len(corpus.questions) >= 100
    for kind in retrieval_corpus.KINDS:
        assert sum(q.kind == kind for q in corpus.questions) >= 15, kind
    assert {q.kind for q in corpus.questions} == set(retrieval_corpus.KINDS)


def test_two_people_and_unique_ids(corpus):
    assert {t.speaker for t in corpus.turns} == {"Ravi", "Mei"}
    ids = [t.id for t in corpus.turns]
    assert len(ids) == len(set(ids))
    assert len({q.id for q in corpus.questions}) == len(corpus.questions)


def test_every_evidence_id_exists(corpus):
    ids = {t.id for t in corpus.turns}
    for question in corpus.questions:
        assert question.evidence, question.id
        assert set(question.evidence) <= ids, question.id


def test_multi_hop_evidence_spans_two_sessions(corpus):
    for question in corpus.questions:
        if question.kind == "multi-hop":
            sessions = {corpus.turn(i).session for i in question.evidence}
            assert len(sessions) >= 2, question.id


def test_dates_increase_with_session_order(corpus):
    starts = [s.when for s in corpus.sessions]
    assert starts == sorted(starts) and len(set(starts)) == len(starts)
    assert (starts[-1] - starts[0]).days >= 21  # several weeks
    for earlier, later in zip(corpus.sessions, corpus.sessions[1:], strict=False):
        assert earlier.turns[-1].when < later.turns[0].when
    for session in corpus.sessions:
        times = [t.when for t in session.turns]
        assert times == sorted(times)


def test_deterministic(corpus):
    assert retrieval_corpus.build() == corpus


def test_questions_do_not_repeat_their_evidence(corpus):
    fractions = []
    sparse = 0
    for question in corpus.questions:
        asked = content_words(question.text)
        evidence = set().union(*(content_words(corpus.turn(i).text) for i in question.evidence))
        shared = asked & evidence
        assert asked, question.id
        fractions.append(len(shared) / len(asked))
        sparse += len(shared) <= 1
        assert question.text.lower() not in " ".join(
            corpus.turn(i).text.lower() for i in question.evidence
        )
    assert sum(fractions) / len(fractions) < 0.6
    assert sparse >= 20


def test_quick_subset(corpus):
    quick = corpus.subset(5)
    assert len(quick.sessions) == 5
    assert 20 <= len(quick.questions) <= 35
    ids = {t.id for t in quick.turns}
    assert all(set(q.evidence) <= ids for q in quick.questions)


def test_every_miss_is_explained_with_what_would_have_found_it():
    """bench/memory_retrieval.py's reading of a missed evidence turn (issue 16, done when: each
    miss explained with what would fix it), from where it was and its ranks."""
    from bench.memory_retrieval import HIT_LINE, would_fix

    def fix(compacted, shares, words, meaning, hybrid=True, held=40):
        return would_fix(compacted, shares, words, meaning, held, 2000, hybrid=hybrid)

    assert fix(False, True, 3, 4)[0] == "not compacted"
    # Ranked by words through a speaker's name only: that rank says nothing.
    assert fix(True, False, 12, None, hybrid=False) == (
        "meaning",
        "meaning-based retrieval (an embedding model, issue 16 item 5): it shares no word "
        "with the question but a name",
    )
    assert fix(True, False, 300, 250) == (
        "stronger embedding model",
        "a stronger embedding model: ranked 250 by meaning (the first 200 are candidates) and "
        "shares no word but a name; or a result budget of about 12,500 tokens (rank 250, 40 fit)",
    )
    # Ranked by meaning within the candidates, or by words: the budget or the fusion's order.
    assert fix(True, False, 300, 57) == (
        "ranking or budget",
        "a better ranking or a result budget of about 2,850 tokens (rank 57, 40 fit)",
    )
    assert fix(True, True, 80, None, hybrid=False, held=20) == (
        "ranking or budget",
        "a better ranking or a result budget of about 8,000 tokens (rank 80, 20 fit)",
    )
    result = "[12] 2024-03-08 13:56Z Mei: I moved. [40] 2024-03-09 09:00Z Ravi: Noted [3] x"
    assert len(HIT_LINE.findall(result)) == 2
