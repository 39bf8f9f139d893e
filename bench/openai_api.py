"""What does the OpenAI-compatible API cost a client that resends its whole history? (issue 20)

A client of ``/v1/chat/completions`` holding 1, 10, 100 and 1,000 prior messages makes calls
that resend all of them plus one new message, as stateless OpenAI clients do. Side by side,
interleaved call by call:

- **platform**: the ``openai`` SDK against this platform (uvicorn -> conversation match ->
  PostgreSQL -> Celery on Redis -> the chat turn -> gateway -> provider);
- **direct**: the same SDK, same messages, straight to the provider.

Overhead = a call's wall time minus the provider's own time for its request (reported by the
fake provider), so the figures are what each road adds around the same provider. Prints p50
per size, the ratio of the platform's overhead at 1,000 resent messages to that at 10 (goal
<= 1.2: matching the history is one hash lookup, not a re-read), and the largest request the
provider received against the bot's budget B (never above). Never asserts timings; ``--smoke``
exits non-zero when a call fails, a call lands in another session or a request exceeds B.

    DATABASE_URL default postgres://postgres@127.0.0.1:5432/chat_bench_openai (created)
    REDIS_URL    default redis://127.0.0.1:6379/13 (its queues are purged)

    .venv/bin/python bench/openai_api.py [--sizes 1,10,100,1000] [--calls 15] [--smoke]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
GOAL_RATIO = 1.2


def _setup() -> None:
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_openai")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/13")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ["DJANGO_SETTINGS_MODULE"] = "chat_platform.settings"
    import django

    from bench._django import database_migrated

    django.setup()
    database_migrated()


def _history(size: int) -> list[dict]:
    """``size`` prior messages, user and assistant in turn, then nothing: calls add the rest."""
    messages = []
    for i in range(size):
        role = "user" if i % 2 == 0 else "assistant"
        messages.append(
            {"role": role, "content": f"{role} line {i}: order {i * 37} at depot {i % 9}."}
        )
    if messages and messages[-1]["role"] == "user":
        messages.append({"role": "assistant", "content": "Noted."})
    return messages


def _p50(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def _size_run(
    platform: Any, direct: Any, provider: Any, model: str, size: int, calls: int, faults: list[str]
) -> tuple[list[float], list[float]]:
    """``calls`` timed calls resending a history of ``size`` messages, through the platform and
    directly: what each took beyond the provider's own time (ours, theirs)."""
    import openai

    messages = _history(size)
    sessions = set()
    ours, theirs = [], []
    for call in range(calls + 1):  # the first call of a size starts its session: not timed
        messages.append({"role": "user", "content": f"Question {call} at size {size}?"})
        served_before = len(provider.served)
        started = time.perf_counter()
        try:
            raw = platform.chat.completions.with_raw_response.create(model=model, messages=messages)
        except openai.OpenAIError as exc:
            faults.append(f"size {size} call {call}: {exc}")
            break
        wall = time.perf_counter() - started
        provider_seconds = sum(s.seconds or 0 for s in provider.served[served_before:])
        sessions.add(raw.headers["X-Session-Id"])
        answer = raw.parse().choices[0].message.content
        served_before = len(provider.served)
        started = time.perf_counter()
        direct.chat.completions.create(model="fake-model", messages=messages)
        direct_wall = time.perf_counter() - started
        direct_provider = sum(s.seconds or 0 for s in provider.served[served_before:])
        messages.append({"role": "assistant", "content": answer})
        if call:
            ours.append(wall - provider_seconds)
            theirs.append(direct_wall - direct_provider)
    if len(sessions) != 1:
        faults.append(f"size {size}: {len(sessions)} sessions, expected 1")
    return ours, theirs


def _print_report(
    rows: list[tuple[int, float, float]], calls: int, *, largest: int, budget: int
) -> None:
    print(f"OpenAI-compatible API, full history resent each call ({calls} timed calls per size)")
    print(
        f"{'prior messages':>15} {'platform p50 ms':>16} {'direct p50 ms':>14} {'added p50 ms':>13}"
    )
    for size, ours_p50, theirs_p50 in rows:
        added = (ours_p50 - theirs_p50) * 1000
        print(f"{size:>15} {ours_p50 * 1000:>16.1f} {theirs_p50 * 1000:>14.1f} {added:>13.1f}")
    # "added" is what the platform puts on top of the same call made directly: the client's own
    # cost of encoding and sending N messages grows with N on both roads alike.
    added_by = {size: ours - theirs for size, ours, theirs in rows}
    raw_by = {size: ours for size, ours, _ in rows}
    if 10 in added_by and 1000 in added_by:
        ratio = added_by[1000] / added_by[10]
        verdict = "meets" if ratio <= GOAL_RATIO else "misses"
        print(
            f"added overhead at 1,000 / at 10: {ratio:.2f}x ({verdict} the goal <= {GOAL_RATIO}x); "
            f"whole-call overhead ratio {raw_by[1000] / raw_by[10]:.2f}x"
        )
    print(f"largest request to the provider: {largest} tokens; budget B = {budget}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1,10,100,1000")
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument(
        "--smoke", action="store_true", help="sizes 1,10, 2 calls; exit 1 on a fault"
    )
    args = parser.parse_args()
    sizes = [1, 10] if args.smoke else [int(s) for s in args.sizes.split(",")]
    calls = 2 if args.smoke else args.calls

    _setup()
    import openai
    from django.contrib.auth import get_user_model

    from bots.models import Bot, ChatSession
    from chat_platform.llm.tokens import count_message_tokens
    from compaction.measure import bot_budget
    from openai_api.keys import key_create
    from tests.fakeopenai import FakeOpenAI, Reply
    from tests.integration.processes import celery_worker, process_env, web_server

    provider = FakeOpenAI(default=Reply(text="Noted.")).start()
    user = get_user_model().objects.create(username=f"bench-{time.time_ns()}")
    bot = Bot.objects.create(
        owner=user,
        name=f"Bench {user.pk}",
        model="openai/fake-model",
        api_base=provider.url,
        api_base_approved=provider.url,
        models_approved="openai/fake-model",
    )
    budget = bot_budget(bot).budget
    _, key = key_create(user=user, name="bench")
    logdir = Path(tempfile.mkdtemp(prefix="bench-openai-"))
    # INFO: the worker says "ready" at that level (the start-up waits for it).
    env = process_env(LOG_JSON="true", LOG_LEVEL="INFO")
    faults: list[str] = []
    rows = []
    with celery_worker(env, logdir / "worker.log"), web_server(env, logdir / "web.log") as base:
        from django.db.models import Max

        model = next(m.id for m in openai.OpenAI(base_url=f"{base}/v1", api_key=key).models.list())
        platform = openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=120)
        direct = openai.OpenAI(base_url=provider.url, api_key="no-key", max_retries=0, timeout=120)
        for size in sizes:
            ours, theirs = _size_run(platform, direct, provider, model, size, calls, faults)
            rows.append((size, _p50(ours), _p50(theirs)))
        platform_bodies = [
            s.body
            for s in provider.served
            if s.headers.get("authorization", "").lower() != "bearer no-key"
        ]
        largest = max(
            (
                sum(
                    count_message_tokens(m.get("content") or "", model=bot.model)
                    for m in body["messages"]
                )
                for body in platform_bodies
            ),
            default=0,
        )
        sessions_made = ChatSession.objects.filter(user=user).count()
        last_seq = ChatSession.objects.filter(user=user).aggregate(m=Max("last_seq"))["m"]
    provider.stop()

    _print_report(rows, calls, largest=largest, budget=budget)
    print(
        f"sessions: {sessions_made} (one per size); longest stored transcript: {last_seq} messages"
    )
    if largest > budget:
        faults.append(f"a request of {largest} tokens exceeded B = {budget}")
    for fault in faults:
        print(f"FAULT: {fault}")
    return 1 if faults and args.smoke else 0


if __name__ == "__main__":
    sys.exit(main())
