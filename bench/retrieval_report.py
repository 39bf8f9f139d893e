"""The report of ``bench/memory_retrieval.py``: found % per question kind for the platform's runs
beside the baselines at the same budget, search latency, and every miss with what would have
found it."""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

import retrieval_corpus  # noqa: E402
from retrieval_baselines import BM25, within_neighbours  # noqa: E402
from retrieval_corpus import KINDS, Corpus, Question  # noqa: E402
from retrieval_platform import Asked  # noqa: E402

GOAL_LINE = (
    "Goal: ≥ 90 % found overall, every kind ≥ 75 %, and ≥ 25 points above the BM25 baseline "
    "at the same budget."
)
DEFAULT_BUDGET = 2000


def percent(values: list[bool]) -> float:
    return 100.0 * sum(values) / len(values) if values else float("nan")


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))]


def _rows(
    corpus: Corpus, asked: list[Asked], budget: int
) -> tuple[dict[str, dict[str, list[bool]]], list[int]]:
    """Per kind (and "all"): found by the platform and by BM25 at each budget; BM25's tokens."""
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
    return rows, used_same


def _table(rows: dict[str, dict[str, list[bool]]]) -> None:
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


def _where(corpus: Corpus, asked: list[Asked]) -> None:
    """Dates, latency, where the evidence was, and what a word-matching search could reach."""
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


def _goal(rows: dict[str, dict[str, list[bool]]]) -> bool:
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


def report(corpus: Corpus, asked: list[Asked], budget: int, budget_source: str) -> bool:
    rows, used_same = _rows(corpus, asked, budget)
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
    _table(rows)
    _where(corpus, asked)
    return _goal(rows)


def report_hybrid(
    corpus: Corpus, lexical: list[Asked], hybrid: list[Asked], budget: int, *, model: str
) -> bool:
    """Platform words-only, platform with ``model`` (the default configuration when it is the
    built-in model), plain BM25 and BM25 + neighbours at the same budget, side by side; the goal
    on the platform's hybrid run."""
    bm25 = BM25(corpus.turns)
    rows: dict[str, dict[str, list[bool]]] = {}
    for position, (plain, mixed) in enumerate(zip(lexical, hybrid, strict=True)):
        evidence = set(plain.question.evidence)
        # The same budget: what the platform's search filled for this question when that was
        # more than ``budget`` (a recall search fills its share of the room left, up to
        # SEARCH_RESULT_TOKENS_MAX: docs/memory.md, "Budget").
        size = max(budget, mixed.tool_tokens)
        same, _ = bm25.within(plain.question.text, size)
        around, _ = within_neighbours(bm25, plain.question.text, size)
        half = "odd half" if position % 2 else "even half"
        for kind in (plain.question.kind, "all", f"{plain.question.kind} {half}", half):
            row = rows.setdefault(kind, {k: [] for k in ("lex", "hyb", "tool", "bm25", "nbr")})
            row["lex"].append(plain.found)
            row["hyb"].append(mixed.found)
            row["tool"].append(mixed.in_tool_result)
            row["bm25"].append(evidence <= same)
            row["nbr"].append(evidence <= around)
    print()
    print(
        f"Search by words and meaning (embedding model {model}, in-process, CPU), budget {budget}"
        " (BM25 and BM25 + neighbours: each question at the platform's result size when larger)"
    )
    header = (
        f"| {'kind':<12} | {'n':>3} | {'words only':>10} | {'default: ' + model:>22} | "
        f"{'in tool result':>14} | {'BM25':>6} | {'BM25 + neighbours':>17} |"
    )
    print(header)
    print("|" + "|".join("-" * (len(c)) for c in header.split("|")[1:-1]) + "|")
    # The questions in two halves (odd and even position in the corpus): a change kept for what
    # it does on one half should do it on the other too.
    halves = [f"{kind} {half}" for half in ("odd half", "even half") for kind in (*KINDS, "")]
    for kind in (*KINDS, "all", *(h.strip() for h in halves)):
        row = rows.get(kind)
        if not row:
            continue
        print(
            f"| {kind:<12} | {len(row['lex']):>3} | {percent(row['lex']):>9.1f}% | "
            f"{percent(row['hyb']):>21.1f}% | {percent(row['tool']):>13.1f}% | "
            f"{percent(row['bm25']):>5.1f}% | {percent(row['nbr']):>16.1f}% |"
        )
    temporal = [a for a in hybrid if a.question.kind == "temporal"]
    print(
        f"temporal, evidence date with the turn in the hybrid tool result: "
        f"{sum(a.date_found for a in temporal)} of {len(temporal)}"
    )
    for name, run in (("words only", lexical), (model, hybrid)):
        latencies = [a.latency_ms for a in run]
        print(
            f"search latency, platform {name} (records_search from the bench"
            f"{', the question embedded included' if run is hybrid else ''}): "
            f"p50 {percentile(latencies, 50):.1f} ms, p95 {percentile(latencies, 95):.1f} ms; "
            f"tool result mean {sum(a.tool_tokens for a in run) / max(1, len(run)):.0f} tokens"
        )
    overall = percent(rows["all"]["hyb"])
    kinds_ok = all(percent(rows[k]["hyb"]) >= 75 for k in KINDS if k in rows)
    margin = overall - percent(rows["all"]["bm25"])
    met = overall >= 90 and kinds_ok and margin >= 25
    print()
    print(GOAL_LINE + f" ({model})")
    print(
        f"  overall {overall:.1f} % (≥ 90: {'yes' if overall >= 90 else 'no'}); every kind ≥ 75 %: "
        f"{'yes' if kinds_ok else 'no'} ("
        + ", ".join(f"{k} {percent(rows[k]['hyb']):.1f}" for k in KINDS if k in rows)
        + f"); {margin:+.1f} points over BM25 at the same budget "
        f"(≥ 25: {'yes' if margin >= 25 else 'no'}); "
        f"{overall - percent(rows['all']['nbr']):+.1f} over BM25 + neighbours"
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
