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
stored messages, each against the direct call sending the same messages: the per-turn overhead
by history size that the issue compares with Open WebUI's.

    .venv/bin/python bench/turn_overhead.py [--pairs 30] [--history 10,200,1000,2000] [--smoke]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
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


def _history_runs(stack: _stack.Stack, fix: Any, args: argparse.Namespace) -> dict:
    """Websocket turn vs direct call, interleaved, over sessions of each stored-history size."""
    results: dict[int, tuple[list[float], str]] = {}
    for size in [int(n) for n in args.history.split(",") if n.strip()]:
        sids = _stack.sessions_with_history(fix, args.history_pairs + 2, size)
        for _ in range(2):  # warm: the first call of a new size pays its own caches
            _stack.direct_call(stack.provider_url, history=size)
            asyncio.run(ws_turn(stack, fix.token, sids.pop()))
        added, outcomes = [], {}
        for i in range(args.history_pairs):
            order = ["direct", "ws"] if i % 2 else ["ws", "direct"]
            pair: dict[str, Any] = {}
            for side in order:
                if side == "direct":
                    pair["direct"] = _stack.direct_call(stack.provider_url, history=size)
                else:
                    pair["ws"] = asyncio.run(ws_turn(stack, fix.token, sids.pop()))
            outcome = pair["ws"]["outcome"]
            outcomes[outcome] = outcomes.get(outcome, 0) + 1
            if outcome == "completed":
                added.append(pair["ws"]["total"] - pair["direct"][1])
        results[size] = (added, ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())))
    return results


def main() -> None:
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
    args = parser.parse_args()

    import httpx

    _stack.django_setup()
    with _stack.running_stack() as stack, httpx.Client() as client:
        fix = _stack.fixture(stack.provider_url, "turn-overhead")
        sids = _stack.sessions(fix, 2 * (args.pairs + args.warmup) + 6)

        # warm every process (each web and worker process pays its imports on its first turn)
        async def warm_all() -> None:
            await asyncio.gather(*(ws_turn(stack, fix.token, sids.pop()) for _ in range(6)))

        asyncio.run(warm_all())
        for _ in range(args.warmup):
            _stack.direct_call(stack.provider_url)
            asyncio.run(ws_turn(stack, fix.token, sids.pop()))
            rest_turn(client, stack, fix.token, sids.pop())

        # CPU of the direct call alone: this process does nothing else meanwhile (litellm's
        # logging threads included, so wait for them before reading).
        time.sleep(0.5)
        cpu0 = _cpu_self()
        for _ in range(args.pairs):
            _stack.direct_call(stack.provider_url)
        time.sleep(0.5)
        direct_cpu = (_cpu_self() - cpu0) / args.pairs

        direct: list[tuple[float, float]] = []
        ws: list[dict] = []
        rest: list[dict] = []
        worker_cpu0, web_cpu0 = stack.worker.cpu(), stack.web.cpu()
        for i in range(args.pairs):
            # rotate the order so that drift in the machine's load hits every side alike
            sides = ["direct", "ws", "rest"]
            sides = sides[i % 3 :] + sides[: i % 3]
            for side in sides:
                if side == "direct":
                    direct.append(_stack.direct_call(stack.provider_url))
                elif side == "ws":
                    ws.append(asyncio.run(ws_turn(stack, fix.token, sids.pop())))
                else:
                    rest.append(rest_turn(client, stack, fix.token, sids.pop()))
        time.sleep(0.5)
        turns = len(ws) + len(rest)
        worker_cpu = (stack.worker.cpu() - worker_cpu0) / turns
        web_cpu = (stack.web.cpu() - web_cpu0) / turns

        by_history = _history_runs(stack, fix, args)

        # The same direct call with the switches the gateway sets (chat_platform.llm.gateway).
        import litellm

        from chat_platform.llm import gateway

        lean = getattr(gateway, "_configure_lean", None)
        if lean is not None:  # (absent from gateways older than issue 10)
            lean(litellm)
        _stack.direct_call(stack.provider_url)
        time.sleep(0.5)
        cpu0 = _cpu_self()
        for _ in range(args.pairs):
            _stack.direct_call(stack.provider_url)
        time.sleep(0.5)
        lean_cpu = (_cpu_self() - cpu0) / args.pairs

    d_total = [t for _, t in direct]
    d_ttft = [f for f, _ in direct]
    p = _stack.percentile

    def added(results: list[dict], key: str, base: list[float]) -> list[float]:
        pairs = zip(results, base, strict=True)
        return [r[key] - b for r, b in pairs if r["outcome"] == "completed"]

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
    if by_history:
        print(
            "  per-turn overhead by stored history (websocket added p50 / p95; goal <= 1/4 of "
            "Open WebUI's 51 / 57 / 97 / 167 ms at 10 / 200 / 1,000 / 2,000):"
        )
        for size, (values, outcomes) in by_history.items():
            print(
                f"    {size:>6,} stored: p50 {p(values, 50) * 1000:+6.0f} ms, p95 "
                f"{p(values, 95) * 1000:+6.0f} ms  ({outcomes})"
            )
    bad = {}
    for name, results in (("websocket", ws), ("REST", rest)):
        counts: dict[str, int] = {}
        for r in results:
            counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
        print(f"  {name}: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
        bad[name] = sum(v for k, v in counts.items() if k != "completed")
    if args.smoke and any(bad.values()):
        raise SystemExit(f"turn_overhead smoke: turns not completed: {bad}")


if __name__ == "__main__":
    main()
