"""What the context record costs a turn (issue 22: "≤ 1 statement, ≤ 5 % of the added latency").

A bot with a small window (so it compacts and fuses as it goes) takes ``--turns`` user messages
through the real chat turn in embedded mode (services -> the task in-process -> the one context
pipeline -> gateway -> litellm -> a local fake OpenAI server answering at once). The record's
own work in the turn is timed where it happens: ``turns.stream.call_entry`` (a call's parts and
budget, kept for the record: before the reply's ``message.completed``, so on the way to the
user) and ``turns.finished.context_record_write`` (the prompt version and the one INSERT, with its
commit: after the finish has sent the frame and woken the REST waiters, so worker time, not
reply latency). Prints, per turn, the platform's time, the record's time and its share, and the
record's statements; then the record's time on the reply's path against the added latency
measured with ``bench/turn_overhead.py`` on the same machine (``--added-ms``, default 25: that
bench's websocket p50 on a quiet host, 2026-12-02), which ends at ``message.completed``.

Timing one phase inside the same turn avoids the noise of comparing two whole stacks run one
after the other, which on a shared 2-core host swings by more than the record costs.

    .venv/bin/python bench/context_record_cost.py [--turns 200] [--added-ms 25]
"""

import argparse
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _django import fake_bot, setup  # noqa: E402

setup(fake_key=True)

from django.contrib.auth import get_user_model  # noqa: E402
from django.db import connection  # noqa: E402

from bots.models import Bot  # noqa: E402
from compaction.engine import SUMMARY_INSTRUCTIONS  # noqa: E402
from compaction.models import CompactionEvent, ContextRecord  # noqa: E402
from tests.fakeopenai import FakeOpenAI, Reply  # noqa: E402
from turns import finished as turn_finished  # noqa: E402
from turns import stream as turn_stream  # noqa: E402
from turns.services.send import session_message_send  # noqa: E402
from turns.services.session import session_create  # noqa: E402

MODEL = "openai/fake-model"
WORDS = str.split(
    "we agreed to ship the invoice service on Tuesday after Alice reviews ticket #4471 and "
    "the budget of 12,500 EUR stays fixed while Bob migrates the database to eu-west-1 next "
    "week because latency matters more than cost for the Berlin customers this quarter"
)


class Timed:
    """Wall time spent inside the wrapped functions (in all and by function), and whether one
    is running (its statements are the record's)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.by_name: Counter[str] = Counter()
        self.depth = 0

    def wrap(self, module: object, attr: str) -> None:
        real = getattr(module, attr)

        def timed(*args, **kwargs):
            self.depth += 1
            started = time.perf_counter()
            try:
                return real(*args, **kwargs)
            finally:
                spent = time.perf_counter() - started
                self.seconds += spent
                self.by_name[attr] += spent
                self.depth -= 1

        setattr(module, attr, timed)


def _report(
    args: argparse.Namespace,
    session: object,
    record: Timed,
    statements: Counter[str],
    turn_times: list[float],
    record_times: list[float],
) -> None:
    records = ContextRecord.objects.filter(session=session).count()
    compacted = CompactionEvent.objects.filter(session=session, outcome="compacted").count()
    turn_ms = statistics.mean(turn_times) * 1000
    record_ms = statistics.mean(record_times) * 1000
    print(
        f"{args.turns} turns, window 4,000: {records} context records, {compacted} compactions "
        "(fusions included) on the way"
    )
    print(
        f"per turn: platform {turn_ms:.2f} ms (p50 {statistics.median(turn_times) * 1000:.2f}); "
        f"the record's part {record_ms:.3f} ms (p50 {statistics.median(record_times) * 1000:.3f},"
        f" max {max(record_times) * 1000:.3f}) = {100 * record_ms / turn_ms:.1f} % of the turn"
    )
    print(
        "  of which: "
        + ", ".join(
            f"{name} {seconds * 1000 / args.turns:.3f} ms"
            for name, seconds in record.by_name.most_common()
        )
    )
    print(
        f"statements per turn: {statements['turn'] / args.turns:.1f} outside the record, "
        f"{statements['record'] / args.turns:.2f} in it (goal ≤ 1)"
    )
    on_path = record.by_name["call_entry"] * 1000 / args.turns
    after = record.by_name["context_record_write"] * 1000 / args.turns
    share = 100 * on_path / args.added_ms
    print(
        f"on the way to the reply (before message.completed): {on_path:.3f} ms a turn, "
        f"{share:.1f} % of turn_overhead's added latency of {args.added_ms:.0f} ms "
        f"(goal ≤ 5 %: {'met' if share <= 5 else 'NOT met'}); after the reply went out: "
        f"{after:.3f} ms of the worker's time (the INSERT and its commit), "
        f"{100 * after / args.added_ms:.1f} % of that figure if it were on the way"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, default=200)
    parser.add_argument("--added-ms", type=float, default=25.0)
    args = parser.parse_args()
    rng = random.Random(22)

    def responder(body: dict) -> Reply:
        if body["messages"][0]["content"] == SUMMARY_INSTRUCTIONS:
            words = body["messages"][-1]["content"].split()
            return Reply(text="Summary: " + " ".join(words[:: max(1, len(words) // 60)]))
        return Reply(text=" ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 120))))

    record = Timed()
    record.wrap(turn_stream, "call_entry")
    record.wrap(turn_finished, "context_record_write")
    statements: Counter[str] = Counter()

    def counted(execute, sql, params, many, context):
        statements["record" if record.depth else "turn"] += 1
        return execute(sql, params, many, context)

    user, _ = get_user_model().objects.get_or_create(username="bench-record-cost")
    Bot.objects.filter(owner=user).delete()
    with FakeOpenAI(responder=responder) as fake:
        bot = fake_bot(
            user,
            fake,
            name="Recorder",
            model=MODEL,
            context_window=4_000,
            max_output_tokens=400,
            system_prompt="You are a careful assistant.",
        )
        # Warm-up outside the figures: the first turn and compaction import what later reuse.
        warm = session_create(user=user, bot_id=bot.pk)
        for _ in range(3):
            session_message_send(user=user, session_id=warm.pk, content=" ".join(WORDS))
        session_message_send(user=user, session_id=warm.pk, content="/compact")
        session = session_create(user=user, bot_id=bot.pk)
        record.seconds = 0.0
        record.by_name.clear()
        turn_times: list[float] = []
        record_times: list[float] = []
        with connection.execute_wrapper(counted):
            for _ in range(args.turns):
                content = " ".join(rng.choice(WORDS) for _ in range(rng.randint(10, 60)))
                before = record.seconds
                started = time.perf_counter()
                session_message_send(user=user, session_id=session.pk, content=content)
                turn_times.append(time.perf_counter() - started)
                record_times.append(record.seconds - before)

    _report(args, session, record, statements, turn_times, record_times)


if __name__ == "__main__":
    main()
