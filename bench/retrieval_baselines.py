"""The baselines of ``bench/memory_retrieval.py``: what a user could bolt on — plain Okapi BM25
over the raw dated turns, and BM25 whose hits bring their neighbouring turns — each filling the
same token budget as the platform's search result."""

from __future__ import annotations

import math
import re
from collections import Counter

from retrieval_corpus import Turn

STOP_WORDS = frozenset(
    """
    a about above after again against all am an and any are as at be because been before being
    below between both but by can could did do does doing down during each few for from further
    had has have having he her here hers herself him himself his how i if in into is it its
    itself just me more most my myself no nor not now of off on once only or other our ours
    ourselves out over own same she should so some such than that the their theirs them
    themselves then there these they this those through to too under until up very was we were
    what when where which while who whom why will with would you your yours yourself yourselves
    s t don didn doesn isn wasn ll ve re d m o y
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
_WORD = re.compile(r"[a-z0-9]+")


def bm25_terms(text: str) -> list[str]:
    out = []
    for word in _WORD.findall(text.lower().replace("'", "")):
        if word in STOP_WORDS:
            continue
        for suffix in ("ing", "ed", "es", "s"):
            if len(word) > len(suffix) + 2 and word.endswith(suffix):
                word = word[: -len(suffix)]
                break
        out.append(word)
    return out


class BM25:
    def __init__(self, turns: list[Turn], k1: float = 1.2, b: float = 0.75) -> None:
        self.turns = turns
        self.k1, self.b = k1, b
        self.docs = [Counter(bm25_terms(f"{t.speaker}: {t.text}")) for t in turns]
        self.lengths = [sum(d.values()) for d in self.docs]
        self.mean_length = sum(self.lengths) / max(1, len(self.lengths))
        frequency: Counter[str] = Counter()
        for doc in self.docs:
            frequency.update(doc.keys())
        n = len(self.docs)
        self.idf = {t: math.log(1 + (n - f + 0.5) / (f + 0.5)) for t, f in frequency.items()}

    def ranked(self, query: str) -> list[Turn]:
        terms = set(bm25_terms(query))
        scored = []
        for index, doc in enumerate(self.docs):
            score = 0.0
            norm = self.k1 * (1 - self.b + self.b * self.lengths[index] / self.mean_length)
            for term in terms:
                tf = doc.get(term, 0)
                if tf:
                    score += self.idf[term] * tf * (self.k1 + 1) / (tf + norm)
            if score > 0:
                scored.append((-score, index))
        scored.sort()
        return [self.turns[index] for _, index in scored]

    def within(self, query: str, budget: int) -> tuple[set[str], int]:
        """Ids of the top turns whose dated lines fit ``budget`` tokens, and the tokens used."""
        from chat_platform.llm.tokens import count_tokens

        chosen: set[str] = set()
        used = 0
        for turn in self.ranked(query):
            cost = count_tokens(f"[{turn.date}] {turn.speaker}: {turn.text}\n")
            if used + cost > budget:
                break
            chosen.add(turn.id)
            used += cost
        return chosen, used


def within_neighbours(bm25: BM25, query: str, budget: int) -> tuple[set[str], int]:
    """BM25 + neighbours: each top turn, best first, brings the turn just before and just after
    it in the conversation (its neighbourhood, as a bolt-on that reads around its hits would),
    every line counted, until the next group would pass ``budget`` tokens; (ids, tokens)."""
    from chat_platform.llm.tokens import count_tokens

    position = {turn.id: index for index, turn in enumerate(bm25.turns)}
    chosen: set[str] = set()
    used = 0
    for turn in bm25.ranked(query):
        at = position[turn.id]
        group = [
            bm25.turns[i]
            for i in (at - 1, at, at + 1)
            if 0 <= i < len(bm25.turns) and bm25.turns[i].id not in chosen
        ]
        cost = sum(count_tokens(f"[{t.date}] {t.speaker}: {t.text}\n") for t in group)
        if not group:
            continue
        if used + cost > budget:
            break
        chosen.update(t.id for t in group)
        used += cost
    return chosen, used
