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
  so a reply's wall time is the platform's; goal room <= 1.2x one-bot), and the same time split
  per phase: soft compaction (in-process here: embedded mode runs the compaction task inside the
  turn, so it is in both figures), hard compaction the call waited for, the context build, and
  everything else (send, claim, stream, finish, frames, the meter); SQL statements per reply;
- hop-limit violations: a user message that led to more than ``ROOM_MAX_HOPS`` bot-to-bot
  replies, or a bot answering one user message twice (goal 0); and replies not complete.

    .venv/bin/python bench/rooms.py [--messages 300]   # DATABASE_URL defaults to .../chat_bench

Like with like: the same three bots (same windows, same summariser) answer the same user messages
with one model call each, in the room and in their own one-bot chats. A room reply's time is its
user message's send divided by the replies it produced (the send is shared by the three), a
one-bot reply's is its own send. The warm-up runs one compaction as well as one turn before the
figures: the first summariser call of a process imports litellm (seconds), and since the room's
tightest bot compacts first, that import used to land in the room's figure alone.

``--stack``: the same run on the stack as deployed (bench/_stack.py: uvicorn, the Celery worker
fleet, PostgreSQL, Redis; DATABASE_URL defaults to .../chat_bench_stack, REDIS_URL to db 14,
flushed). There a turn dispatches soft compaction to the ``compaction`` queue and the reply does
not wait for it (docs/compaction.md: soft is asynchronous), so the figure is what a user waits for:
each user message goes over the room's websocket and its time is from the send to the last reply's
``message.completed``, divided by the replies; a one-bot reply's, from its send to its
``message.completed``. The worker's and the web server's CPU are read per reply too, so the
compaction work the room costs shows even where nobody waits for it. Before each measured send
the queues are drained (no task queued or running): a side's compaction never runs during the
other side's replies, only during its own.
"""

import argparse
import random
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import fake_bot, fake_key_env, setup  # noqa: E402

STACK = "--stack" in sys.argv
if STACK:
    import _stack

    fake_key_env()
    _stack.django_setup()
else:
    setup(fake_key=True)

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from bots.models import Bot, Message  # noqa: E402
from chat_platform.llm.tokens import count_message_tokens  # noqa: E402
from compaction import pipeline as context_pipeline  # noqa: E402
from compaction import services as compaction_services  # noqa: E402
from compaction.engine import SUMMARY_INSTRUCTIONS  # noqa: E402
from compaction.models import CompactionEvent  # noqa: E402
from compaction.pipeline import bot_budget  # noqa: E402
from tests.fakeopenai import FakeOpenAI, Reply  # noqa: E402
from turns import hooks as turn_hooks  # noqa: E402
from turns import turn as bots_turn  # noqa: E402
from turns.services.participants import participant_add, session_reply_mode_set  # noqa: E402
from turns.services.send import session_message_send  # noqa: E402
from turns.services.session import session_create  # noqa: E402

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


class Phases:
    """Exclusive wall time per phase (a phase entered inside another pauses it), by where."""

    def __init__(self) -> None:
        self.totals: Counter[tuple[str, str]] = Counter()
        self.stack: list[list] = []  # [phase, started]
        self.where = "room"

    def wrap(self, module: object, attr: str, phase: str) -> None:
        real = getattr(module, attr)

        def timed(*args, **kwargs):
            now = time.perf_counter()
            if self.stack:
                outer = self.stack[-1]
                self.totals[(self.where, outer[0])] += now - outer[1]
            self.stack.append([phase, now])
            try:
                return real(*args, **kwargs)
            finally:
                ended = time.perf_counter()
                name, started = self.stack.pop()
                self.totals[(self.where, name)] += ended - started
                if self.stack:
                    self.stack[-1][1] = ended

        setattr(module, attr, timed)


def sent_tokens(body: dict) -> int:
    return sum(
        count_message_tokens(m.get("content") or "", model=MODEL)
        + (count_message_tokens(m["name"], model=MODEL) if m.get("name") else 0)
        for m in body["messages"]
    )


def queues_busy(redis_client) -> bool:  # noqa: ANN001
    """A task queued (``chat``, ``compaction``) or taken and not yet acknowledged (the tasks are
    ``acks_late``: kombu keeps them in ``unacked`` until they return)."""
    return bool(
        redis_client.llen("chat") or redis_client.llen("compaction") or redis_client.hlen("unacked")
    )


async def drained(redis_client, timeout: float = 120) -> None:  # noqa: ANN001
    """Until no task is queued or running, seen three times 10 ms apart (a finishing turn
    dispatches its soft compaction on commit, just after its frame)."""
    import asyncio

    deadline = time.monotonic() + timeout
    quiet = 0
    while quiet < 3:
        quiet = 0 if queues_busy(redis_client) else quiet + 1
        if time.monotonic() > deadline:
            raise SystemExit("the stack's queues did not drain in time")
        await asyncio.sleep(0.01)


async def replies_completed(ws, count: int, timeout: float = 60) -> list[float]:  # noqa: ANN001
    """``perf_counter`` times of the next ``count`` chat replies' ``message.completed``."""
    import asyncio
    import json

    done: list[float] = []
    while len(done) < count:
        frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=timeout))
        kind = frame.get("type")
        if kind in ("message.failed", "error"):
            raise SystemExit(f"a reply failed: {str(frame)[:300]}")
        message = frame.get("message") or {}
        if (
            kind == "message.completed"
            and message.get("role") == "assistant"
            and message.get("kind", "chat") == "chat"
        ):
            done.append(time.perf_counter())
    return done


async def stack_run(
    stack,  # noqa: ANN001
    token: str,
    room_id: int,
    solo_ids: list[int],
    contents: list[str],
    where: list[str],
    replies_per_message: int,
    *,
    side: str | None = None,
) -> tuple[list[float], list[float], float, Counter[tuple[str, str]]]:
    """The measured loop on the stack: per user message, the room (one send, every seat's reply)
    then each one-bot chat, each after the queues drained (``side``: one label for all of them,
    the warm-up's). Returns the room's elapsed time per user message, the one-bot chats' times
    per reply, their sum, and CPU seconds by (side, process)."""
    import json

    import redis
    import websockets

    redis_client = redis.Redis.from_url(settings.REDIS_URL)
    headers = {"Authorization": f"Token {token}"}
    sockets = {
        sid: await websockets.connect(
            f"{stack.ws_base}/ws/sessions/{sid}/",
            additional_headers=headers,
            open_timeout=30,
            max_size=None,
        )
        for sid in [room_id, *solo_ids]
    }
    cpu: Counter[tuple[str, str]] = Counter()
    room_elapsed: list[float] = []
    solo_times: list[float] = []

    async def one(side: str, sid: int, content: str, count: int) -> float:
        where[0] = side
        await drained(redis_client)
        worker, web = stack.worker.cpu(), stack.web.cpu()
        started = time.perf_counter()
        await sockets[sid].send(json.dumps({"type": "message.send", "content": content}))
        done = await replies_completed(sockets[sid], count)
        elapsed = max(done) - started
        await drained(redis_client)
        cpu[(side, "worker")] += stack.worker.cpu() - worker
        cpu[(side, "web")] += stack.web.cpu() - web
        return elapsed

    try:
        for n, content in enumerate(contents):
            room_elapsed.append(await one(side or "room", room_id, content, replies_per_message))
            for sid in solo_ids:
                solo_times.append(await one(side or "solo", sid, content, 1))
            if (n + 1) % 50 == 0:
                print(f"  … {n + 1} messages", flush=True)
    finally:
        for ws in sockets.values():
            await ws.close()
    return room_elapsed, solo_times, sum(solo_times), cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument(
        "--stack",
        action="store_true",
        help="run on the deployed stack (uvicorn, Celery worker fleet, Redis), see the docstring",
    )
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

    phases = Phases()
    phases.wrap(compaction_services, "session_compact_soft", "soft compaction")
    phases.wrap(context_pipeline, "compaction_hard", "hard compaction (waited)")
    phases.wrap(bots_turn, "context_build", "context build")
    statements: Counter[str] = Counter()

    def counted(execute, sql, params, many, context):
        statements[phases.where] += 1
        return execute(sql, params, many, context)

    user, _ = get_user_model().objects.get_or_create(username="bench-rooms")
    Bot.objects.filter(owner=user).delete()
    with FakeOpenAI(responder=responder) as fake:
        bots = {}
        for name, window in WINDOWS:
            bots[name] = fake_bot(
                user,
                fake,
                name=name,
                model=MODEL,
                context_window=window,
                max_output_tokens=400,
                system_prompt=f"You are {name}.",
            )
        room = session_create(user=user, bot_id=bots[order[0]].pk, title="bench room")
        for name in order[1:]:
            participant_add(user=user, session_id=room.pk, bot_id=bots[name].pk)
        session_reply_mode_set(user=user, session_id=room.pk, reply_mode="all")
        solo = {name: session_create(user=user, bot_id=bots[name].pk) for name in order}
        if args.stack:
            room_times, solo_times, room_elapsed, cpu = on_stack(
                args, user, bots, room, solo, order, where
            )
        else:
            room_times, solo_times, room_elapsed, sends = in_process(
                args, user, bots, room, solo, order, where, phases, counted, rng
            )

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
        f"per-reply platform time, until the reply is complete: room {room_ms:.1f} ms (p50 "
        f"{statistics.median(room_times) * 1000:.1f}) vs one-bot {solo_ms:.1f} ms (p50 "
        f"{statistics.median(solo_times) * 1000:.1f}) -> {room_ms / solo_ms:.2f}x  (goal <= 1.2x)"
    )
    if not args.stack:
        room_send, solo_send = (statistics.mean(sends[w]) * 1000 for w in ("room", "solo"))
        print(
            f"per-reply send time, the in-process soft compaction after the replies included: "
            f"room {room_send:.1f} ms vs one-bot {solo_send:.1f} ms -> {room_send / solo_send:.2f}x"
        )
    room_replies = sum(replies_by_bot[("room", name)] for name in order)
    solo_replies = sum(replies_by_bot[("solo", name)] for name in order)
    if args.stack:
        print("CPU per reply (ms; soft compaction runs in the worker, off the reply's path):")
        for proc in ("worker", "web"):
            room_p = cpu[("room", proc)] * 1000 / room_replies
            solo_p = cpu[("solo", proc)] * 1000 / solo_replies
            print(
                f"  {proc:<8} room {room_p:7.1f} vs one-bot {solo_p:7.1f} -> {room_p / solo_p:.2f}x"
            )
    else:
        totals = {"room": room_elapsed, "solo": sum(sends["solo"])}
        counts = {"room": room_replies, "solo": solo_replies}
        print("per-reply send time split (ms per reply): phase, room vs one-bot")
        named = ["soft compaction", "hard compaction (waited)", "context build"]
        for name in [*named, "everything else"]:
            if name == "everything else":
                values = {
                    w: totals[w] - sum(phases.totals[(w, n)] for n in named)
                    for w in ("room", "solo")
                }
            else:
                values = {w: phases.totals[(w, name)] for w in ("room", "solo")}
            room_p, solo_p = (values[w] * 1000 / counts[w] for w in ("room", "solo"))
            print(f"  {name:<26} {room_p:8.1f} vs {solo_p:8.1f}")
        compaction_ms = {
            w: sum(phases.totals[(w, n)] for n in named[:2]) * 1000 / counts[w]
            for w in ("room", "solo")
        }
        room_rest = room_send - compaction_ms["room"]
        solo_rest = solo_send - compaction_ms["solo"]
        print(
            f"  without compaction: room {room_rest:.1f} ms vs one-bot {solo_rest:.1f} ms -> "
            f"{room_rest / solo_rest:.2f}x (a breakdown, not the goal's metric)"
        )
        print(
            f"SQL statements per reply: room {statements['room'] / room_replies:.1f} vs one-bot "
            f"{statements['solo'] / solo_replies:.1f}"
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


def in_process(args, user, bots, room, solo, order, where, phases, counted, rng):  # noqa: ANN001, ANN201, PLR0913
    """The measured loop in embedded mode: per user message, the room's send (every seat's reply,
    and the soft compactions the in-process tasks run inside it) then each one-bot chat's."""
    # Warm-up outside the figures: the first turn and the first compaction of a process
    # import and cache what every later one reuses (litellm, for the summariser's call).
    where[0] = phases.where = "warm"
    warm = session_create(user=user, bot_id=bots[order[-1]].pk)
    for _ in range(3):
        session_message_send(user=user, session_id=warm.pk, content=" ".join(WORDS))
    session_message_send(user=user, session_id=warm.pk, content="/compact")
    # When each reply was complete (its ``message.completed``), as the turn announces it.
    completed = [0.0]
    announce = turn_hooks.notify_completed

    def completed_now(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        completed[0] = time.perf_counter()
        return announce(*args, **kwargs)

    turn_hooks.notify_completed = completed_now
    room_times: list[float] = []
    solo_times: list[float] = []
    sends = {"room": [], "solo": []}
    room_elapsed = 0.0
    for n in range(args.messages):
        content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        where[0] = phases.where = "room"
        before = Message.objects.filter(session=room, role="assistant").count()
        started = time.perf_counter()
        with connection.execute_wrapper(counted):
            session_message_send(user=user, session_id=room.pk, content=content)
        elapsed = time.perf_counter() - started
        made = max(1, Message.objects.filter(session=room, role="assistant").count() - before)
        room_times.append((completed[0] - started) / made)
        sends["room"].append(elapsed / made)
        room_elapsed += elapsed
        where[0] = phases.where = "solo"
        for name in order:
            started = time.perf_counter()
            with connection.execute_wrapper(counted):
                session_message_send(user=user, session_id=solo[name].pk, content=content)
            sends["solo"].append(time.perf_counter() - started)
            solo_times.append(completed[0] - started)
        if (n + 1) % 50 == 0:
            print(f"  … {n + 1} messages", flush=True)
    turn_hooks.notify_completed = announce
    return room_times, solo_times, room_elapsed, sends


def on_stack(args, user, bots, room, solo, order, where):  # noqa: ANN001, ANN201, PLR0913
    """``--stack``: the measured loop on the deployed stack (``stack_run``); returns the room's
    time per reply, the one-bot chats' times, the room's total and CPU seconds by (side,
    process)."""
    import asyncio

    from rest_framework.authtoken.models import Token

    token = Token.objects.get_or_create(user=user)[0].key
    rng = random.Random(20)
    contents = [
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
        for _ in range(args.messages)
    ]
    # Warm-up outside the figures: each worker process imports litellm on its first model
    # call; two tight one-bot chats with long messages compact early, on either process.
    warm = [session_create(user=user, bot_id=bots[order[0]].pk) for _ in range(2)]
    long = " ".join(WORDS * 3)
    with _stack.running_stack() as stack:
        asyncio.run(
            stack_run(stack, token, warm[0].pk, [warm[1].pk], [long] * 8, where, 1, side="warm")
        )
        room_elapsed, solo_times, _, cpu = asyncio.run(
            stack_run(
                stack,
                token,
                room.pk,
                [solo[name].pk for name in order],
                contents,
                where,
                len(order),
            )
        )
    users = Message.objects.filter(session=room, role="user").order_by("seq")
    made = Counter(
        Message.objects.filter(session=room, role="assistant", kind="chat").values_list(
            "prompted_by_id", flat=True
        )
    )
    counts = [made[pk] for pk in users.values_list("pk", flat=True)]
    if len(counts) != len(room_elapsed) or 0 in counts:
        raise SystemExit(f"room sends and replies do not match: {counts[:10]} …")
    room_times = [elapsed / count for elapsed, count in zip(room_elapsed, counts, strict=True)]
    return room_times, solo_times, sum(room_elapsed), cpu


if __name__ == "__main__":
    main()
