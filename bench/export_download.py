"""A long chat's export as an ASGI server serves it: batched (``transfer/api.py``, a hop to the
request's sync thread per ~64 KB) against a hop per piece (a piece per message, as before),
interleaved in one run, beside the floor: the same export read in-process with no server.

    .venv/bin/python bench/export_download.py [--messages 10000] [--rounds 3]

Prints the seconds of each road (best of the rounds) and their ratios to the floor. Never
asserts timings (tests/transfer/test_export_batches.py counts the hops).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _django  # noqa: E402
import _stack  # noqa: E402


def _per_piece(chunks):  # noqa: ANN001, ANN202 - the road before batching: one piece per hop
    from transfer import api

    return next(chunks, api._END)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    os.environ.setdefault("ALLOWED_HOSTS", "testserver")  # the test client's host
    _django.setup()
    from django.contrib.auth import get_user_model
    from django.test import AsyncClient
    from rest_framework.authtoken.models import Token

    from bots.models import Bot, ChatSession
    from transfer import api
    from transfer.exports import session_markdown_chunks
    from transfer.lossless import session_json_chunks

    user, _ = get_user_model().objects.get_or_create(username="bench-export")
    token = Token.objects.get_or_create(user=user)[0].key
    Bot.objects.filter(owner=user).delete()
    bot = Bot.objects.create(owner=user, name="export", model="builtin/recall")
    # the history-size runs' stored conversation (bench/_stack.py), one chat of it
    [session_id] = _stack.sessions_with_history(
        _stack.Fixture(user.pk, token, bot.pk), 1, args.messages
    )
    session = ChatSession.objects.get(pk=session_id)
    batched = api._batch

    async def download(path: str) -> int:
        response = await AsyncClient().get(path, headers={"Authorization": f"Token {token}"})
        if response.status_code != 200:
            raise SystemExit(f"{path}: {response.status_code} {response.content[:300]!r}")
        return sum([len(piece) async for piece in response.streaming_content])

    def timed(call) -> tuple[float, int]:  # noqa: ANN001
        start = time.perf_counter()
        size = call()
        return time.perf_counter() - start, size

    print(f"export_download: a chat of {args.messages:,} messages, best of {args.rounds} rounds")
    for wanted, direct in (("json", session_json_chunks), ("markdown", session_markdown_chunks)):
        path = f"/api/v1/sessions/{session.pk}/export/?format={wanted}"
        best = {"floor": float("inf"), "batched": float("inf"), "per piece": float("inf")}
        size = 0
        for _ in range(args.rounds):
            seconds, size = timed(lambda d=direct: sum(len(p.encode()) for p in d(session)))
            best["floor"] = min(best["floor"], seconds)
            for name, road in (("batched", batched), ("per piece", _per_piece)):
                api._batch = road
                seconds, _ = timed(lambda p=path: asyncio.run(download(p)))
                best[name] = min(best[name], seconds)
        api._batch = batched
        floor = best["floor"]
        print(
            f"  {wanted:<8} {size / 1e6:5.1f} MB: floor (read in-process) {floor:6.2f} s; "
            f"batched {best['batched']:6.2f} s ({best['batched'] / floor:.2f}x); "
            f"a hop per piece {best['per piece']:6.2f} s ({best['per piece'] / floor:.2f}x); "
            f"per piece / batched {best['per piece'] / best['batched']:.2f}x"
        )
    bot.delete()


if __name__ == "__main__":
    main()
