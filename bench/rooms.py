"""Rooms: three bots in one conversation, each compacting it from its own seat (issue 19).

A 3-bot room (context windows 4k, 8k and 32k; summariser = the same fake model) in ``all`` mode
takes ``--messages`` user messages (default 300) through the real chat turn (services -> Celery
task, in-process -> the one context pipeline -> gateway -> litellm -> a local fake OpenAI
server); every tenth reply of a bot mentions the next bot, so hand-overs and their bound run
too. Side by side, interleaved message by message, the same three bots each answer the same
messages in a one-bot chat of their own. Prints:

- requests over each bot's budget B, counted by the platform's one token counter (goal 0);
- compaction rounds per bot (compacted events by trigger) and the summariser calls;
- per-reply platform time in the room vs in the one-bot chats (the provider answers at once,
  so a reply's wall time is the platform's; goal room <= 1.2x one-bot);
- hop-limit violations: a user message that led to more than ``ROOM_MAX_HOPS`` bot-to-bot
  replies, or a bot answering one user message twice (goal 0); and replies not complete.

    .venv/bin/python bench/rooms.py [--messages 300]   # DATABASE_URL defaults to .../chat_bench
"""

import argparse
import os
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import setup  # noqa: E402

os.environ["BENCH_FAKE_KEY"] = "sk-bench"
# The provider policy: a bot's key variable must be allow-listed (checked at settings load).
_allowed = os.environ.get("PROVIDER_KEY_ENV_ALLOWED", "OPENAI_API_KEY,ANTHROPIC_API_KEY")
os.environ["PROVIDER_KEY_ENV_ALLOWED"] = ",".join(
    dict.fromkeys([*filter(None, _allowed.split(",")), "BENCH_FAKE_KEY"])
)
setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402

from bots.models import Bot, Message  # noqa: E402
from bots.services.participants import participant_add, session_reply_mode_set  # noqa: E402
from bots.services.send import session_message_send  # noqa: E402
from bots.services.session import session_create  # noqa: E402
from chat_platform.llm.tokens import count_message_tokens  # noqa: E402
from compaction.engine import SUMMARY_INSTRUCTIONS  # noqa: E402
from compaction.models import CompactionEvent  # noqa: E402
from compaction.pipeline import bot_budget  # noqa: E402
from tests.fakeopenai import FakeOpenAI, Reply  # noqa: E402

MODEL = "openai/fake-model"
WINDOWS = [("Scout", 4_000), ("Planner", 8_000), ("Archivist", 32_000)]
WORDS = str.split(
    "we agreed to ship the invoice service on Tuesday after Alice reviews ticket #4471 and "
    "the budget of 12,500 EUR stays fixed while Bob migrates the database to eu-west-1 next "
    "week because latency matters more than cost for the Berlin customers this quarter"
)


def summary_reply(body: dict) -> Reply:
    """A summariser that keeps roughly one word in eight of the transcript, with its facts."""
    transcript = body["messages"][-1]["content"]
    words = [w for w in transcript.split() if not w.startswith("[")]
    kept = [w for i, w in enumerate(words) if i % 8 == 0 or any(c.isdigit() for c in w)]
    return Reply(text="Summary: " + " ".join(kept[: max(12, len(words) // 6)]))


def sent_tokens(body: dict) -> int:
    return sum(
        count_message_tokens(m.get("content") or "", model=MODEL)
        + (count_message_tokens(m["name"], model=MODEL) if m.get("name") else 0)
        for m in body["messages"]
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300)
    args = parser.parse_args()
    rng = random.Random(19)
    prompts = {f"You are {name}.": name for name, _ in WINDOWS}
    slugs = {name: name.lower() for name, _ in WINDOWS}
    order = [name for name, _ in WINDOWS]
    sizes: dict[tuple[str, str], list[int]] = defaultdict(list)  # (where, bot) -> tokens sent
    summariser_calls: Counter[str] = Counter()
    replies_by_bot: Counter[tuple[str, str]] = Counter()
    where = ["room"]

    def responder(body: dict) -> Reply:
        first = body["messages"][0]["content"]
        if first == SUMMARY_INSTRUCTIONS:
            summariser_calls[where[0]] += 1
            return summary_reply(body)
        name = prompts[first]
        sizes[(where[0], name)].append(sent_tokens(body))
        replies_by_bot[(where[0], name)] += 1
        text = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120)))
        if where[0] == "room" and replies_by_bot[(where[0], name)] % 10 == 0:
            following = order[(order.index(name) + 1) % len(order)]
            text += f" @{slugs[following]} what do you think?"
        return Reply(text=text)

    user, _ = get_user_model().objects.get_or_create(username="bench-rooms")
    Bot.objects.filter(owner=user).delete()
    with FakeOpenAI(responder=responder) as fake:
        bots = {}
        for name, window in WINDOWS:
            bot = Bot.objects.create(
                owner=user,
                name=name,
                model=MODEL,
                api_base=fake.url,
                api_key_env="BENCH_FAKE_KEY",
                context_window=window,
                max_output_tokens=400,
                system_prompt=f"You are {name}.",
            )
            bot.api_base_approved = fake.url  # as staff would approve a local server
            bot.save(update_fields=["api_base_approved"])
            bots[name] = bot
        room = session_create(user=user, bot_id=bots[order[0]].pk, title="bench room")
        for name in order[1:]:
            participant_add(user=user, session_id=room.pk, bot_id=bots[name].pk)
        session_reply_mode_set(user=user, session_id=room.pk, reply_mode="all")
        solo = {name: session_create(user=user, bot_id=bots[name].pk) for name in order}
        # Warm-up outside the figures: the first turn of a process imports and caches what
        # every later one reuses.
        where[0] = "solo"
        warm = session_create(user=user, bot_id=bots[order[-1]].pk)
        session_message_send(user=user, session_id=warm.pk, content="warm up")
        room_times: list[float] = []
        solo_times: list[float] = []
        for n in range(args.messages):
            content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
            where[0] = "room"
            before = Message.objects.filter(session=room, role="assistant").count()
            started = time.perf_counter()
            session_message_send(user=user, session_id=room.pk, content=content)
            elapsed = time.perf_counter() - started
            made = Message.objects.filter(session=room, role="assistant").count() - before
            room_times.append(elapsed / max(1, made))
            where[0] = "solo"
            for name in order:
                started = time.perf_counter()
                session_message_send(user=user, session_id=solo[name].pk, content=content)
                solo_times.append(time.perf_counter() - started)
            if (n + 1) % 50 == 0:
                print(f"  … {n + 1} messages", flush=True)

    limit = settings.ROOM_MAX_HOPS
    print(f"room of {len(order)} bots, {args.messages} user messages in 'all' mode")
    print(f"{'bot':<10} {'window':>7} {'B':>6} {'requests':>9} {'max sent':>9} {'over B':>7}")
    over_total = 0
    for name, window in WINDOWS:
        budget = bot_budget(bots[name]).budget
        sent = sizes[("room", name)]
        over = sum(1 for s in sent if s > budget)
        over_total += over
        print(f"{name:<10} {window:>7,} {budget:>6,} {len(sent):>9} {max(sent):>9,} {over:>7}")
    print(f"requests over their bot's B: {over_total}  (goal 0)")
    print("compaction rounds per bot (compacted events by trigger; other outcomes):")
    for name in order:
        events = CompactionEvent.objects.filter(session=room, bot=bots[name])
        done = Counter(events.filter(outcome="compacted").values_list("trigger", flat=True))
        other = Counter(events.exclude(outcome="compacted").values_list("outcome", flat=True))
        solo_done = CompactionEvent.objects.filter(session=solo[name], outcome="compacted").count()
        print(
            f"  {name:<10} room {sum(done.values()):>4} {dict(done)} other {dict(other)}; "
            f"its one-bot chat {solo_done}"
        )
    print(
        f"summariser calls: room {summariser_calls['room']}, "
        f"one-bot chats {summariser_calls['solo']}"
    )
    room_ms = statistics.mean(room_times) * 1000
    solo_ms = statistics.mean(solo_times) * 1000
    print(
        f"per-reply platform time: room {room_ms:.1f} ms (p50 "
        f"{statistics.median(room_times) * 1000:.1f}) vs one-bot {solo_ms:.1f} ms (p50 "
        f"{statistics.median(solo_times) * 1000:.1f}) -> {room_ms / solo_ms:.2f}x  (goal <= 1.2x)"
    )
    replies = list(
        Message.objects.filter(session=room, role="assistant", kind="chat").values_list(
            "prompted_by_id", "bot_id", "hop", "status"
        )
    )
    chains: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for root, bot_id, hop, _ in replies:
        chains[root].append((bot_id, hop))
    violations = sum(
        1
        for chain in chains.values()
        if sum(1 for _, hop in chain if hop > 0) > limit or len({b for b, _ in chain}) != len(chain)
    )
    handovers = sum(1 for _, _, hop, _ in replies if hop > 0)
    notices = Message.objects.filter(session=room, kind="notice").count()
    unfinished = sum(1 for *_, status in replies if status != "complete")
    print(
        f"hand-overs: {handovers} bot-to-bot replies, {notices} notices of a stopped chain; "
        f"hop-limit violations: {violations}  (goal 0, ROOM_MAX_HOPS={limit})"
    )
    print(f"room replies: {len(replies)}, not complete: {unfinished}")


if __name__ == "__main__":
    main()
