"""What one plain turn does, statement by statement, here and at another commit (issue 36 item 1).

One one-bot REST ``wait`` turn, in this process (eager tasks, the in-memory channel layer, a
fake provider in a thread, a private ``redis-server``), after a warm-up turn: every SQL statement
(literals masked), every Redis command and every frame, in order. ``--against REV`` runs the same
over REV's worktree and virtualenv (``bench/_against.py``, cached under ``.bench-cache/``) and
prints what each side does that the other does not. Counts, not timings: the CPU each costs is
``bench/turn_overhead.py``'s and py-spy's to say.

    .venv/bin/python bench/turn_statements.py [--against 410db82] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _against  # noqa: E402
import _stack  # noqa: E402

ROOT_TREE = _stack.ROOT
LITERALS = re.compile(r"'(?:[^']|'')*'|\b\d+\b")


def _mask(sql: str) -> str:
    return LITERALS.sub("?", " ".join(sql.split()))[:300]


def record() -> dict[str, list[str]]:
    """Run a warm-up turn and a counted turn; the counted turn's statements, commands, frames."""
    import redis
    import redis.client
    from channels.layers import InMemoryChannelLayer, channel_layers
    from django.conf import settings
    from django.db.backends import utils as db_utils
    from django.test import Client

    from chat_platform.celery_app import app as celery_app
    from tests.fakeopenai import FakeOpenAI, Reply

    celery_app.conf.task_always_eager = True
    settings.CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}
    settings.CHAT_STREAM_FLUSH_SECONDS = 0.0
    channel_layers.backends.clear()
    seen: dict[str, list[str]] = {"sql": [], "redis": [], "frames": []}
    on = threading.Event()

    real_execute = db_utils.CursorWrapper._execute_with_wrappers

    def execute(self, sql, params, many, executor):  # noqa: ANN001, ANN202
        if on.is_set() and threading.current_thread().name != "turn-watcher":
            seen["sql"].append(_mask(sql))
        return real_execute(self, sql, params, many, executor)

    db_utils.CursorWrapper._execute_with_wrappers = execute

    def counted(real, names):  # noqa: ANN001, ANN202
        def wrapper(self, *args, **kwargs):  # noqa: ANN001, ANN202
            if on.is_set():
                seen["redis"].extend(names(self, args))
            return real(self, *args, **kwargs)

        return wrapper

    one = lambda _, args: [str(args[0])]  # noqa: E731
    redis.Redis.execute_command = counted(redis.Redis.execute_command, one)
    redis.client.PubSub.execute_command = counted(redis.client.PubSub.execute_command, one)
    redis.client.Pipeline.execute = counted(
        redis.client.Pipeline.execute, lambda pipe, _: [str(c[0][0]) for c in pipe.command_stack]
    )
    real_group_send = InMemoryChannelLayer.group_send

    async def group_send(self, group, message):  # noqa: ANN001, ANN202
        if on.is_set():
            frame = message.get("frame") or {}
            seen["frames"].append(str(frame.get("type") or message.get("type")))
        return await real_group_send(self, group, message)

    InMemoryChannelLayer.group_send = group_send

    chunks = [w + " " for w in _stack.TEXT.split(" ")[:-1]] + [_stack.TEXT.split(" ")[-1]]
    provider = FakeOpenAI(default=Reply(text=_stack.TEXT, chunks=chunks)).start()
    try:
        fix = _stack.fixture(provider.url, "turn-statements")
        client = Client(HTTP_AUTHORIZATION=f"Token {fix.token}", HTTP_HOST="127.0.0.1")
        for counted_turn in (False, True):
            [session_id] = _stack.sessions(fix, 1)
            if counted_turn:
                on.set()
            response = client.post(
                f"/api/v1/sessions/{session_id}/messages/",
                {"content": _stack.PROMPT, "wait": True},
                content_type="application/json",
            )
            on.clear()
            assert response.status_code == 201, response.content[:300]
    finally:
        provider.stop()
    return seen


def _side(tree: Path, python: str, db: str, redis_url: str) -> dict[str, list[str]]:
    env = dict(os.environ, PYTHONPATH=str(tree), BENCH_ROOT=str(tree), REDIS_URL=redis_url)
    env["DATABASE_URL"] = _against._database(db)
    out = subprocess.run(
        [python, __file__, "--record"], cwd=tree, env=env, capture_output=True, text=True
    )
    for line in out.stdout.splitlines():
        if line.startswith(_against.SAY):
            return json.loads(line[len(_against.SAY) :])
    raise SystemExit(f"turn_statements: {tree} failed:\n{out.stdout[-2000:]}\n{out.stderr[-3000:]}")


def _print(name: str, seen: dict[str, list[str]]) -> None:
    print(
        f"{name}: {len(seen['sql'])} SQL statements, {len(seen['redis'])} Redis commands, "
        f"{len(seen['frames'])} frames ({dict(Counter(seen['frames']))})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--against", metavar="REV")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--record", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.record:
        _stack.django_setup()
        print(_against.SAY + json.dumps(record()), flush=True)
        return
    stem = os.environ.get("DATABASE_URL", "x/chat_bench_stack").rsplit("/", 1)[1]
    with _against.private_redis() as redis_url:
        this_python = _against.virtualenv(ROOT_TREE, _against.CACHE / "this-venv", label="this")
        this = _side(ROOT_TREE, str(this_python), f"{stem}_stmts_this", redis_url)
        results = {"this": this}
        _print("this", this)
        for line in this["sql"]:
            print("   ", line)
        print("  redis:", " ".join(this["redis"]))
        if args.against:
            tree = _against.prepare(args.against)
            python = str(tree / ".venv" / "bin" / "python")
            rev = _side(tree, python, f"{stem}_stmts_{tree.name}", redis_url)
            results["rev"] = rev
            _print(args.against, rev)
            for kind in ("sql", "redis", "frames"):
                more = Counter(this[kind]) - Counter(rev[kind])
                fewer = Counter(rev[kind]) - Counter(this[kind])
                print(f"  {kind}: this does {sum(more.values())} that {args.against} did not:")
                for item, n in more.items():
                    print(f"    +{n} {item}")
                print(f"  {kind}: {args.against} did {sum(fewer.values())} that this does not:")
                for item, n in fewer.items():
                    print(f"    -{n} {item}")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
