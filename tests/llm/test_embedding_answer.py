"""What an embedding answer must hold (``chat_platform.llm.gateway.embeddings``): one finite
vector per input, numbers only, all of one size, whichever way it is checked (plain floats take
a path of their own)."""

import math

import pytest

from chat_platform.llm.gateway.embeddings import EmbeddingUnreadable, _embedding_vectors


def _answer(*vectors):
    return {"data": [{"index": i, "embedding": v} for i, v in enumerate(vectors)]}


def test_plain_floats_and_mixed_numbers_are_read_as_floats():
    floats = [0.25, -0.5, 1e29]
    mixed = [1, 0.5, -2]
    assert _embedding_vectors(_answer(floats, mixed), 2) == [[0.25, -0.5, 1e29], [1.0, 0.5, -2.0]]
    assert [type(x) for x in _embedding_vectors(_answer(mixed, floats), 2)[0]] == [float] * 3


@pytest.mark.parametrize(
    "bad",
    [
        [0.5, math.nan],
        [0.5, math.inf],
        [0.5, -math.inf],
        [0.5, 1e30],
        [0.5, -1e31],
        [1, math.nan],
        [1, 10**31],
        [0.5, True],
        [0.5, "1"],
        [0.5, None],
    ],
)
def test_a_value_that_is_not_a_finite_number_is_unreadable(bad):
    with pytest.raises(EmbeddingUnreadable, match="not a finite number"):
        _embedding_vectors(_answer([0.1, 0.2], bad), 2)


def test_vectors_of_two_sizes_are_unreadable():
    with pytest.raises(EmbeddingUnreadable, match="differ in size"):
        _embedding_vectors(_answer([0.1, 0.2], [0.1]), 2)
