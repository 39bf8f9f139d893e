"""Does the built-in summariser keep the facts? (issue 16, item 4)

Feeds the retrieval bench's corpus (``bench/retrieval_corpus.py``: Ravi and Mei, 24 dated
sessions, 613 turns) through the real turn exactly as ``bench/memory_retrieval.py`` does (its
``feed``: a small window, ``builtin/extractive`` compacting in-process, many times), then reads
every summary the feed wrote (active, superseded and fused alike) and prints:

* each summary's retention of its checked facts — the score the quality gate stored on it
  (``compaction.facts.retention_score`` of the transcript the summariser saw against the
  summary), with its trigger, level, span and the facts it missed;
* the distribution: min / p10 / median / mean, and the share of summaries at ≥ 90 %;
* for a few summaries (``--facts N``), what the fact check counts as facts in its source (the
  snapshot the pass wrote, whose body is that transcript), so junk can be seen.

Goal (issue 16 item 4): every summary's retention ≥ 90 % of its checked facts.

    .venv/bin/python bench/summary_retention.py [--quick] [--window N] [--facts N]
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench_retention
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import retrieval_corpus  # noqa: E402

GOAL = 0.9


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile of ``values`` (q in 0–100)."""
    ordered = sorted(values)
    rank = max(1, -(-len(ordered) * q // 100))
    return ordered[int(rank) - 1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the first 5 sessions only")
    parser.add_argument("--window", type=int, default=4096, help="the bot's context window")
    parser.add_argument("--facts", type=int, default=4, help="summaries whose facts to list")
    options = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_retention")
    import memory_retrieval

    memory_retrieval.setup(sqlite=False)

    from compaction.facts import extract_facts, retention_score
    from compaction.models import CompactionEvent, Summary

    corpus = retrieval_corpus.build()
    if options.quick:
        corpus = corpus.subset(memory_retrieval.QUICK_SESSIONS)
    print(f"corpus: {len(corpus.sessions)} sessions, {len(corpus.turns)} turns")
    _user, bot, session, seconds, _seqs = memory_retrieval.feed(corpus, options.window)
    if memory_retrieval.FAILURES:
        print(
            f"  {len(memory_retrieval.FAILURES)} feed turns FAILED; first: "
            f"{memory_retrieval.FAILURES[0]}"
        )
    summaries = list(Summary.objects.filter(session=session).order_by("created_at", "id"))
    events = {
        event.summary_id: event
        for event in CompactionEvent.objects.filter(session=session, outcome="compacted")
        .exclude(summary=None)
        .select_related("snapshot")
    }
    print(
        f"fed in {seconds:.0f} s (window {bot.context_window}): {len(summaries)} summaries "
        f"({sum(s.trigger == 'fusion' for s in summaries)} fusions)"
    )
    print("\n id  trigger  level  span        facts  retention  missing")
    sources: dict[int, str] = {}
    rechecked = 0
    for summary in summaries:
        event = events.get(summary.pk)
        source = event.snapshot.body if event is not None and event.snapshot else ""
        sources[summary.pk] = source
        facts = extract_facts(source) if source else []
        if source and retention_score(source, summary.text)[0] == summary.retention:
            rechecked += 1
        missing = ", ".join(summary.missing_facts[:8])
        more = len(summary.missing_facts) - 8
        print(
            f"{summary.pk:>3}  {summary.trigger:<7}  {summary.level:>5}  "
            f"{summary.first_seq:>4}–{summary.last_seq:<5}  {len(facts):>5}  "
            f"{summary.retention * 100:>8.1f}%  {missing}{f' (+{more})' if more > 0 else ''}"
        )
    values = [s.retention for s in summaries]
    if not values:
        print("no summaries")
        return
    passing = sum(v >= GOAL for v in values)
    print(
        f"\nretention over {len(values)} summaries: min {min(values) * 100:.1f} %, "
        f"p10 {percentile(values, 10) * 100:.1f} %, median {statistics.median(values) * 100:.1f} %"
        f", mean {statistics.mean(values) * 100:.1f} %; ≥ 90 %: {passing}/{len(values)} "
        f"({passing * 100 / len(values):.1f} %)"
    )
    for trigger in sorted({s.trigger for s in summaries}):
        own = [s.retention for s in summaries if s.trigger == trigger]
        print(
            f"  {trigger}: {len(own)} summaries, min {min(own) * 100:.1f} %, "
            f"mean {statistics.mean(own) * 100:.1f} %, ≥ 90 %: {sum(v >= GOAL for v in own)}"
        )
    print(f"  stored retention re-computed from the snapshot: {rechecked}/{len(values)} equal")
    print(f"goal (every summary ≥ 90 %): {'met' if passing == len(values) else 'NOT met'}")
    shown = sorted(summaries, key=lambda s: s.retention)[: options.facts]
    for summary in shown:
        facts = extract_facts(sources[summary.pk])
        print(
            f"\nfacts checked for summary {summary.pk} ({summary.trigger}, "
            f"{summary.retention * 100:.1f} %): {facts}"
        )


if __name__ == "__main__":
    main()
