"""What does the platform add to a model call? (issue 10, P2)

The same prompt, side by side in one run, interleaved pair by pair:

- **direct**: the same litellm streaming call made from this process (litellm's defaults);
- **websocket**: the whole stack (uvicorn -> PostgreSQL -> Celery on Redis -> gateway -> litellm
  -> provider -> channel layer -> websocket), send to ``message.completed``;
- **REST** ``wait: true``: POST to the 201 carrying the reply.

against a local fake provider (50 words, one per chunk, 10 ms apart). Each turn has a fresh
session (the same two stored messages each time). Prints p50/p95 of the added latency and of
the time-to-first-token overhead, the worker's CPU per turn against the direct call's CPU, and
counts of anything that did not complete. Never asserts timings; ``--smoke`` exits non-zero on a
failed, stuck or lost turn.

``--history 10,200,1000,2000`` adds websocket turns over sessions that already hold that many
stored messages, each against the direct call sending the same messages.

Two ways to say what a turn costs, both printed:

- **turn − direct call** (the "added" lines): the platform's cost over the same litellm call made
  from this process, paired call by call;
- **turn − provider's time** (the "same method" lines): a turn's time minus the provider's own
  time for that request (from having read it to its last byte written, reported by the fake
  provider). That is how issue 17 measured this platform and Open WebUI alike (same machine, same
  hour, two interleaved rounds); Open WebUI's figures from there are printed beside ours, not
  re-measured here. Beside it, the **floor**: one direct streaming call from this single process,
  measured the same way — through this platform's gateway (what a worker does for a turn, with
  no web, queue or database) and as the plain litellm call above.

    .venv/bin/python bench/turn_overhead.py [--pairs 30] [--history 10,200,1000,2000] [--smoke]

``--against REV`` runs this checkout and REV side by side in one sitting, interleaved triple by
triple, each on its own stack, database and private Redis (``bench/_against.py``: REV's worktree
and virtualenv are built once under ``.bench-cache/`` and reused), and prints both sides' figures
and the ratios this/REV:

    .venv/bin/python bench/turn_overhead.py --against 94ecda9 [--pairs 10]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import resource
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _stack  # noqa: E402


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def ws_turn(stack: _stack.Stack, token: str, session_id: int) -> dict:
    import websockets

    url = f"{stack.ws_base}/ws/sessions/{session_id}/"
    async with websockets.connect(
        url, additional_headers={"Authorization": f"Token {token}"}, open_timeout=30
    ) as ws:
        started = time.perf_counter()
        await ws.send(json.dumps({"type": "message.send", "content": _stack.PROMPT}))
        first = 0.0
        deltas: list[str] = []
        while True:
            try:
                frame = json.loads(await asyncio.wait_for(ws.recv(), timeout=60))
            except TimeoutError:
                return {"outcome": "stuck"}
            kind = frame.get("type")
            if kind == "message.delta":
                if not first:
                    first = time.perf_counter() - started
                deltas.append(frame["delta"])
            elif kind == "message.failed":
                return {"outcome": "failed", "error": frame.get("message", {}).get("error")}
            elif kind == "error":  # the send itself was refused
                return {"outcome": "failed", "error": str(frame.get("error"))[:200]}
            elif kind == "message.completed" and frame["message"]["role"] == "assistant":
                total = time.perf_counter() - started
                content = frame["message"]["content"]
                joined = "".join(deltas)
                outcome = "completed"
                if content != _stack.TEXT or joined != content:
                    outcome = "lost" if len(joined) < len(content) else "duplicated"
                return {"outcome": outcome, "ttft": first, "total": total}


def rest_turn(client: Any, stack: _stack.Stack, token: str, session_id: int) -> dict:
    """One POST with ``wait: true`` on a kept-alive client: like the websocket side, which
    connects before its clock starts, the client is built outside the timing (an
    ``httpx.Client`` costs ~30 ms of CPU to build here: its TLS context)."""
    started = time.perf_counter()
    response = client.post(
        f"{stack.base}/api/v1/sessions/{session_id}/messages/",
        json={"content": _stack.PROMPT, "wait": True},
        headers={"Authorization": f"Token {token}"},
        timeout=90,
    )
    total = time.perf_counter() - started
    if response.status_code != 201:
        return {"outcome": "failed", "error": f"HTTP {response.status_code}"}
    reply = response.json().get("assistant_message") or {}
    if reply.get("status") != "complete":
        return {"outcome": "stuck", "error": reply.get("status")}
    if reply.get("content") != _stack.TEXT:
        return {"outcome": "lost"}
    return {"outcome": "completed", "total": total}


# Open WebUI's per-turn overhead, turn time minus the provider's time, by stored messages: measured
# outside this repo (issue 17, item 8: same machine, same hour, two interleaved rounds, ms).
OPEN_WEBUI_MS = {10: (46, 54), 200: (68, 80), 1000: (147, 171), 2000: (225, 241)}


def _minus_provider(clock: _stack.ProviderClock, call: Any) -> tuple[Any, float | None]:
    """``call()``'s result and the provider's time for the request it made."""
    clock.mark()
    result = call()
    return result, clock.seconds()


def run_triple(
    stack: _stack.Stack,
    client: Any,
    fix: Any,
    sids: list[int],
    clock: _stack.ProviderClock,
    i: int,
) -> dict[str, tuple[Any, float | None]]:
    """One direct call, one websocket turn and one REST ``wait`` turn, in an order rotated by
    ``i`` (so drift in the machine's load hits every side alike): each side's result and the
    provider's time for it (asked between calls, outside every clock)."""
    sides = ["direct", "ws", "rest"]
    out: dict[str, tuple[Any, float | None]] = {}
    for side in sides[i % 3 :] + sides[: i % 3]:
        if side == "direct":
            out[side] = _minus_provider(clock, lambda: _stack.direct_call(stack.provider_url))
        elif side == "ws":
            sid = sids.pop()
            out[side] = _minus_provider(
                clock, lambda sid=sid: asyncio.run(ws_turn(stack, fix.token, sid))
            )
        else:
            sid = sids.pop()
            out[side] = _minus_provider(
                clock, lambda sid=sid: rest_turn(client, stack, fix.token, sid)
            )
    return out


def _history_runs(
    stack: _stack.Stack, fix: Any, args: argparse.Namespace, clock: _stack.ProviderClock
) -> dict:
    """Websocket turn vs direct call, interleaved, over sessions of each stored-history size:
    (turn - direct call, turn - provider's time, direct call - provider's time, outcomes)."""
    results: dict[int, tuple[list[float], list[float], list[float], str]] = {}
    for size in [int(n) for n in args.history.split(",") if n.strip()]:
        sids = _stack.sessions_with_history(fix, args.history_pairs + 2, size)
        for _ in range(2):  # warm: the first call of a new size pays its own caches
            _stack.direct_call(stack.provider_url, history=size)
            asyncio.run(ws_turn(stack, fix.token, sids.pop()))
        added: list[float] = []
        same: list[float] = []
        floor: list[float] = []
        outcomes: dict[str, int] = {}
        for i in range(args.history_pairs):
            order = ["direct", "ws"] if i % 2 else ["ws", "direct"]
            pair: dict[str, Any] = {}
            for side in order:
                if side == "direct":
                    pair["direct"] = _minus_provider(
                        clock,
                        lambda size=size: _stack.direct_call(stack.provider_url, history=size),
                    )
                else:
                    sid = sids.pop()
                    pair["ws"] = _minus_provider(
                        clock, lambda sid=sid: asyncio.run(ws_turn(stack, fix.token, sid))
                    )
            (turn, turn_provider), ((_, direct_total), direct_provider) = pair["ws"], pair["direct"]
            outcome = turn["outcome"]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if direct_provider is not None:
                floor.append(direct_total - direct_provider)
            if outcome == "completed":
                added.append(turn["total"] - direct_total)
                if turn_provider is not None:
                    same.append(turn["total"] - turn_provider)
        summary = ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items()))
        results[size] = (added, same, floor, summary)
    return results


def _say(payload: dict) -> None:
    import _against

    print(_against.SAY + json.dumps(payload), flush=True)


def side_serve(args: argparse.Namespace) -> None:
    """``--side`` (started by ``--against``): this tree's stack, warmed, then one triple per
    command read from stdin, each answered on stdout (``_against.SAY``), until ``end``."""
    import _against
    import httpx

    _stack.django_setup()
    with _stack.running_stack() as stack, httpx.Client() as client:
        fix = _stack.fixture(stack.provider_url, "turn-overhead", embedding=args.embedding_model)
        sids = _stack.sessions(fix, 2 * (args.pairs + args.warmup) + 6)

        async def warm_all() -> None:
            await asyncio.gather(*(ws_turn(stack, fix.token, sids.pop()) for _ in range(6)))

        asyncio.run(warm_all())
        clock = _stack.ProviderClock(stack.provider_url)
        for _ in range(args.warmup):
            _stack.direct_call(stack.provider_url)
            asyncio.run(ws_turn(stack, fix.token, sids.pop()))
            rest_turn(client, stack, fix.token, sids.pop())
        time.sleep(0.5)
        cpu0 = _cpu_self()
        for _ in range(args.pairs):
            _stack.direct_call(stack.provider_url)
        time.sleep(0.5)
        direct_cpu = (_cpu_self() - cpu0) / args.pairs
        idle = _against.idle_cpu_per_second(stack)
        _say({"direct_cpu": direct_cpu, "idle_cpu_per_second": idle})
        sitting = _against.SittingCpu(stack)
        for line in sys.stdin:
            command = json.loads(line)
            if command["do"] == "triple":
                triple = run_triple(stack, client, fix, sids, clock, command["i"])
                _say({side: {"result": r, "provider": p} for side, (r, p) in triple.items()})
            elif command["do"] == "cpu":
                time.sleep(0.5)  # the last turn's bookkeeping after its reply
                _say(sitting.so_far())
            else:
                break


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--smoke", action="store_true", help="fail on any turn not completed")
    parser.add_argument(
        "--history",
        default="",
        help="also measure websocket turns over sessions holding this many stored messages "
        "(comma-separated, e.g. 10,200,1000,2000), each against the direct call sending them",
    )
    parser.add_argument("--history-pairs", type=int, default=15)
    parser.add_argument(
        "--against",
        metavar="REV",
        help="run this checkout and REV side by side, interleaved in one sitting (REV's worktree "
        "and virtualenv are built once under .bench-cache/), and print the ratios",
    )
    parser.add_argument("--embedding-model", help="the bench bot's ('': words only)")
    parser.add_argument("--side", action="store_true", help=argparse.SUPPRESS)
    return parser


def _direct_cpu(stack: Any, pairs: int) -> float:
    """CPU of the direct call alone: this process does nothing else meanwhile (litellm's
    logging threads included, so wait for them before reading)."""
    time.sleep(0.5)
    cpu0 = _cpu_self()
    for _ in range(pairs):
        _stack.direct_call(stack.provider_url)
    time.sleep(0.5)
    return (_cpu_self() - cpu0) / pairs


@dataclass
class _Run:
    """What one sitting measured."""

    direct: list[tuple[float, float]] = field(default_factory=list)
    ws: list[dict] = field(default_factory=list)
    rest: list[dict] = field(default_factory=list)
    # the provider's time for each call, in the same order (None: none finished)
    provider_s: dict[str, list[float | None]] = field(
        default_factory=lambda: {"direct": [], "ws": [], "rest": []}
    )
    direct_cpu: float = 0.0
    worker_cpu: float = 0.0
    web_cpu: float = 0.0
    lean_cpu: float = 0.0
    gateway_floor: list[float] = field(default_factory=list)
    by_history: dict = field(default_factory=dict)


def _triples(stack: Any, client: Any, fix: Any, sids: list, clock: Any, args: Any) -> _Run:
    """The interleaved triples (direct call, websocket turn, REST wait turn) and their CPU."""
    run = _Run()
    direct, ws, rest, provider_s = run.direct, run.ws, run.rest, run.provider_s
    worker_cpu0, web_cpu0 = stack.worker.cpu(), stack.web.cpu()
    for i in range(args.pairs):
        triple = run_triple(stack, client, fix, sids, clock, i)
        direct.append(triple["direct"][0])
        ws.append(triple["ws"][0])
        rest.append(triple["rest"][0])
        for side, (_, seconds) in triple.items():
            provider_s[side].append(seconds)
    time.sleep(0.5)
    turns = len(ws) + len(rest)
    run.worker_cpu = (stack.worker.cpu() - worker_cpu0) / turns
    run.web_cpu = (stack.web.cpu() - web_cpu0) / turns
    return run


def _gateway_floor(stack: Any, clock: Any, pairs: int) -> list[float]:
    """The floor, measured the same way: the gateway's own streaming call from this one
    process (what a worker does for a turn, without web, queue and database)."""
    gateway_floor: list[float] = []
    _stack.gateway_call(stack.provider_url)
    for _ in range(pairs):
        (_, total), seconds = _minus_provider(
            clock, lambda: _stack.gateway_call(stack.provider_url)
        )
        if seconds is not None:
            gateway_floor.append(total - seconds)
    return gateway_floor


def _lean_cpu(stack: Any, pairs: int) -> float:
    # The same direct call with the switches the gateway sets (chat_platform.llm.gateway).
    import litellm

    from chat_platform.llm import gateway

    # (llm/gateway/lazy_litellm.py; a module function in older gateways, none before issue 10)
    lean = getattr(getattr(gateway, "lazy_litellm", None), "configure_lean", None) or getattr(
        gateway, "_configure_lean", None
    )
    if lean is not None:
        lean(litellm)
    _stack.direct_call(stack.provider_url)
    return _direct_cpu(stack, pairs)


def _measure(args: Any) -> _Run:
    import httpx

    _stack.django_setup()
    with _stack.running_stack() as stack, httpx.Client() as client:
        fix = _stack.fixture(stack.provider_url, "turn-overhead", embedding=args.embedding_model)
        sids = _stack.sessions(fix, 2 * (args.pairs + args.warmup) + 6)

        # warm every process (each web and worker process pays its imports on its first turn)
        async def warm_all() -> None:
            await asyncio.gather(*(ws_turn(stack, fix.token, sids.pop()) for _ in range(6)))

        asyncio.run(warm_all())
        clock = _stack.ProviderClock(stack.provider_url)
        for _ in range(args.warmup):
            _stack.direct_call(stack.provider_url)
            asyncio.run(ws_turn(stack, fix.token, sids.pop()))
            rest_turn(client, stack, fix.token, sids.pop())
        direct_cpu = _direct_cpu(stack, args.pairs)
        run = _triples(stack, client, fix, sids, clock, args)
        run.direct_cpu = direct_cpu
        run.gateway_floor = _gateway_floor(stack, clock, args.pairs)
        run.by_history = _history_runs(stack, fix, args, clock)
        run.lean_cpu = _lean_cpu(stack, args.pairs)
    return run


def _report(args: Any, run: _Run) -> None:
    direct, ws, rest, provider_s = run.direct, run.ws, run.rest, run.provider_s
    direct_cpu, worker_cpu, web_cpu, lean_cpu = (
        run.direct_cpu,
        run.worker_cpu,
        run.web_cpu,
        run.lean_cpu,
    )
    d_total = [t for _, t in direct]
    d_ttft = [f for f, _ in direct]
    p = _stack.percentile

    def added(results: list[dict], key: str, base: list[float]) -> list[float]:
        pairs = zip(results, base, strict=True)
        return [r[key] - b for r, b in pairs if r["outcome"] == "completed"]

    def same_method(results: list[dict], provider: list[float | None]) -> list[float]:
        pairs = zip(results, provider, strict=True)
        return [r["total"] - s for r, s in pairs if r["outcome"] == "completed" and s is not None]

    floor = same_method(
        [{"outcome": "completed", "total": t} for t in d_total], provider_s["direct"]
    )
    ws_same = same_method(ws, provider_s["ws"])
    rest_same = same_method(rest, provider_s["rest"])
    ws_added = added(ws, "total", d_total)
    rest_added = added(rest, "total", d_total)
    ttft_added = added(ws, "ttft", d_ttft)
    print(
        f"turn_overhead: {args.pairs} interleaved triples, provider {_stack.WORDS} words x "
        f"{_stack.CHUNK_DELAY * 1000:.0f} ms"
    )
    print(
        f"  direct litellm call:   p50 {p(d_total, 50) * 1000:6.0f} ms, TTFT p50 "
        f"{p(d_ttft, 50) * 1000:5.0f} ms"
    )
    for name, values in (("websocket", ws_added), ("REST wait", rest_added)):
        print(
            f"  {name:<10} added:    p50 {p(values, 50) * 1000:+6.0f} ms, p95 "
            f"{p(values, 95) * 1000:+6.0f} ms   (goal p50 <= +25 ms; before +42 / +54 ms ws)"
        )
    print(
        f"  TTFT overhead (ws):   p50 {p(ttft_added, 50) * 1000:+6.0f} ms, p95 "
        f"{p(ttft_added, 95) * 1000:+6.0f} ms   (goal <= +30 ms; before +76 ms)"
    )
    print(
        f"  CPU per turn: worker {worker_cpu * 1000:.0f} ms, web {web_cpu * 1000:.0f} ms; direct "
        f"call {direct_cpu * 1000:.0f} ms -> worker/direct {worker_cpu / direct_cpu:.2f}x "
        f"(goal <= 1.5x; before 0.100 s / 0.056 s = 1.8x)"
    )
    print(
        f"  direct call CPU: litellm defaults {direct_cpu * 1000:.0f} ms, with the gateway's "
        f"switches {lean_cpu * 1000:.0f} ms ({lean_cpu / direct_cpu:.2f}x)"
    )
    print("  same method as the Open WebUI comparison (turn time - the provider's time for it):")
    for name, values in (
        ("floor: gateway call", run.gateway_floor),
        ("floor: litellm call", floor),
        ("websocket turn", ws_same),
        ("REST wait turn", rest_same),
    ):
        print(
            f"    {name:<23} p50 {p(values, 50) * 1000:6.0f} ms, p95 {p(values, 95) * 1000:6.0f} ms"
            f"  (n={len(values)})"
        )
    if run.by_history:
        _report_history(run.by_history)
    _report_outcomes(args, ws, rest)


def _report_history(by_history: dict) -> None:
    p = _stack.percentile
    print("  per-turn overhead by stored history, websocket turn - direct call (p50 / p95):")
    for size, (values, _, _, outcomes) in by_history.items():
        print(
            f"    {size:>6,} stored: p50 {p(values, 50) * 1000:+6.0f} ms, p95 "
            f"{p(values, 95) * 1000:+6.0f} ms  ({outcomes})"
        )
    print(
        "  per-turn overhead by stored history, same method (turn - provider's time, p50 / "
        "p95), beside the floor and Open WebUI's (issue 17, measured there the same way):"
    )
    for size, (_, same, floor_h, _) in by_history.items():
        ours = p(same, 50) * 1000
        theirs = OPEN_WEBUI_MS.get(size)
        versus = (
            f"Open WebUI {theirs[0]}-{theirs[1]} ms -> ours/theirs "
            f"{ours / theirs[1]:.2f}-{ours / theirs[0]:.2f}x"
            if theirs
            else "Open WebUI: not measured at this size"
        )
        print(
            f"    {size:>6,} stored: turn p50 {ours:5.0f} / p95 {p(same, 95) * 1000:5.0f} ms;"
            f" floor p50 {p(floor_h, 50) * 1000:5.0f} ms; {versus}"
        )


def _report_outcomes(args: Any, ws: list[dict], rest: list[dict]) -> None:
    bad = {}
    for name, results in (("websocket", ws), ("REST", rest)):
        counts = collections.Counter(r["outcome"] for r in results)
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        bad[name] = sum(v for k, v in counts.items() if k != "completed")
    if args.smoke and any(bad.values()):
        raise SystemExit(f"turn_overhead smoke: turns not completed: {bad}")


def main() -> None:
    args = _parser().parse_args()
    if args.side:
        return side_serve(args)
    if args.against:
        import _against

        return _against.report(args, _against.compare(args))
    _report(args, _measure(args))


if __name__ == "__main__":
    main()
