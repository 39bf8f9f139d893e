"""Many conversations at once (issue 10): does every turn finish, once, and how fast?

Starts the whole stack (uvicorn --workers 2, scripts/worker.sh: one Celery process per core with a
thread pool, PostgreSQL, Redis, a local fake provider streaming 50 words 10 ms apart) and runs:

(a) **burst**: N websocket sessions (default 200) connect, then all send one message at once;
(b) **steady**: new sessions arrive at R turns/s (default 20) for S seconds (default 30), each
    connecting, sending one message and waiting for its reply.

For each phase it prints completed / failed / stuck (no final frame, reply still unfinished) /
lost (a final frame never came though the reply finished, or deltas are missing) / duplicated
(deltas sent twice), wall time, p50/p95 first-token overhead (first delta minus the direct
call's own time to first token), CPU-s per turn of the worker and web processes and of the
PostgreSQL and Redis servers (all of their processes on this machine), peak database
connections (``pg_stat_activity``) and peak RSS. Never asserts timings; ``--smoke`` exits
non-zero on any failed, stuck, lost or duplicated turn.

    .venv/bin/python bench/concurrent_sessions.py [--burst 200] [--rate 20] [--seconds 30]
    .venv/bin/python bench/concurrent_sessions.py --quick   # 20 sessions, 5 s of steady arrivals
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _procfs  # noqa: E402
import _stack  # noqa: E402

SERVERS = {"postgres": "postgres", "redis": "redis-server"}  # their processes' command names

TURN_TIMEOUT = 120.0


@dataclass
class Turn:
    session_id: int
    outcome: str = "stuck"
    first: float = 0.0  # s from send to the first delta
    total: float = 0.0
    error: str = ""
    frames: list[str] = field(default_factory=list)
    # Where its socket goes ("": the stack's web server) and what it sends (bench/multihost.py
    # spreads its turns over two web hosts and tells them apart at the provider by the prompt).
    ws_base: str = ""
    prompt: str = _stack.PROMPT


class Sampler(threading.Thread):
    """Peak database connections and peak RSS of the web and worker processes."""

    def __init__(self, stack: _stack.Stack) -> None:
        super().__init__(daemon=True)
        self.stack = stack
        self.stop = threading.Event()
        self.peak_db = 0
        self.peak_rss = {"web": 0, "worker": 0}

    def run(self) -> None:
        from django.db import connection

        try:
            while not self.stop.wait(0.1):
                self.peak_db = max(self.peak_db, _stack.db_connections())
                for name, proc in (("web", self.stack.web), ("worker", self.stack.worker)):
                    self.peak_rss[name] = max(self.peak_rss[name], proc.rss())
        finally:
            connection.close()


async def one_turn(
    stack: _stack.Stack, token: str, turn: Turn, go: asyncio.Event | None, opened: list[int]
) -> None:
    import websockets

    url = f"{turn.ws_base or stack.ws_base}/ws/sessions/{turn.session_id}/"
    try:
        async with websockets.connect(
            url,
            additional_headers={"Authorization": f"Token {token}"},
            open_timeout=60,
            close_timeout=5,
            max_queue=None,
        ) as ws:
            opened.append(1)
            if go is not None:
                await go.wait()
            started = time.perf_counter()
            await ws.send(json.dumps({"type": "message.send", "content": turn.prompt}))
            deltas: list[str] = []
            deadline = started + TURN_TIMEOUT
            while True:
                remaining = deadline - time.perf_counter()
                if remaining <= 0:
                    return  # stuck, unless the database says otherwise (see classify)
                try:
                    frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=remaining))
                except TimeoutError:
                    return
                kind = frame.get("type", "")
                if kind not in turn.frames:
                    turn.frames.append(kind)
                if kind == "message.delta":
                    if not turn.first:
                        turn.first = time.perf_counter() - started
                    deltas.append(frame["delta"])
                elif kind == "message.failed":
                    turn.outcome = "failed"
                    turn.error = str((frame.get("message") or {}).get("error_message") or "")
                    return
                elif kind == "error":
                    turn.outcome = "failed"
                    turn.error = str(frame.get("error") or frame)[:200]
                    return
                elif kind == "message.completed" and frame["message"]["role"] == "assistant":
                    turn.total = time.perf_counter() - started
                    content = frame["message"]["content"]
                    joined = "".join(deltas)
                    if joined == content == _stack.TEXT:
                        turn.outcome = "completed"
                    elif len(joined) > len(content) or content.count(_stack.TEXT) > 1:
                        turn.outcome = "duplicated"
                    else:
                        turn.outcome = "lost"
                    if turn.outcome != "completed":
                        turn.error = (
                            f"deltas {len(joined)} chars, final {len(content)} chars, "
                            f"expected {len(_stack.TEXT)}; deltas are the final's start: "
                            f"{content.startswith(joined)}"
                        )
                    return
    except Exception as exc:  # refused connections, handshakes timing out, resets
        turn.outcome = "failed"
        turn.error = f"{type(exc).__name__}: {exc}"[:200]


def classify_stuck(turns: list[Turn]) -> None:
    """A turn with no final frame: lost if its reply did finish, stuck if it did not."""
    from bots.models import Message

    waiting = {t.session_id: t for t in turns if t.outcome == "stuck"}
    if not waiting:
        return
    rows = Message.objects.filter(session_id__in=waiting, role="assistant").values_list(
        "session_id", "status"
    )
    for session_id, status in rows:
        if status in ("complete", "failed", "interrupted"):
            waiting[session_id].outcome = "lost"
            waiting[session_id].error = f"reply {status}, no final frame"


def embeddings_caught_up(sids: list[int], timeout: float = 300.0) -> tuple[float, int]:
    """Seconds until every indexed message of ``sids`` has its vector, and how many still have
    none (0 unless ``timeout`` passed first). The turns come first (docs/performance.md "Turns
    first"): the embedding of what they wrote runs after them, and its CPU is the turns' too."""
    from django.db import connection

    from memory.models import MessageIndex

    pending = MessageIndex.objects.filter(session_id__in=sids, embedding__isnull=True)
    start = time.perf_counter()
    try:
        while (left := pending.count()) and time.perf_counter() - start < timeout:
            time.sleep(0.2)
        return time.perf_counter() - start, left
    finally:
        connection.close()


async def burst(
    stack: _stack.Stack, token: str, sids: list[int], at_send=None
) -> tuple[list[Turn], float]:
    return await burst_turns(stack, token, [Turn(s) for s in sids], at_send=at_send)


async def burst_turns(
    stack: _stack.Stack, token: str, turns: list[Turn], during=None, at_send=None
) -> tuple[list[Turn], float]:
    """All ``turns`` connect, then send at once; ``during`` (a coroutine function, e.g.
    bench/multihost.py's worker-host kill) runs beside them from the moment they send;
    ``at_send`` is called once, when the wall starts (all connected)."""
    go = asyncio.Event()
    opened: list[int] = []
    tasks = [asyncio.create_task(one_turn(stack, token, t, go, opened)) for t in turns]
    deadline = time.monotonic() + 60
    while len(opened) + sum(t.outcome == "failed" for t in turns) < len(turns):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(0.05)
    if at_send is not None:
        at_send()
    started = time.perf_counter()
    go.set()
    await asyncio.gather(*tasks, *([during()] if during else []))
    return turns, time.perf_counter() - started


async def steady(
    stack: _stack.Stack, token: str, sids: list[int], rate: float
) -> tuple[list[Turn], float]:
    turns = [Turn(s) for s in sids]
    started = time.perf_counter()
    tasks = []
    for i, turn in enumerate(turns):
        delay = started + i / rate - time.perf_counter()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_turn(stack, token, turn, None, [])))
    await asyncio.gather(*tasks)
    return turns, time.perf_counter() - started


def servers_cpu() -> dict[str, float]:
    return {key: _procfs.cpu_seconds_named(name) for key, name in SERVERS.items()}


def cpu_now(stack: _stack.Stack) -> dict[str, float]:
    """CPU-s so far of every process a turn runs through: the stack's, the servers', the fake
    provider's and this process's (the clients)."""
    own = os.times()
    return {
        "worker": stack.worker.cpu(),
        "web": stack.web.cpu(),
        **servers_cpu(),
        "provider": stack.provider.cpu(),
        "clients": own.user + own.system,
    }


def wall_cpu_line(cpu: dict[str, float], wall: float, done: int) -> str:
    """Where the machine's CPU went while the turns ran (the embedding catch-up after them is
    not in it): ms per completed turn by process, and their sum against what the cores had."""
    parts = ", ".join(f"{k} {v / done * 1000:.1f}" for k, v in cpu.items())
    total = sum(cpu.values())
    cores = os.cpu_count() or 1
    return (
        f"    during the wall, CPU ms per completed turn: {parts}; all {total / done * 1000:.1f} "
        f"ms ({total:.1f} CPU-s of the {cores} cores' {cores * wall:.1f})"
    )


def report(
    name: str,
    turns: list[Turn],
    wall: float,
    ttft_direct: float,
    cpu: dict[str, float],
    sampler: Sampler,
) -> int:
    counts = {k: 0 for k in ("completed", "failed", "stuck", "lost", "duplicated")}
    for t in turns:
        counts[t.outcome] += 1
    firsts = [t.first - ttft_direct for t in turns if t.outcome == "completed" and t.first]
    totals = [t.total for t in turns if t.outcome == "completed"]
    p = _stack.percentile
    done = max(1, counts["completed"])
    print(f"  {name}: {len(turns)} turns in {wall:.1f} s wall")
    print("    " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    print(
        f"    first-token overhead p50 {p(firsts, 50) * 1000:.0f} ms, p95 "
        f"{p(firsts, 95) * 1000:.0f} ms; turn p50 {p(totals, 50):.2f} s, p95 {p(totals, 95):.2f} s"
    )
    print(
        f"    CPU-s per completed turn: worker {cpu['worker'] / done:.3f}, web "
        f"{cpu['web'] / done:.3f}; peak DB connections {sampler.peak_db}; peak RSS web "
        f"{sampler.peak_rss['web'] / 1e6:.0f} MB, worker {sampler.peak_rss['worker'] / 1e6:.0f} MB"
    )
    if "postgres" in cpu:
        print(
            f"    servers' CPU-s per completed turn: PostgreSQL {cpu['postgres'] / done:.3f}, "
            f"Redis {cpu['redis'] / done:.3f}"
        )
    errors: dict[str, int] = {}
    for t in turns:
        if t.outcome != "completed":
            key = f"{t.outcome}: {t.error or 'frames ' + ','.join(t.frames)}"[:160]
            errors[key] = errors.get(key, 0) + 1
    for key, n in sorted(errors.items(), key=lambda kv: -kv[1])[:5]:
        print(f"      {n} x {key}")
    return counts["completed"]


def _args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--burst", type=int, default=200)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--quick", action="store_true", help="20 sessions, 5 s steady")
    parser.add_argument("--smoke", action="store_true", help="fail on any turn not completed")
    parser.add_argument("--threads", type=int, default=16, help="threads per worker process")
    parser.add_argument(
        "--embedding",
        default=None,
        help="the bot's embedding_model (default: the field's default; '' words only)",
    )
    args = parser.parse_args()
    if args.quick:
        args.burst, args.seconds = min(args.burst, 20), min(args.seconds, 5.0)
    return args


def main() -> None:
    args = _args()
    _stack.django_setup()
    from django.db import connection

    with _stack.running_stack(worker_threads=args.threads) as stack:
        fix = _stack.fixture(stack.provider_url, "concurrent", embedding=args.embedding)
        steady_count = int(args.rate * args.seconds)
        sids = _stack.sessions(fix, args.burst + steady_count + 8)
        connection.close()
        # warm: litellm here, a turn through the stack (first-turn import costs are not load)
        ttft_direct = min(_stack.direct_call(stack.provider_url)[0] for _ in range(5))
        # a few turns at once, so that every worker process has taken one (imports, tokenizer)
        warm = [Turn(sids.pop()) for _ in range(8)]

        async def warm_up() -> None:
            await asyncio.gather(*(one_turn(stack, fix.token, t, None, []) for t in warm))

        asyncio.run(warm_up())
        time.sleep(0.5)
        print(
            f"concurrent_sessions: uvicorn --workers 2, {stack.worker.tree().__len__() - 1} "
            f"worker processes x {args.threads} threads; direct TTFT {ttft_direct * 1000:.0f} ms"
        )
        failed = 0
        at_wall: dict[str, float] = {}

        def mark_wall() -> None:
            at_wall.update(cpu_now(stack))

        for name, run, count in (
            (
                f"(a) burst of {args.burst}",
                lambda s: burst(stack, fix.token, s, at_send=mark_wall),
                args.burst,
            ),
            (
                f"(b) steady {args.rate:g} turns/s for {args.seconds:g} s",
                lambda s: steady(stack, fix.token, s, args.rate),
                steady_count,
            ),
        ):
            batch, sids = sids[:count], sids[count:]
            sampler = Sampler(stack)
            sampler.start()
            cpu0 = cpu_now(stack)
            at_wall.update(cpu0)  # the burst's connects come before its wall: not in it
            turns, wall = asyncio.run(run(batch))
            at_end = cpu_now(stack)
            time.sleep(0.3)
            caught_up = embeddings_caught_up(batch) if args.embedding != "" else None
            now = cpu_now(stack)
            cpu = {k: now[k] - v for k, v in cpu0.items()}
            in_wall = {k: at_end[k] - v for k, v in at_wall.items()}
            sampler.stop.set()
            sampler.join()
            classify_stuck(turns)
            connection.close()
            completed = report(name, turns, wall, ttft_direct, cpu, sampler)
            print(wall_cpu_line(in_wall, wall, max(1, completed)))
            if caught_up is not None:
                seconds, left = caught_up
                said = f"{left} still not embedded after" if left else "caught up"
                print(
                    f"    embeddings of the written messages: {said} {seconds:.1f} s after the "
                    "last turn (CPU above includes them)"
                )
            failed += len(turns) - completed
    print(
        "  goals: burst 200/200, 0 lost/duplicated/stuck, wall <= 10 s; steady first-token p95 "
        "<= 300 ms. Before (issue 10): burst 200 -> 58 completed, 31 refused, 111 timed out; "
        "burst 50 -> 47/50, first token p50 2.8 s"
    )
    if args.smoke and failed:
        raise SystemExit(f"concurrent_sessions smoke: {failed} turns not completed")


if __name__ == "__main__":
    main()
