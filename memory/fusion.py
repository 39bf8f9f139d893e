"""Hybrid search's fusion (docs/memory.md): the lexical ranking and the vector ranking
(``memory.embeddings.vector_ranked``) made one, by reciprocal rank."""

from memory.search import MessageScore

# Reciprocal rank fusion: an item's score is the sum over the rankings it is in of
# 1 / (RRF_K + rank), rank from 1 (the usual constant: no ranking's top dominates).
RRF_K = 60
# Of the lexical ranking, only its head votes in the fusion: past its first few hits, BM25's
# order is mostly messages sharing one common word with the question (a speaker's name, "day"),
# and giving those fusion votes pushes them above what the vectors found. The rest of the
# lexical ranking follows the fused items, in its own order.
LEXICAL_CANDIDATES = 10


def fused(
    lexical: list[tuple[float, object]], vector: list[MessageScore]
) -> list[tuple[float, object]]:
    """Reciprocal rank fusion of the lexical ranking's head (its first ``LEXICAL_CANDIDATES``
    messages and info records) and the vector ranking (messages): each item scores
    ``1 / (RRF_K + rank)`` in each ranking it is in, a message in both scoring twice; best
    first, ties in lexical order, then vector order; then the rest of the lexical ranking in its
    order (score 0), less what the vectors already brought.
    A message is one item whichever ranking names it (by its message id)."""
    scores: dict[object, float] = {}
    items: dict[object, object] = {}
    head, tail = lexical[:LEXICAL_CANDIDATES], lexical[LEXICAL_CANDIDATES:]
    for rank, (_, item) in enumerate(head, start=1):
        key = ("m", item.message_id) if isinstance(item, MessageScore) else ("r", id(item))
        scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
        items.setdefault(key, item)
    # A message both rankings hold stays the lexical item: it knows the question's words it
    # holds (``memory.search_hits.fill`` reads them).
    lexical_items = {
        ("m", item.message_id): item for _, item in lexical if isinstance(item, MessageScore)
    }
    for rank, message in enumerate(vector, start=1):
        key = ("m", message.message_id)
        scores[key] = scores.get(key, 0.0) + 1.0 / (RRF_K + rank)
        items.setdefault(key, lexical_items.get(key, message))
    order = {key: position for position, key in enumerate(items)}
    ranked = sorted(scores, key=lambda key: (-scores[key], order[key]))
    fused_items = [(scores[key], items[key]) for key in ranked]
    return fused_items + [
        (0.0, item)
        for _, item in tail
        if not (isinstance(item, MessageScore) and ("m", item.message_id) in scores)
    ]
