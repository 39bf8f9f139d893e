"""bench/rooms.py ``--stack``: the measured loop over the deployed stack's websockets, each send
after the queues drained, with the worker's and the web server's CPU per side."""

import time
from collections import Counter

from django.conf import settings


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
