"""Does message search stay fast as one user's history with a bot grows? (issue 16, item 6)

What it measures
----------------
``memory.queries.records_search`` (the function the ``search_records`` tool and the records
API's ``?q=`` call) at 10k, 100k and 1M indexed messages. Search is per session (a session's
compacted messages plus the info records readable from it), so what grows is the size of the
tables and indexes that serve it: one user, one bot, and sessions of ``--per-session`` (1,000)
compacted messages each — 10, 100, 1,000 sessions — grown in place, so one run measures all
three sizes on the same data.

Every session looks like one a compacting bot leaves behind:

* messages alternating user / assistant, English chit-chat generated from word lists with a
  seeded random (Zipf-like word choice, so some words are in a large share of the messages and
  others in about one in a thousand; names, places, numbers and times said in passing), each
  dated;
* all of them compacted (``Message.compacted_by``) by one ``compaction.Summary`` of the session;
* one snapshot ``MemoryRecord`` per ``--per-snapshot`` (50) messages, its body the transcript
  of those messages (``[seq] stamp role: text``, as a compaction writes it; the record search
  trigger indexes it), each message indexed in ``MessageIndex`` with its ``memory.terms.terms``
  and held by that snapshot;
* two session-scoped info records per session, and 30 bot-scoped ones readable from all.

Loading is bulk: PostgreSQL COPY in batches of sessions; the texts come from a pool of distinct
generated texts (``POOL_TEXTS`` per role), their terms and token counts computed once and reused
across rows (a text recurs across sessions, rarely within one). After each growth step
``VACUUM (ANALYZE)`` of the loaded tables — the state autovacuum keeps a live table in (fresh
planner statistics, the GIN pending list merged).

At each size, after a warm-up pass (every question once, on a session that is not measured),
each of ``QUESTIONS`` (50 natural questions, rare and common words mixed, "When did we talk about
the boat trip?") is asked once in each of ``--sessions`` (5) random sessions:
``records_search(session=…, query=question)`` timed from the outside (wall clock, one process,
the database on this machine). Printed per size: p50 / p95 / max of ``records_search``; of its
mean, how much was spent inside ``cursor.execute`` (round trips, server, fetch) and outside it
(Python: the ORM, ranking, token counting), and the queries per search; p50 / p95 of its
candidate step alone (``memory.search.messages_ranked``, timed in a second pass); the mean number
of candidate messages and of hits; the machine's load average (the machine may be shared: read
the times with it); then the two ratios and whether the goal is met; at the largest size the
``EXPLAIN (ANALYZE)`` plan of the candidate query (``memory.search._PG_CANDIDATES``) for one rare
and one common question, so a reader sees which index served it.

Goal (issue 16): p95 at 1M <= 2 x p95 at 10k, and <= 50 ms.

    .venv/bin/python bench/memory_search.py [--sizes 10000,100000,1000000] [--quick] [--keep]
    # DATABASE_URL defaults to postgres://postgres@127.0.0.1:5432/chat_bench_search; the bench
    # drops and re-creates that database (its name must contain "bench") and drops it at the
    # end unless --keep. REDIS_URL is ignored.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
sys.path.insert(0, str(BENCH.parent))

DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/chat_bench_search"
SIZES = (10_000, 100_000, 1_000_000)
QUICK_SIZES = (10_000, 100_000)
PER_SESSION = 1000
PER_SNAPSHOT = 50
SESSIONS_MEASURED = 5
SESSION_INFOS = 2
BOT_INFOS = 30
POOL_TEXTS = 60_000  # distinct texts per role
BATCH_MESSAGES = 50_000  # rows per COPY transaction (whole sessions)
GOAL_RATIO = 2.0
GOAL_MS = 50.0
START = datetime(2023, 1, 2, 8, 0, tzinfo=UTC)
BOT_MODEL = "openai/gpt-4o-mini"


# --- text ---------------------------------------------------------------------------------------


def _listed(text: str, separator: str = "|") -> list[str]:
    return text.split(separator)


# Word lists in rough order of how often people mention them; ``_pick`` draws with Zipf-like
# weights, so the head of each list is common and its tail rare.

NAMES = _listed(
    "Mum Dad Sam Priya Tom Anna Ravi Mei Jonas Lena Marco Chloe Omar Sofia Ben Hana Luis Ines "
    "Kofi Elif Nora Pavel Aiko Dario Freya Tariq Greta Yusuf Ingrid Mateo Zara Henrik Amara "
    "Bruno Leila Stefan Noor Felix Maya Emeka Saoirse Viktor Ottilie Rashid Beatriz Kenji",
    " ",
)
RELATIONS = _listed(
    "sister brother friend boss colleague neighbour cousin partner flatmate aunt uncle "
    "grandmother nephew niece landlord dentist coach teacher",
    " ",
)
PLACES = _listed(
    "the office|the park|the gym|the city centre|the supermarket|my parents' place|the beach|"
    "the lake|the mountains|the station|the library|the market|the river|the old town|"
    "the airport|the harbour|the stadium|the museum|the garden centre|the hospital|Lisbon|"
    "Berlin|the coast|Kyoto|Edinburgh|the countryside|Porto|Vienna|the ski resort|Marrakesh|"
    "the island|Copenhagen|the vineyard|Reykjavik|the campsite|Tallinn|the botanical garden|"
    "Valencia|the observatory|Ljubljana|the lighthouse|Oaxaca|the salt flats"
)
ACTIVITIES = _listed(
    "went for a run|cooked dinner|watched a film|cleaned the flat|went shopping|met friends|"
    "worked late|went for a walk|read a book|played football|visited my parents|did yoga|"
    "went swimming|baked bread|went cycling|played board games|painted the fence|went hiking|"
    "fixed the bike|went to a concert|took the boat out|planted tomatoes|went climbing|"
    "tried pottery|went fishing|built a shelf|went kayaking|learned some Spanish|"
    "went to a wedding|repaired the roof|went sailing|made sourdough|went birdwatching|"
    "did a triathlon|went skating|carved a spoon|went paragliding|brewed cider|"
    "restored an old radio|went snorkelling|knitted a scarf|went stargazing"
)
PLANS = _listed(
    "going to the gym|cooking more|visiting my parents|taking a holiday|changing jobs|"
    "moving house|learning the guitar|running a half marathon|buying a car|getting a dog|"
    "repainting the kitchen|starting a garden|booking a trip to Lisbon|learning to sail|"
    "taking a pottery class|adopting a cat|renovating the bathroom|hiking the coast path|"
    "joining a choir|buying a kayak|building a treehouse|learning Japanese|walking the Camino|"
    "entering a baking contest|restoring the piano|cycling to Porto"
)
FOODS = _listed(
    "pizza|pasta|curry|soup|salad|tacos|sushi|noodles|a roast|burgers|dumplings|paella|ramen|"
    "a stew|risotto|pancakes|falafel|lasagne|pho|a tagine|ceviche|pierogi|bibimbap|"
    "a fish pie|goulash|empanadas|laksa|moussaka|a sourdough loaf|okonomiyaki"
)
THINGS = _listed(
    "the car|the new phone|the laptop|the bike|the washing machine|the boat|the tickets|"
    "the keys|the passport|the camera|the tent|the guitar|the printer|the sofa|the kettle|"
    "the lawnmower|the kayak|the telescope|the sewing machine|the drone|the espresso machine|"
    "the canoe|the accordion|the metal detector|the pottery wheel|the record player"
)
FEELINGS = _listed(
    "tired|great|busy|stressed|happy|relaxed|exhausted|excited|bored|nervous|proud|grumpy|"
    "restless|homesick|elated|content|frazzled|nostalgic"
)
WORK = _listed(
    "the project|the deadline|the meeting|my manager|the new client|the budget|the report|"
    "the presentation|the team offsite|the quarterly review|the audit|the product launch|"
    "the migration|the hiring round|the conference talk|the merger|the grant application"
)
WHEN_PAST = _listed(
    "yesterday|last weekend|on Saturday|this morning|last night|on Sunday|last week|on Friday|"
    "on Monday|a few days ago|on Tuesday|on Thursday|on Wednesday|last month|over Easter|"
    "on my birthday|during the bank holiday|two weeks ago"
)
WHEN_FUTURE = _listed(
    "this weekend|next week|tomorrow|next month|on Saturday|in the summer|after work|"
    "on Friday|in spring|over Christmas|next year|in October"
)
ADJECTIVES = _listed(
    "nice|good|lovely|fun|great|busy|quiet|long|strange|perfect|rainy|cold|hot|expensive|"
    "relaxing|chaotic|memorable|disappointing|hilarious|peculiar|breathtaking|bittersweet"
)
FILLERS = _listed(
    "Honestly|Anyway|So|Well|Oh|By the way|To be fair|Funny thing|Guess what|Ugh|"
    "Good news|Quick update|Random thought|Long story short"
)

USER_TEMPLATES = (
    "{when_past} I {activity} with {name}.",
    "{filler}, {when_past} we {activity} near {place}.",
    "I'm {feeling} today, {work} is taking all my time.",
    "My {relation} {name} {activity} {when_past} and loved it.",
    "We had {food} at a little place near {place} {when_past}.",
    "I'm thinking about {plan} {when_future}.",
    "Do you remember {thing} I told you about? It broke again {when_past}.",
    "{filler}, {work} went {adjective} and I'm {feeling}.",
    "{name} and I are {plan} {when_future}, I'm {feeling} about it.",
    "It was a {adjective} day at {place}, we stayed until {hour}.",
    "I finally sold {thing} for {price} {when_past}.",
    "My {relation} called {when_past}, she wants to visit {place} {when_future}.",
    "Dinner {when_past} was {food}, {name} made it.",
    "The weather at {place} was {adjective}, so we {activity} instead.",
    "{filler}, I paid {price} for {thing}, was that too much?",
    "I need to remember to call {name} about {work} {when_future}.",
    "We {activity} for about {hours} hours {when_past}, my legs are {feeling}.",
    "I booked the train to {place} for {weekday} at {hour}.",
)
ASSISTANT_TEMPLATES = (
    "That sounds {adjective}! How was {place}?",
    "Oh nice, {food} is always a good choice. Who else was there?",
    "I hope {work} calms down soon. Have you talked to {name} about it?",
    "Sounds like a {adjective} weekend. Did {name} enjoy it too?",
    "{plan} {when_future} sounds great, what got you thinking about it?",
    "Sorry to hear about {thing}. Is it worth fixing, or time for a new one?",
    "I remember you mentioned {place} before. Was it as {adjective} as last time?",
    "Being {feeling} after all that makes sense. Take it easy tonight.",
    "{price} for {thing} seems fair to me. Are you happy with it?",
    "Say hi to your {relation} from me! When are they coming over?",
    "{hours} hours is a lot! What was the best part?",
    "Good luck with {work}. Let me know how it goes on {weekday}.",
)
WEEKDAYS = _listed("Monday Tuesday Wednesday Thursday Friday Saturday Sunday", " ")

# Fifty questions as a person would ask them, common and rare words mixed.
QUESTIONS = (
    "When did we talk about the boat trip?",
    "What did I do last weekend?",
    "How was work this week?",
    "When did I go kayaking?",
    "What did we have for dinner on Saturday?",
    "Did I tell you about the telescope?",
    "Who did I go hiking with?",
    "When is the train to Lisbon?",
    "What did my sister say about visiting?",
    "How much did I pay for the espresso machine?",
    "What happened with the project deadline?",
    "Did I ever make sourdough?",
    "When did I visit my parents?",
    "What was the weather like at the beach?",
    "Which restaurant did we go to near the harbour?",
    "Who made the goulash?",
    "Am I still thinking about getting a dog?",
    "When did the washing machine break?",
    "What did Priya think of the concert?",
    "How long did we go cycling for?",
    "What did I say about my manager?",
    "When did I go to the wedding?",
    "Did we ever go snorkelling in Marrakesh?",
    "What was so stressful about the audit?",
    "Where did I want to go in the summer?",
    "What did I sell the canoe for?",
    "When did we go stargazing at the observatory?",
    "Who is Henrik?",
    "What did I cook for Mum?",
    "How was the trip to Kyoto?",
    "Was the museum any good?",
    "When did I start learning Japanese?",
    "What did I think about the new client?",
    "Did I fix the bike in the end?",
    "What did we eat in Porto?",
    "Who called me about the hiring round?",
    "When did I feel homesick?",
    "What did my neighbour do on Sunday?",
    "How did the presentation go?",
    "Tell me about the time we went sailing",
    "What do you remember about the lighthouse?",
    "When did I buy the tickets?",
    "Did I mention the pottery class?",
    "What's the story with the metal detector?",
    "Who came to the park with me yesterday?",
    "When are we booking the trip?",
    "What did I say about moving house?",
    "How did the half marathon training go?",
    "Why was I so tired on Monday?",
    "What did Tariq bring to the campsite?",
)


def _weights(n: int, s: float = 1.05) -> list[float]:
    """Cumulative Zipf-like weights for a list of ``n`` in order of frequency."""
    total, out = 0.0, []
    for rank in range(1, n + 1):
        total += 1.0 / rank**s
        out.append(total)
    return out


_SLOTS = {
    "name": NAMES,
    "relation": RELATIONS,
    "place": PLACES,
    "activity": ACTIVITIES,
    "plan": PLANS,
    "food": FOODS,
    "thing": THINGS,
    "feeling": FEELINGS,
    "work": WORK,
    "when_past": WHEN_PAST,
    "when_future": WHEN_FUTURE,
    "adjective": ADJECTIVES,
    "filler": FILLERS,
    "weekday": WEEKDAYS,
}
_CUM = {slot: _weights(len(words)) for slot, words in _SLOTS.items()}


def _pick(rng: random.Random, slot: str) -> str:
    return rng.choices(_SLOTS[slot], cum_weights=_CUM[slot])[0]


def _sentence(rng: random.Random, template: str) -> str:
    values = {slot: _pick(rng, slot) for slot in _SLOTS if "{" + slot + "}" in template}
    values["hour"] = f"{rng.randint(6, 23)}:{rng.choice(('00', '15', '30', '45'))}"
    values["hours"] = str(rng.randint(2, 9))
    values["price"] = f"{rng.randint(5, 900)} euros"
    text = template.format(**values)
    return text[0].upper() + text[1:]


def make_text(rng: random.Random, role: str) -> str:
    """One message: a user says one to three sentences, the assistant one or two."""
    templates = USER_TEMPLATES if role == "user" else ASSISTANT_TEMPLATES
    count = rng.choices((1, 2, 3), weights=(5, 3, 1) if role == "user" else (6, 3, 0))[0]
    return " ".join(_sentence(rng, rng.choice(templates)) for _ in range(count))


@dataclass
class Pool:
    """Distinct texts per role, with their search terms and token counts computed once."""

    texts: dict[str, list[str]]
    terms: dict[str, list[str]]  # space-joined memory.terms.terms of each text
    lengths: dict[str, list[int]]
    tokens: dict[str, list[int]]


def build_pool(size: int, seed: int = 16) -> Pool:
    from chat_platform.llm.tokens import count_message_tokens
    from memory.terms import terms

    rng = random.Random(seed)
    texts: dict[str, list[str]] = {}
    for role in ("user", "assistant"):
        seen: dict[str, None] = {}
        tries = 0
        while len(seen) < size and tries < size * 20:
            tries += 1
            seen.setdefault(make_text(rng, role))
        texts[role] = list(seen)
    pool = Pool(texts=texts, terms={}, lengths={}, tokens={})
    for role, items in texts.items():
        words = [terms(text) for text in items]
        assert all(words), "every generated text has a search term"
        pool.terms[role] = [" ".join(w) for w in words]
        pool.lengths[role] = [len(w) for w in words]
        pool.tokens[role] = [count_message_tokens(t, model=BOT_MODEL) for t in items]
    return pool


# --- seeding ------------------------------------------------------------------------------------


@dataclass
class Corpus:
    user: object
    bot: object
    per_session: int
    per_snapshot: int
    pool: Pool
    session_ids: list[int] = field(default_factory=list)


def corpus_start(*, pool: Pool, per_session: int = PER_SESSION, per_snapshot: int = PER_SNAPSHOT):
    """The user, the bot and its bot-scoped info records; no sessions yet."""
    from django.contrib.auth import get_user_model

    from bots.models import Bot
    from memory.models import MemoryRecord

    user = get_user_model().objects.create(username="bench-search")
    bot = Bot.objects.create(owner=user, name="bench-search", model=BOT_MODEL, context_window=8192)
    rng = random.Random(7)
    MemoryRecord.objects.bulk_create(
        MemoryRecord(
            scope=MemoryRecord.Scope.BOT,
            user=user,
            bot=bot,
            kind=MemoryRecord.Kind.INFO,
            name=f"fact-{n}",
            description=f"About {_pick(rng, 'name')} and {_pick(rng, 'place')}",
            body=make_text(rng, "user"),
        )
        for n in range(BOT_INFOS)
    )
    return Corpus(user=user, bot=bot, per_session=per_session, per_snapshot=per_snapshot, pool=pool)


def grow(corpus: Corpus, messages: int) -> float:
    """Add whole sessions until the corpus holds ``messages`` indexed messages; seconds taken."""
    started = time.perf_counter()
    want = messages // corpus.per_session
    per_batch = max(1, BATCH_MESSAGES // corpus.per_session)
    while len(corpus.session_ids) < want:
        count = min(per_batch, want - len(corpus.session_ids))
        _add_sessions(corpus, count)
    return time.perf_counter() - started


def _copy(table: str, columns: list[str], rows) -> None:
    from django.db import connection

    names = ", ".join(f'"{c}"' for c in columns)
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN") as copy,
    ):
        for row in rows:
            copy.write_row(row)


def _add_sessions(corpus: Corpus, count: int) -> None:
    from django.db import connection, transaction

    from bots.models import ChatSession, Message
    from chat_platform.transcript import line as transcript_line
    from compaction.models import Summary
    from memory.models import MemoryRecord, MessageIndex
    from memory.services import snapshot_name

    pool, per_session, per_snapshot = corpus.pool, corpus.per_session, corpus.per_snapshot
    first_number = len(corpus.session_ids)
    with transaction.atomic():
        sessions = ChatSession.objects.bulk_create(
            ChatSession(
                user=corpus.user,
                bot=corpus.bot,
                title=f"chat {first_number + i + 1}",
                last_seq=per_session,
            )
            for i in range(count)
        )
        # Each session: which pool text every seq holds, and when it was said.
        plan: dict[int, list[tuple[str, int, datetime]]] = {}
        for i, session in enumerate(sessions):
            number = first_number + i
            rng = random.Random(1_000_003 * (number + 1))
            moment = START + timedelta(days=number * 0.7)
            rows = []
            for seq in range(1, per_session + 1):
                role = "user" if seq % 2 else "assistant"
                moment += timedelta(seconds=rng.randint(20, 400))
                rows.append((role, rng.randrange(len(pool.texts[role])), moment))
            plan[session.pk] = rows
        summaries = Summary.objects.bulk_create(
            Summary(
                session=session,
                level=1,
                text=f"[1] {plan[session.pk][0][2]:%Y-%m-%d} user: the chat so far.",
                token_count=40,
                first_seq=1,
                last_seq=per_session,
                source_tokens=sum(pool.tokens[r][i] for r, i, _ in plan[session.pk]),
                model="builtin/extractive",
                trigger=Summary.Trigger.SOFT,
                retention=1.0,
            )
            for session in sessions
        )
        summary_of = {s.session_id: s.pk for s in summaries}
        now = datetime.now(UTC)

        def snapshot_rows():
            for session in sessions:
                rows = plan[session.pk]
                for first in range(1, per_session + 1, per_snapshot):
                    last = min(per_session, first + per_snapshot - 1)
                    body = "\n".join(
                        transcript_line(
                            seq,
                            rows[seq - 1][2],
                            rows[seq - 1][0],
                            pool.texts[rows[seq - 1][0]][rows[seq - 1][1]],
                        )
                        for seq in range(first, last + 1)
                    )
                    tokens = sum(
                        pool.tokens[rows[s - 1][0]][rows[s - 1][1]] + 8
                        for s in range(first, last + 1)
                    )
                    yield (
                        session.pk,
                        "session",
                        snapshot_name(first, last),
                        "snapshot",
                        f"Pre-compaction snapshot of messages {first}–{last}",
                        body,
                        tokens,
                        first,
                        last,
                        True,
                        rows[last - 1][2],
                        now,
                    )

        _copy(
            MemoryRecord._meta.db_table,
            [
                "session_id",
                "scope",
                "name",
                "kind",
                "description",
                "body",
                "token_count",
                "first_seq",
                "last_seq",
                "indexed",
                "created_at",
                "updated_at",
            ],
            snapshot_rows(),
        )
        ids = [s.pk for s in sessions]
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT session_id, first_seq, id FROM memory_memoryrecord "
                "WHERE session_id = ANY(%s) AND kind = 'snapshot'",
                [ids],
            )
            snapshot_of = {(sid, first): pk for sid, first, pk in cursor.fetchall()}

        def message_rows():
            for session in sessions:
                summary = summary_of[session.pk]
                for seq, (role, i, moment) in enumerate(plan[session.pk], start=1):
                    yield (
                        session.pk,
                        seq,
                        role,
                        "chat",
                        pool.texts[role][i],
                        "complete",
                        pool.tokens[role][i],
                        False,
                        "",
                        "[]",
                        "",
                        "",
                        "",
                        "",
                        "",
                        "",
                        False,
                        summary,
                        moment,
                        moment,
                        0,
                    )

        _copy(
            Message._meta.db_table,
            [
                "session_id",
                "seq",
                "role",
                "kind",
                "content",
                "status",
                "token_count",
                "pinned",
                "client_id",
                "tool_calls",
                "tool_call_id",
                "tool_name",
                "model",
                "finish_reason",
                "error_code",
                "error_message",
                "stop_requested",
                "compacted_by_id",
                "created_at",
                "updated_at",
                "hop",
            ],
            message_rows(),
        )
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT id, session_id, seq FROM bots_message WHERE session_id = ANY(%s)", [ids]
            )
            message_ids = cursor.fetchall()

        def index_rows():
            for pk, sid, seq in message_ids:
                role, i, _ = plan[sid][seq - 1]
                first = (seq - 1) // per_snapshot * per_snapshot + 1
                yield (
                    pk,
                    sid,
                    seq,
                    snapshot_of[(sid, first)],
                    pool.terms[role][i],
                    pool.lengths[role][i],
                    "",  # no embedding model: word search only
                )

        _copy(
            MessageIndex._meta.db_table,
            ["message_id", "session_id", "seq", "record_id", "terms", "length", "embedding_model"],
            index_rows(),
        )
        rng = random.Random(first_number)
        MemoryRecord.objects.bulk_create(
            MemoryRecord(
                scope=MemoryRecord.Scope.SESSION,
                session=session,
                kind=MemoryRecord.Kind.INFO,
                name=f"note-{n}",
                description=f"{_pick(rng, 'name')}'s plans for {_pick(rng, 'place')}",
                body=make_text(rng, "user"),
            )
            for session in sessions
            for n in range(SESSION_INFOS)
        )
    corpus.session_ids.extend(s.pk for s in sessions)


def tables_analyze() -> float:
    from django.db import connection

    started = time.perf_counter()
    with connection.cursor() as cursor:
        for table in (
            "bots_chatsession",
            "bots_message",
            "compaction_summary",
            "memory_memoryrecord",
            "memory_messageindex",
        ):
            cursor.execute(f"VACUUM (ANALYZE) {table}")
    return time.perf_counter() - started


def row_counts(corpus: Corpus) -> dict[str, int]:
    """What the corpus holds, counted in the database (the smoke test checks these)."""
    from bots.models import ChatSession, Message
    from compaction.models import Summary
    from memory.models import MemoryRecord, MessageIndex

    sessions = ChatSession.objects.filter(bot=corpus.bot)
    return {
        "sessions": sessions.count(),
        "messages": Message.objects.filter(session__bot=corpus.bot).count(),
        "compacted": Message.objects.filter(
            session__bot=corpus.bot, compacted_by_id__isnull=False
        ).count(),
        "indexed": MessageIndex.objects.filter(session__bot=corpus.bot).count(),
        "indexed_with_record": MessageIndex.objects.filter(
            session__bot=corpus.bot, record__isnull=False
        ).count(),
        "summaries": Summary.objects.filter(session__bot=corpus.bot).count(),
        "snapshots": MemoryRecord.objects.filter(
            session__bot=corpus.bot, kind=MemoryRecord.Kind.SNAPSHOT
        ).count(),
        "infos": MemoryRecord.objects.filter(kind=MemoryRecord.Kind.INFO).count(),
    }


# --- measuring ----------------------------------------------------------------------------------


@dataclass
class Measured:
    size: int
    total_ms: list[float] = field(default_factory=list)
    sql_ms: list[float] = field(default_factory=list)  # inside cursor.execute, per search
    queries: list[int] = field(default_factory=list)
    candidates_ms: list[float] = field(default_factory=list)
    candidates: list[int] = field(default_factory=list)
    hits: list[int] = field(default_factory=list)
    load: float = 0.0  # the machine's 1-minute load average after measuring


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    if not ordered:
        return 0.0
    rank = max(0, min(len(ordered) - 1, round(share * len(ordered) + 0.5) - 1))
    return ordered[rank]


class _SqlClock:
    """Wall time spent in ``cursor.execute`` (round trip, server, fetch), and how many calls."""

    def __init__(self) -> None:
        self.seconds, self.calls = 0.0, 0

    def __call__(self, execute, sql, params, many, context):
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1


def search_once(session, question: str) -> tuple[float, int, float, int]:
    """One ``records_search``: (ms, hits, ms inside SQL, queries)."""
    from django.db import connection

    from memory.queries import records_search

    clock = _SqlClock()
    with connection.execute_wrapper(clock):
        started = time.perf_counter()
        hits = records_search(session=session, query=question)
        elapsed = time.perf_counter() - started
    return elapsed * 1000, len(hits), clock.seconds * 1000, clock.calls


def candidates_once(session, question: str) -> tuple[float, int]:
    from memory import search
    from memory.terms import query_terms

    wanted = query_terms(search.clean_query(question), search.QUERY_MAX_TERMS)
    started = time.perf_counter()
    scored, _ = search.messages_ranked(session_id=session.pk, query=wanted)
    return (time.perf_counter() - started) * 1000, len(scored)


def measure(corpus: Corpus, size: int, *, sessions: int, seed: int) -> Measured:
    from bots.models import ChatSession

    rng = random.Random(seed)
    chosen = rng.sample(corpus.session_ids, min(len(corpus.session_ids), sessions + 1))
    loaded = {s.pk: s for s in ChatSession.objects.select_related("bot").filter(pk__in=chosen)}
    warm, measured = loaded[chosen[0]], [loaded[pk] for pk in chosen[1:]] or [loaded[chosen[0]]]
    for question in QUESTIONS:
        search_once(warm, question)
        candidates_once(warm, question)
    result = Measured(size=size)
    asks = [(session, question) for session in measured for question in QUESTIONS]
    rng.shuffle(asks)
    for session, question in asks:
        elapsed, hits, sql_ms, queries = search_once(session, question)
        result.total_ms.append(elapsed)
        result.hits.append(hits)
        result.sql_ms.append(sql_ms)
        result.queries.append(queries)
    for session, question in asks:
        elapsed, found = candidates_once(session, question)
        result.candidates_ms.append(elapsed)
        result.candidates.append(found)
    result.load = os.getloadavg()[0]
    return result


def explain_candidates(corpus: Corpus, question: str) -> list[str]:
    """``EXPLAIN (ANALYZE, BUFFERS)`` of the candidate query as ``messages_ranked`` sends it."""
    from django.db import connection

    from memory import search
    from memory.terms import query_terms

    wanted = query_terms(search.clean_query(question), search.QUERY_MAX_TERMS)
    ored = " || ".join(["plainto_tsquery('simple', %s)"] * len(wanted))
    sql = search._PG_CANDIDATES.replace("{query}", ored)
    session_id = corpus.session_ids[len(corpus.session_ids) // 2]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, BUFFERS) {sql}", [session_id] * 3 + wanted)
        return [row[0] for row in cursor.fetchall()]


def _plan_summary(lines: list[str]) -> list[str]:
    keep = (
        "Scan",
        "Bitmap",
        "Index Cond",
        "Recheck Cond",
        "Filter",
        "Rows Removed",
        "Heap Blocks",
        "Buffers",
        "Planning Time",
        "Execution Time",
        "->",
    )
    return [ln for ln in lines if any(k in ln for k in keep)]


# --- database -----------------------------------------------------------------------------------


def _admin(url: str):
    import psycopg

    return psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True)


def database_fresh(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    if "bench" not in name:
        raise SystemExit(f"refusing to drop database {name!r}: its name must contain 'bench'")
    with _admin(url) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def database_drop(url: str) -> None:
    from django.db import connections

    connections.close_all()
    database_fresh(url)


# --- main ---------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--quick", action="store_true", help="10k and 100k only (a smoke run)")
    parser.add_argument("--per-session", type=int, default=PER_SESSION)
    parser.add_argument("--per-snapshot", type=int, default=PER_SNAPSHOT)
    parser.add_argument("--sessions", type=int, default=SESSIONS_MEASURED)
    parser.add_argument("--keep", action="store_true", help="keep the database afterwards")
    options = parser.parse_args()
    sizes = QUICK_SIZES if options.quick else tuple(int(n) for n in options.sizes.split(","))
    sizes = tuple(sorted(sizes))

    os.environ.setdefault("DATABASE_URL", DEFAULT_URL)
    os.environ.setdefault("DATABASE_POOL", "false")
    url = os.environ["DATABASE_URL"]
    database_fresh(url)
    from _django import setup

    started = time.perf_counter()
    setup()
    print(
        f"database {url.rsplit('/', 1)[1]} created and migrated in "
        f"{time.perf_counter() - started:.1f} s"
    )

    started = time.perf_counter()
    pool = build_pool(POOL_TEXTS)
    print(
        f"text pool: {len(pool.texts['user']):,} user + {len(pool.texts['assistant']):,} "
        f"assistant distinct texts, terms and tokens in {time.perf_counter() - started:.1f} s"
    )
    corpus = corpus_start(
        pool=pool, per_session=options.per_session, per_snapshot=options.per_snapshot
    )
    results: list[Measured] = []
    plans: list[tuple[str, list[str]]] = []
    for size in sizes:
        seconds = grow(corpus, size)
        vacuum = tables_analyze()
        counts = row_counts(corpus)
        print(
            f"{size:>9,}: {counts['sessions']:,} sessions, {counts['indexed']:,} indexed messages, "
            f"{counts['snapshots']:,} snapshots, {counts['infos']:,} info records; "
            f"grown in {seconds:.0f} s, VACUUM ANALYZE {vacuum:.0f} s"
        )
        results.append(measure(corpus, size, sessions=options.sessions, seed=size))
        if size == sizes[-1]:
            for question in (QUESTIONS[0], QUESTIONS[2]):
                plans.append((question, explain_candidates(corpus, question)))

    print()
    print(
        f"records_search, {len(QUESTIONS)} questions x {options.sessions} sessions per size "
        f"(ms; warm-up pass first)"
    )
    header = f"{'':>22}" + "".join(f"{m.size:>12,}" for m in results)
    print(header)
    rows = (
        ("p50", lambda m: f"{statistics.median(m.total_ms):12.1f}"),
        ("p95", lambda m: f"{percentile(m.total_ms, 0.95):12.1f}"),
        ("max", lambda m: f"{max(m.total_ms):12.1f}"),
        ("in SQL mean", lambda m: f"{statistics.mean(m.sql_ms):12.1f}"),
        (
            "outside SQL mean",
            lambda m: f"{statistics.mean(m.total_ms) - statistics.mean(m.sql_ms):12.1f}",
        ),
        ("queries per search", lambda m: f"{statistics.mean(m.queries):12.1f}"),
        ("candidates p50", lambda m: f"{statistics.median(m.candidates_ms):12.1f}"),
        ("candidates p95", lambda m: f"{percentile(m.candidates_ms, 0.95):12.1f}"),
        ("candidate msgs mean", lambda m: f"{statistics.mean(m.candidates):12.0f}"),
        ("hits mean", lambda m: f"{statistics.mean(m.hits):12.1f}"),
        ("load average (1 min)", lambda m: f"{m.load:12.1f}"),
    )
    for label, cell in rows:
        print(f"{label:>22}" + "".join(cell(m) for m in results))

    for question, lines in plans:
        print()
        print(f"EXPLAIN (ANALYZE) candidate query at {sizes[-1]:,}, {question!r}:")
        for ln in _plan_summary(lines):
            print(f"  {ln}")

    print()
    small, large = results[0], results[-1]
    p95_small, p95_large = percentile(small.total_ms, 0.95), percentile(large.total_ms, 0.95)
    ratio = p95_large / p95_small if p95_small else float("inf")
    p50_ratio = statistics.median(large.total_ms) / statistics.median(small.total_ms)
    label = f"{large.size:,}/{small.size:,}"
    print(f"p95 ratio {label}: {ratio:.2f}  (goal <= {GOAL_RATIO:g})")
    print(f"p50 ratio {label}: {p50_ratio:.2f}")
    print(f"p95 at {large.size:,}: {p95_large:.1f} ms  (goal <= {GOAL_MS:g} ms)")
    met = ratio <= GOAL_RATIO and p95_large <= GOAL_MS
    if large.size < 1_000_000:
        print(
            f"goal {'met' if met else 'NOT met'} at {large.size:,} "
            "(the goal is stated at 1,000,000)"
        )
    else:
        print(
            f"goal {'met' if met else 'NOT met'}: p95 at 1M <= {GOAL_RATIO:g} x p95 at 10k "
            f"and <= {GOAL_MS:g} ms"
        )
    if not options.keep:
        database_drop(url)


if __name__ == "__main__":
    main()
