"""The whole stack for the benchmarks that measure it: a local fake provider, uvicorn, the Celery
worker fleet (scripts/worker.sh), on PostgreSQL + Redis, each a process of its own so that their
CPU can be read apart. Real mode, as deployed: no eager tasks, the Redis channel layer.

    DATABASE_URL  default postgres://postgres@127.0.0.1:5432/chat_bench_stack (created if missing)
    REDIS_URL     default redis://127.0.0.1:6379/14 (flushed at start: use a database of its own)

The fake provider streams ``WORDS`` words, one per chunk, ``CHUNK_DELAY`` seconds apart.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from _logdigest import log_digest
from _ports import free_port
from _procfs import cpu_seconds, descendants, rss_bytes

# The tree whose stack runs: this checkout, or another commit's worktree (``--against``, which runs
# this bench code over that tree). The fake provider is always this checkout's (``BENCH``).
ROOT = Path(os.environ.get("BENCH_ROOT") or Path(__file__).resolve().parents[1])
BENCH = Path(__file__).resolve().parent
WORDS = 50
CHUNK_DELAY = 0.010
TEXT = " ".join(f"w{i:02d}" for i in range(WORDS))
PROMPT = "Say fifty words."


def configure_env() -> None:
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/chat_bench_stack")
    os.environ.setdefault("REDIS_URL", "redis://127.0.0.1:6379/14")
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("LOG_LEVEL", "WARNING")
    os.environ.setdefault("DEBUG", "false")
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    os.environ["DJANGO_SETTINGS_MODULE"] = "chat_platform.settings"
    # The bench process only reads and writes rows; its own pool stays small.
    os.environ.setdefault("DATABASE_POOL_MAX_SIZE", "4")


def django_setup() -> None:
    """Django in this process (rows, pg_stat_activity), migrated database, flushed Redis."""
    sys.path.insert(0, str(ROOT))
    configure_env()
    import django
    import redis
    from _django import database_migrated

    django.setup()
    database_migrated()
    redis.Redis.from_url(os.environ["REDIS_URL"]).flushdb()


# --- processes -------------------------------------------------------------------------------


@dataclass
class Proc:
    name: str
    process: subprocess.Popen
    log: Path
    stop_signal: int = signal.SIGTERM  # what ``_stop`` sends first (PostgreSQL: SIGINT)

    def tree(self) -> list[int]:
        return descendants(self.process.pid)

    def cpu(self) -> float:
        return sum(cpu_seconds(p) for p in self.tree())

    def rss(self) -> int:
        return sum(rss_bytes(p) for p in self.tree())


@dataclass
class Stack:
    base: str
    provider_url: str
    web: Proc
    worker: Proc
    provider: Proc
    procs: list[Proc] = field(default_factory=list)

    @property
    def ws_base(self) -> str:
        return self.base.replace("http", "ws", 1)


def _start(
    name: str, argv: list[str], env: dict[str, str], logdir: Path, wrap: tuple[str, ...] = ()
) -> Proc:
    """``argv`` in a session of its own; ``wrap`` before it (bench/multihost.py: ``ip netns exec
    <host> …``, which execs: the pid stays the process's, so ``_stop``'s killpg reaches it)."""
    log, argv = logdir / f"{name}.log", [*wrap, *argv]
    with open(log, "wb") as out:
        process = subprocess.Popen(  # noqa: S603
            argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Proc(name, process, log)


def _stop(proc: Proc) -> None:
    if proc.process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.process.pid, proc.stop_signal)
        try:
            proc.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.process.pid, 9)
            proc.process.wait(timeout=5)


def _wait_for(predicate, what: str, proc: Proc, timeout: float = 90) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.process.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start:\n{proc.log.read_text()[-3000:]}")
        time.sleep(0.2)


def _start_provider(
    env: dict[str, str],
    logdir: Path,
    procs: list[Proc],
    *,
    host: str = "127.0.0.1",
    port: int | None = None,
    wrap: tuple[str, ...] = (),
) -> tuple[Proc, str]:
    """The fake provider, up; (its process, its base URL)."""
    port, script = port or free_port(), str(BENCH / "_fake_provider.py")
    argv = [sys.executable, script, "--host", host, "--port", str(port)]
    provider = _start("provider", argv, env, logdir, wrap)
    procs.append(provider)
    provider_url = f"http://{host}:{port}/v1"

    def provider_up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            return httpx.get(provider_url + "/models", timeout=1).status_code == 200
        return False

    _wait_for(provider_up, "fake provider", provider)
    return provider, provider_url


def _start_worker(
    env: dict[str, str],
    logdir: Path,
    procs: list[Proc],
    *,
    worker_processes: int | None,
    worker_threads: int,
    name: str = "worker",
    wrap: tuple[str, ...] = (),
) -> Proc:
    worker_env = dict(env)
    worker_env["CELERY_WORKER_CONCURRENCY"] = str(worker_threads)
    if worker_processes:
        worker_env["WORKER_PROCESSES"] = str(worker_processes)
    # The celery beside this interpreter: this checkout's .venv, or --against's side's own venv.
    worker_env["CELERY"] = str(Path(sys.executable).parent / "celery")
    worker = _start(
        name,
        [
            "bash",
            str(ROOT / "scripts" / "worker.sh"),
            "--without-heartbeat",
            "--without-gossip",
            "--without-mingle",
            "--purge",
        ],
        worker_env,
        logdir,
        wrap,
    )
    procs.append(worker)
    return worker


def _start_web(
    env: dict[str, str],
    logdir: Path,
    procs: list[Proc],
    *,
    web_workers: int,
    host: str = "127.0.0.1",
    port: int | None = None,
    name: str = "web",
    wrap: tuple[str, ...] = (),
) -> tuple[Proc, str]:
    """uvicorn with ``web_workers`` processes, up; (its process, its base URL)."""
    port = port or free_port()
    web = _start(
        name,
        [
            sys.executable,
            "-m",
            "uvicorn",
            "chat_platform.asgi:application",
            "--host",
            host,
            "--port",
            str(port),
            "--workers",
            str(web_workers),
            "--log-level",
            "warning",
            "--timeout-graceful-shutdown",
            "5",
        ],
        env,
        logdir,
        wrap,
    )
    procs.append(web)
    base = f"http://{host}:{port}"

    def web_up() -> bool:
        with contextlib.suppress(httpx.HTTPError):
            httpx.get(base + "/api/v1/bots/", timeout=2)
            return True
        return False

    _wait_for(web_up, "web server", web)
    return web, base


@contextlib.contextmanager
def running_stack(
    *,
    web_workers: int = 2,
    worker_processes: int | None = None,
    worker_threads: int = 16,
    logdir: Path | None = None,
) -> Iterator[Stack]:
    """Fake provider + uvicorn (``web_workers``) + scripts/worker.sh, stopped on exit."""
    import signal
    import tempfile

    # SIGTERM (a CI timeout, kill) ends the run through the finally below, which stops the stack.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    logdir = logdir or Path(tempfile.mkdtemp(prefix="bench-stack-"))
    env = dict(os.environ)
    env["LOG_JSON"] = "true"
    # As deployed (compose's default): the processes log at INFO, one JSON line per event.
    env["LOG_LEVEL"] = os.environ.get("STACK_LOG_LEVEL", "INFO")
    procs: list[Proc] = []
    try:
        provider, provider_url = _start_provider(env, logdir, procs)
        worker = _start_worker(
            env,
            logdir,
            procs,
            worker_processes=worker_processes,
            worker_threads=worker_threads,
        )
        web, base = _start_web(env, logdir, procs, web_workers=web_workers)
        processes = worker_processes or os.cpu_count() or 1
        _wait_for(lambda: worker.log.read_bytes().count(b"ready") >= processes, "worker", worker)
        yield Stack(base, provider_url, web, worker, provider, procs)
    finally:
        for proc in reversed(procs):
            _stop(proc)
        # In the printout, which is all a CI run keeps: why turns were refused or failed.
        # Printed when the bench exits, below its figures (and a smoke run's failure).
        loud = log_digest([proc.log for proc in procs])
        atexit.register(
            print, "  servers' log: " + (" | ".join(loud) if loud else "no warnings or errors")
        )


# --- rows ------------------------------------------------------------------------------------


@dataclass
class Fixture:
    user_id: int
    token: str
    bot_id: int


def fixture(provider_url: str, name: str, *, embedding: str | None = None) -> Fixture:
    """The bench's user, token and bot. ``embedding``: the bot's embedding_model (None: the field's
    default, which embeds each turn's written messages since d5e08e9; "": words only, as every
    bot before it)."""
    from django.contrib.auth import get_user_model
    from rest_framework.authtoken.models import Token

    from bots.models import Bot

    user, _ = get_user_model().objects.get_or_create(username=f"bench-{name}")
    token, _ = Token.objects.get_or_create(user=user)
    Bot.objects.filter(owner=user).delete()
    bot = Bot(
        owner=user,
        name=name,
        model="openai/fake-model",
        api_base=provider_url,
        system_prompt="You are terse.",
        max_output_tokens=256,
        compaction_enabled=False,
    )
    if embedding is not None:
        bot.embedding_model = embedding
    # Approved, as staff would: the bench's api_base is a local server.
    bot.api_base_approved = provider_url
    bot.save()
    return Fixture(user.pk, token.key, bot.pk)


def sessions(fix: Fixture, count: int) -> list[int]:
    from bots.models import ChatSession

    created = ChatSession.objects.bulk_create(
        [ChatSession(user_id=fix.user_id, bot_id=fix.bot_id, title=f"b{i}") for i in range(count)],
        batch_size=1000,
    )
    return [s.pk for s in created]


def history_text(seq: int) -> str:
    """The stored conversation the history-size runs use: short turns, numbered."""
    role = "user" if seq % 2 else "assistant"
    return f"{role} turn {seq}: the plan for item {seq} is ready, with notes on what comes next."


def sessions_with_history(fix: Fixture, count: int, messages: int) -> list[int]:
    """``count`` sessions, each holding the same ``messages`` completed messages (token counts
    stored, running totals set, as the send path leaves them)."""
    from bots.models import ChatSession, Message
    from chat_platform.llm.tokens import count_message_tokens

    sids = sessions(fix, count)
    rows, tokens = [], 0
    for seq in range(1, messages + 1):
        text = history_text(seq)
        cost = count_message_tokens(text, model="openai/fake-model")
        tokens += cost
        rows.append((seq, "user" if seq % 2 else "assistant", text, cost))
    Message.objects.bulk_create(
        [
            Message(
                session_id=sid,
                seq=seq,
                role=role,
                kind="chat",
                content=text,
                status="complete",
                token_count=cost,
                model="openai/fake-model",
            )
            for sid in sids
            for seq, role, text, cost in rows
        ],
        batch_size=5000,
    )
    ChatSession.objects.filter(pk__in=sids).update(
        last_seq=messages, context_tokens=tokens, context_messages=messages
    )
    _analyze("bots_message", "bots_chatsession")
    return sids


def _analyze(*tables: str) -> None:
    """Planner statistics for what was just bulk-loaded. A deployment's tables grow a turn at a
    time and autovacuum keeps their statistics; a table that took thousands of rows a second
    ago may not have them yet, and PostgreSQL then picks plans it never would in service (a
    bitmap scan of every uncompacted message, 7 ms instead of 0.1 ms, was seen here)."""
    from django.db import connection

    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ANALYZE {connection.ops.quote_name(table)}")


def db_connections() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("select count(*) from pg_stat_activity where datname = current_database()")
        return int(cursor.fetchone()[0])


# --- the direct call -------------------------------------------------------------------------


def direct_call(provider_url: str, *, history: int = 0) -> tuple[float, float]:
    """The same streaming call made directly with litellm (its defaults): (ttft, total) s.
    ``history``: the stored messages of ``sessions_with_history`` go along, as the stack sends
    them."""
    import litellm

    started = time.perf_counter()
    first = 0.0
    past = [
        {"role": "user" if seq % 2 else "assistant", "content": history_text(seq)}
        for seq in range(1, history + 1)
    ]
    response = litellm.completion(
        model="openai/fake-model",
        api_base=provider_url,
        api_key="no-key-required",
        messages=[
            {"role": "system", "content": "You are terse."},
            *past,
            {"role": "user", "content": PROMPT},
        ],
        stream=True,
        stream_options={"include_usage": True},
        num_retries=0,
    )
    parts = []
    for chunk in response:
        if chunk.choices and chunk.choices[0].delta.content:
            if not first:
                first = time.perf_counter() - started
            parts.append(chunk.choices[0].delta.content)
    total = time.perf_counter() - started
    if "".join(parts) != TEXT:
        raise SystemExit("direct call: unexpected text")
    return first, total


def gateway_call(provider_url: str) -> tuple[float, float]:
    """The same streaming call through this platform's gateway, in this process (the direct
    road a worker takes, without web, queue or database): (ttft, total) s."""
    from chat_platform.llm import gateway

    config = gateway.ModelConfig(
        model="openai/fake-model", api_base=provider_url, api_base_trusted=True
    )
    messages = [
        {"role": "system", "content": "You are terse."},
        {"role": "user", "content": PROMPT},
    ]
    started = time.perf_counter()
    first = 0.0
    parts = []
    for delta in gateway.stream(config, messages):
        if not first:
            first = time.perf_counter() - started
        parts.append(delta)
    total = time.perf_counter() - started
    if "".join(parts) != TEXT:
        raise SystemExit("gateway call: unexpected text")
    return first, total


class ProviderClock:
    """The provider's own time for one request (``tests.fakeopenai``'s ``/served``): from having
    read the request to its last byte written. ``mark()`` before a call, ``seconds()`` after it:
    the time of the one chat request for ``PROMPT`` made in between. A turn's time minus this is
    the method the issue used for both this platform and Open WebUI (issue 17, item 8)."""

    def __init__(self, provider_url: str) -> None:
        self.url = provider_url + "/served"
        self.since = 0
        self.mark()

    def _rows(self) -> tuple[list[dict], int]:
        answer = httpx.get(self.url, params={"since": self.since}, timeout=10).json()
        return answer["served"], answer["count"]

    def mark(self) -> None:
        self.since = self._rows()[1]

    def seconds(self) -> float | None:
        """None when no such request finished (a failed turn)."""
        deadline = time.monotonic() + 2  # the handler records its end just after the last byte
        while True:
            rows, _ = self._rows()
            mine = [r for r in rows if r["last"] == PROMPT]
            if mine and all(r["seconds"] is not None for r in mine):
                done = [r["seconds"] for r in mine if r["completed"]]
                return done[-1] if done else None
            if time.monotonic() > deadline:
                return None
            time.sleep(0.005)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]
