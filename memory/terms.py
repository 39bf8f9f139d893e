"""The words search sees: one tokenizer for the index and the query, on every database.

A text's terms are its words, lower case, with English stop words dropped, each reduced to its
Snowball English stem (the Porter2 algorithm that PostgreSQL's ``english`` configuration uses,
from the ``snowballstemmer`` package): "Rowing" and "rowed" are ``row``, "Ravi's" is ``ravi``.
Computing them here rather than in each database's parser means PostgreSQL and SQLite index the
same terms, so embedded mode ranks exactly what real mode ranks, and BM25 can be computed from
the terms themselves (PostgreSQL's ``ts_rank`` has no inverse document frequency).
"""

from functools import lru_cache

import snowballstemmer

from chat_platform.stopwords import ENGLISH, WORD

_STEMMER = snowballstemmer.stemmer("english")
# A term longer than this is not a word anyone searches for (a hash, a run of letters).
TERM_MAX_CHARS = 40
# Longer words are not cached (a hash, a run of letters): the cache holds only short keys.
WORD_CACHED_CHARS = 2 * TERM_MAX_CHARS


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order, repeats kept (term frequency counts)."""
    out: list[str] = []
    for match in WORD.finditer(text):  # not findall: a long text's words are never all held
        word = match.group()
        out += _word_terms(word) if len(word) <= WORD_CACHED_CHARS else _word_terms_of(word)
    return out


def _word_terms_of(word: str) -> tuple[str, ...]:
    """The terms of one word as ``WORD`` matched it: none for a stop word, else its stemmed
    parts (``"Ravi's"`` is ``("ravi",)``)."""
    word = word.lower().replace("\u2019", "'")
    if word in ENGLISH:
        return ()
    if word.endswith("'s"):
        word = word[:-2]
    return tuple(
        _stem(part)
        for part in word.split("'")
        if part and part not in ENGLISH and len(part) <= TERM_MAX_CHARS
    )


# A chat repeats its words: each distinct word is lowered, checked and stemmed once, not at
# every occurrence (indexing an import's messages spent most of its CPU here).
_word_terms = lru_cache(maxsize=32768)(_word_terms_of)


def has_distinct_terms(text: str, count: int) -> bool:
    """``len(set(terms(text))) >= count``, reading ``text`` only until it has found ``count``
    distinct terms (search asks it of every candidate message: most reach it in a few words)."""
    if count <= 0:
        return True
    found: set[str] = set()
    for match in WORD.finditer(text):
        word = match.group()
        found.update(_word_terms(word) if len(word) <= WORD_CACHED_CHARS else _word_terms_of(word))
        if len(found) >= count:
            return True
    return False


def query_terms(text: str, limit: int) -> list[str]:
    """The distinct terms of a query, first seen first, at most ``limit``."""
    return list(dict.fromkeys(terms(text)))[:limit]
