"""Search terms (``memory.terms``) work each distinct word out once: indexing an import's
messages lowered, checked and stemmed every occurrence of every word, most of its CPU."""

from memory import terms as terms_module
from memory.terms import terms


def test_a_repeated_word_is_worked_out_once_and_a_long_one_is_never_kept():
    cache = terms_module._word_terms
    cache.cache_clear()
    long_word = "x" * (terms_module.WORD_CACHED_CHARS + 1)
    text = "Rowing rowed the Rowing boat, Ravi's boat. " * 500 + f"{long_word} {long_word}"
    assert terms(text) == ["row", "row", "row", "boat", "ravi", "boat"] * 500
    info = cache.cache_info()
    # five distinct words as written (Rowing, rowed, the, boat, Ravi's), each worked out once;
    # the long word, past the cache's key length, is worked out each time and never kept
    assert (info.misses, info.hits, info.currsize) == (5, 7 * 500 - 5, 5)


def test_has_distinct_terms_answers_what_counting_every_term_answers():
    """``has_distinct_terms`` (search's check for messages that say little) stops reading at
    the count; it answers ``len(set(terms(text))) >= count`` on any text."""
    import random

    from memory.terms import has_distinct_terms

    words = [
        "the", "a", "Rowing", "rowed", "boat", "Ravi's", "it's", "we're", "Mei", "café",
        "東京", "x" * 90, "42", "10:30", "don't", "o'clock", "and", "BOAT", "boats", "trip",
    ]  # fmt: skip
    rng = random.Random(6)
    texts = ["", "   ", "?!", "Best feeling in the world."]
    texts += [" ".join(rng.choices(words, k=rng.randint(0, 14))) for _ in range(400)]
    for text in texts:
        distinct = len(set(terms(text)))
        for count in range(-1, 9):
            assert has_distinct_terms(text, count) == (distinct >= count), (text, count)
