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


@lru_cache(maxsize=65536)
def _stem(word: str) -> str:
    return str(_STEMMER.stemWord(word))


def terms(text: str) -> list[str]:
    """The search terms of ``text``, in order, repeats kept (term frequency counts)."""
    out = []
    for match in WORD.finditer(text):
        word = match.group().lower().replace("\u2019", "'")
        if word in ENGLISH:
            continue
        if word.endswith("'s"):
            word = word[:-2]
        for part in word.split("'"):
            if part and part not in ENGLISH and len(part) <= TERM_MAX_CHARS:
                out.append(_stem(part))
    return out


def query_terms(text: str, limit: int) -> list[str]:
    """The distinct terms of a query, first seen first, at most ``limit``."""
    return list(dict.fromkeys(terms(text)))[:limit]
