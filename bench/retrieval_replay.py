"""Search only, over the session ``bench/memory_retrieval.py`` fed: each question given to
``memory.queries.records_search`` as the ``search_records`` tool gives it (the question as
written, the result's room, history older than the question searched), and found = every evidence
turn's text in the result. No turn runs, so a ranking change is measured in seconds on the same
stored index; the full bench (through the turn) is what reports. Printed per kind, for the two
halves of the questions (odd and even position in the corpus: a change is chosen on one half and
checked on the other) and for all; ``--misses`` prints each miss with every evidence turn's rank
in the ranking the fill read and in the lexical and vector rankings alone.

    .venv/bin/python bench/retrieval_replay.py [--sqlite] [--window N] [--budget N] [--misses]
        [--words-only]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import retrieval_corpus  # noqa: E402
from retrieval_corpus import KINDS  # noqa: E402
from retrieval_platform import DEFAULT_EMBEDDING, fed_already, normalise, setup  # noqa: E402
from retrieval_report import percent, percentile  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sqlite", action="store_true")
    parser.add_argument("--window", type=int, default=4096)
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--misses", action="store_true")
    parser.add_argument("--words-only", action="store_true")
    options = parser.parse_args()
    if options.sqlite:  # the bench's SQLite file is kept: reuse it, never delete it
        import os

        os.environ["DATABASE_URL"] = "sqlite:////tmp/bench_memory_retrieval.sqlite3"
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
        os.environ.setdefault("SECRET_KEY", "bench-only")
        os.environ.setdefault("LOG_LEVEL", "ERROR")
        import django

        django.setup()
    else:
        setup(False)
    from memory import queries
    from memory.queries import records_search
    from memory.search import MessageScore

    seen: list[list[tuple[float, object]]] = []
    real_fill = queries.fill

    def fill(session, ranked, **kwargs):  # noqa: ANN001, ANN202 - the ranking the fill reads
        seen.append(ranked)
        return real_fill(session, ranked, **kwargs)

    queries.fill = fill

    corpus = retrieval_corpus.build()
    fed = fed_already(corpus, options.window, DEFAULT_EMBEDDING)
    if fed is None:
        sys.exit("no fed session: run bench/memory_retrieval.py first")
    _, bot, session, _, seqs = fed
    if options.words_only:
        bot.embedding_model = ""
    session.bot = bot
    live_before = session.last_seq + 1
    found: dict[str, list[tuple[int, bool]]] = {}
    latencies = []
    records_search(session=session, query="warm up", live_before=live_before)
    for position, question in enumerate(corpus.questions):
        seen.clear()
        started = time.perf_counter()
        hits = records_search(
            session=session, query=question.text, budget=options.budget, live_before=live_before
        )
        latencies.append((time.perf_counter() - started) * 1000)
        text = normalise("\n".join(f"{h.header}\n{h.excerpt}" for h in hits))
        ok = all(normalise(corpus.turn(i).text) in text for i in question.evidence)
        for kind in (question.kind, "all"):
            found.setdefault(kind, []).append((position, ok))
        if not ok and options.misses:
            print(f"MISS {question.kind}: {question.text}")
            for i in question.evidence:
                turn = corpus.turn(i)
                mark = "ok " if normalise(turn.text) in text else "-- "
                order = [
                    item.seq
                    for _, item in (seen[0] if seen else [])
                    if isinstance(item, MessageScore)
                ]
                rank = order.index(seqs[i]) + 1 if seqs[i] in order else None
                print(f"   {mark}rank {rank} of {len(order)} [{seqs[i]}] {turn.text[:100]}")
            print(f"   shown: {[h.seqs for h in hits]}")
    print(f"| {'kind':<12} | {'n':>3} | {'odd':>6} | {'even':>6} | {'all':>6} |")
    for kind in (*KINDS, "all"):
        rows = found.get(kind, [])
        odd = [ok for p, ok in rows if p % 2]
        even = [ok for p, ok in rows if not p % 2]
        every = [ok for _, ok in rows]
        print(
            f"| {kind:<12} | {len(rows):>3} | {percent(odd):>5.1f}% | {percent(even):>5.1f}% | "
            f"{percent(every):>5.1f}% |"
        )
    print(f"search p50 / p95 {percentile(latencies, 50):.1f} / {percentile(latencies, 95):.1f} ms")


if __name__ == "__main__":
    main()
