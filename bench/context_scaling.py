"""Does building one turn's context stay flat as the history grows? (issues: admission, 10)

Builds two sessions for one bot with a 128k window — 1,000 and 1,000,000 messages of realistic
lengths, bulk-loaded with PostgreSQL COPY with their token counts — and measures, side by side in
one run, the time and the peak Python memory of ``context_build`` for the next turn of each.
Prints both ratios (1M / 1k). Goal: time <= 1.2, peak memory <= 1.1. The sessions are kept and
reused by later runs (the load takes minutes; ``--sizes 1000,100000`` for a quicker look).

``--compacted``: the history a long conversation really has — all but its newest ``LIVE``
messages covered by one active summary (its bot's seat's coverage rows, ``SummaryCoverage``,
with the seat's totals and covered floor, as fusion leaves them), so the live history fits the
window and the build takes all of it (``whole_history``). Its own sessions, kept beside the
uncompacted ones. ``--room``: the same history in a room of two bots, covered for the measured
bot by its own coverage rows, as in any chat.

    .venv/bin/python bench/context_scaling.py [--compacted | --room]   # DATABASE_URL: chat_bench
"""

import argparse
import json
import random
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import setup  # noqa: E402

setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402
from django.db.models import Count, Sum  # noqa: E402

from bots.models import Bot, ChatSession, Message  # noqa: E402
from bots.transitions import session_context_recount  # noqa: E402
from chat_platform.llm.tokens import count_message_tokens  # noqa: E402
from compaction.pipeline import context_build  # noqa: E402

SIZES = (1_000, 1_000_000)
ROUNDS = 7
# --compacted: the newest messages left uncovered (a few exchanges, well within the window).
LIVE = 40
WORDS = str.split(
    "the of and to in is that for it as with was on be by this are at from or have an they "
    "which one you were all we can her has there been if more when will would who so no "
    "deploy invoice Berlin Tuesday 2025-03-14 ticket #4471 budget approved Alice Bob latency "
    "database migration rollback customer contract renewal priority cache region eu-west-1"
)


def make_text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def title(size: int, mode: str) -> str:
    return f"{size} messages" + (f", {mode}" if mode else "")


def build_session(user, bot, size: int, mode: str = "") -> Message:
    """``mode``: "" (nothing compacted), "compacted" or "room" (module doc)."""
    session = ChatSession.objects.create(user=user, bot=bot, title=title(size, mode))
    rng = random.Random(size)
    # A pool of realistic texts (users short, assistants longer), counted once by the one counter.
    pool = {
        "user": [make_text(rng, rng.randint(8, 90)) for _ in range(300)],
        "assistant": [make_text(rng, rng.randint(40, 450)) for _ in range(300)],
    }
    counts = {
        role: [count_message_tokens(t, model=bot.model) for t in texts]
        for role, texts in pool.items()
    }
    summary_id = _summary(session, bot, size - LIVE) if mode else None
    _copy_messages(session, size, rng, pool, counts)
    if mode == "room":
        _room(session, bot)
    if summary_id is not None:
        _cover(session, bot, summary_id, size - LIVE)
    new = Message.objects.create(
        session=session,
        seq=size + 1,
        role="user",
        content="what did we decide?",
        token_count=count_message_tokens("what did we decide?", model=bot.model),
    )
    reply = Message.objects.create(
        session=session, seq=size + 2, role="assistant", status="pending", reply_to=new
    )
    session.last_seq = size + 2
    session.save(update_fields=["last_seq"])
    session_context_recount(session_id=session.pk)
    return reply


def _summary(session, bot, last_seq: int) -> int:
    """One active summary of messages 1..``last_seq``, as fusion leaves a long history."""
    from compaction.models import Summary

    text = "Earlier: the team planned the migration, approved the budget and met in Berlin."
    return Summary.objects.create(
        session=session,
        bot=bot,
        level=2,
        text=text,
        token_count=count_message_tokens(text, model=bot.model),
        first_seq=1,
        last_seq=last_seq,
        source_tokens=last_seq * 100,
        model="builtin/extractive",
        trigger=Summary.Trigger.FUSION,
        retention=1.0,
    ).pk


def _room(session, bot) -> None:
    """The session as a room of ``bot`` and another bot."""
    from bots.models import SessionParticipant

    other, _ = Bot.objects.get_or_create(
        owner=session.user, name="bench-room-other", defaults={"model": bot.model}
    )
    SessionParticipant.objects.create(session=session, bot=bot, is_default=True)
    SessionParticipant.objects.create(session=session, bot=other)
    ChatSession.objects.filter(pk=session.pk).update(is_room=True)


def _cover(session, bot, summary_id: int, last_seq: int) -> None:
    """The summary covers messages 1..``last_seq`` for ``bot``'s seat (coverage rows, its
    seat's totals and covered floor), as a compaction commits them in any chat."""
    from compaction.models import SeatState, SummaryCoverage

    covered = Message.objects.filter(session=session, seq__lte=last_seq)
    meta = SummaryCoverage._meta
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {meta.db_table} (summary_id, bot_id, message_id) "  # noqa: S608
            f"SELECT %s, %s, id FROM {Message._meta.db_table} WHERE session_id = %s AND seq <= %s",
            [summary_id, bot.pk, session.pk, last_seq],
        )
    totals = covered.aggregate(tokens=Sum("token_count"), messages=Count("id"))
    SeatState.objects.create(
        session=session,
        bot=bot,
        covered_tokens=totals["tokens"],
        covered_messages=totals["messages"],
    )
    room_floor(session.pk, bot.pk, last_seq)


def room_floor(session_id: int, bot_id: int, last_seq: int) -> None:
    """The seat's covered floor at ``last_seq``, as the writer of its coverage leaves it
    (``seat_floor``); a session loaded before the floor existed gets it here."""
    from compaction.engine.coverage import seat_floor
    from compaction.models import SeatState

    seat = SeatState.objects.filter(session_id=session_id, bot_id=bot_id)
    state = seat.values_list("covered_through_seq", "uncovered_ids").get()
    seat.update(**seat_floor(session_id, bot_id, 1, floor=state, through_seq=last_seq))


def _copy_messages(session, size: int, rng: random.Random, pool: dict, counts: dict) -> None:
    """COPY ``size`` messages into the table: every column, as Django would have written it."""
    from django.utils import timezone

    template = Message(session=session, seq=1, role="user", content="", created_at=timezone.now())
    for field in Message._meta.concrete_fields:
        if getattr(field, "auto_now", False) or getattr(field, "auto_now_add", False):
            setattr(template, field.attname, timezone.now())
    fields = [f for f in Message._meta.concrete_fields if not f.primary_key]
    base = {}
    for field in fields:
        value = field.get_db_prep_save(getattr(template, field.attname), connection)
        if field.get_internal_type() == "JSONField":
            value = json.dumps(getattr(template, field.attname))
        base[field.attname] = value
    columns = ", ".join(f'"{f.column}"' for f in fields)
    started = time.perf_counter()
    with (
        connection.cursor() as cursor,
        cursor.cursor.copy(f"COPY {Message._meta.db_table} ({columns}) FROM STDIN") as copy,
    ):
        for seq in range(1, size + 1):
            role = "user" if seq % 2 else "assistant"
            i = rng.randrange(300)
            row = dict(base, seq=seq, role=role, content=pool[role][i], token_count=counts[role][i])
            copy.write_row([row[f.attname] for f in fields])
    print(f"  loaded {size:,} messages in {time.perf_counter() - started:.0f} s (COPY)")


def measure(reply_id: int) -> tuple[float, int, int]:
    """Time one build (untraced), then the peak memory of another (tracemalloc slows it)."""
    reply = Message.objects.select_related("session__bot", "reply_to").get(pk=reply_id)
    started = time.perf_counter()
    built = context_build(session=reply.session, reply=reply)
    elapsed = time.perf_counter() - started
    del built
    reply = Message.objects.select_related("session__bot", "reply_to").get(pk=reply_id)
    tracemalloc.start()
    built = context_build(session=reply.session, reply=reply)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return elapsed, peak, built.admission.selected_tokens


def main() -> None:
    global SIZES
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default=",".join(str(n) for n in SIZES))
    parser.add_argument("--compacted", action="store_true", help="all but LIVE messages covered")
    parser.add_argument("--room", action="store_true", help="--compacted, in a room")
    args = parser.parse_args()
    mode = "room" if args.room else "compacted" if args.compacted else ""
    SIZES = tuple(int(n) for n in args.sizes.split(","))
    user, _ = get_user_model().objects.get_or_create(username="bench")
    # Admission alone: compaction off, so the 100k history stays uncompacted and every build
    # has to choose from all of it (with compaction on, a hard pass would run first).
    bot, _ = Bot.objects.update_or_create(
        owner=user,
        name="bench-128k-admission",
        defaults={
            "model": "openai/gpt-4o",
            "context_window": 128_000,
            "system_prompt": "Be helpful.",
            "compaction_enabled": False,
        },
    )
    replies = {}
    for size in SIZES:
        existing = Message.objects.filter(
            session__bot=bot, session__title=title(size, mode), status="pending"
        ).first()
        replies[size] = existing.pk if existing else build_session(user, bot, size, mode).pk
        if mode:
            room_floor(Message.objects.get(pk=replies[size]).session_id, bot.pk, size - LIVE)
    # Fresh planner statistics, as autovacuum keeps them on a live table after a bulk load.
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE bots_message")

    results: dict[int, list[tuple[float, int, int]]] = {size: [] for size in SIZES}
    for size in SIZES:  # warm caches (tokenizer, connection) for both
        measure(replies[size])
    for _ in range(ROUNDS):  # alternate, so machine noise hits both sides alike
        for size in SIZES:
            results[size].append(measure(replies[size]))

    summary = {}
    for size in SIZES:
        times = [r[0] for r in results[size]]
        peaks = [r[1] for r in results[size]]
        summary[size] = (statistics.median(times), statistics.median(peaks), results[size][0][2])
        print(
            f"{size:>7} messages: median {summary[size][0] * 1000:7.1f} ms, "
            f"peak {summary[size][1] / 1e6:6.2f} MB, sent {summary[size][2]:,} tokens"
        )
    small, large = summary[SIZES[0]], summary[SIZES[1]]
    label = f"{SIZES[1] // 1000:,}k/{SIZES[0] // 1000:,}k"
    print(f"time ratio {label}:        {large[0] / small[0]:.2f}  (goal <= 1.2)")
    print(f"peak memory ratio {label}: {large[1] / small[1]:.2f}  (goal <= 1.1)")


if __name__ == "__main__":
    main()
