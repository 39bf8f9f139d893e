"""Start the platform's real processes (ASGI web server, Celery worker) as subprocesses."""

import fcntl
import functools
import hashlib
import os
import random
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import redis

ROOT = Path(__file__).resolve().parents[2]


# Ports for the servers tests start: below Linux's ephemeral range (32768-60999), which the
# tests' own outgoing connections draw from (a port the kernel handed out as free was taken by
# such a connection before uvicorn bound it: "address already in use", and the readiness probe
# reached the other end), and a block of its own for each xdist worker, so two never collide.
PORT_BLOCK = 2_000
PORTS_FROM = 20_000


def free_port() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    first = PORTS_FROM + PORT_BLOCK * (int(worker) % 6 if worker.isdigit() else 0)
    start = random.randrange(PORT_BLOCK)
    for offset in range(PORT_BLOCK):
        port = first + (start + offset) % PORT_BLOCK
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port in {first}-{first + PORT_BLOCK - 1}")


def _stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


# As the Makefile and docker-compose.yml start the web server: a SIGTERM gives in-flight
# requests this long, then cancels what is left (open websockets included).
GRACEFUL_SHUTDOWN_SECONDS = 5
# As they cap a websocket frame (uvicorn --ws-max-size; docs/security.md): the largest legitimate
# send fits, a larger frame closes the socket 1009.
WS_MAX_SIZE = 8 * 1024 * 1024


@contextmanager
def web_server(env: dict[str, str], log_path: Path) -> Iterator[str]:
    """uvicorn serving chat_platform.asgi (HTTP + websockets); yields its base URL."""
    with web_server_process(env, log_path) as (base, _process):
        yield base


@contextmanager
def web_server_process(
    env: dict[str, str], log_path: Path
) -> Iterator[tuple[str, subprocess.Popen]]:
    port = free_port()
    with open(log_path, "wb") as log:
        process = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "uvicorn",
                "chat_platform.asgi:application",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--timeout-graceful-shutdown",
                str(GRACEFUL_SHUTDOWN_SECONDS),
                "--ws-max-size",
                str(WS_MAX_SIZE),
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        base = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 60
            while True:
                if process.poll() is not None:
                    raise RuntimeError(f"web server exited: {log_path.read_text()[-3000:]}")
                try:
                    httpx.get(base + "/api/v1/bots/", timeout=2)
                    break
                except httpx.HTTPError:
                    if time.monotonic() > deadline:
                        raise RuntimeError("web server did not start") from None
                    time.sleep(0.2)
            yield base, process
        finally:
            _stop(process)


# The queues of CELERY_TASK_ROUTES (chat_platform/settings/queues.py): this worker consumes all
# four (deployed, the beat's process serves "upkeep").
QUEUES = ("chat", "compaction", "heavy", "upkeep")


@contextmanager
def celery_worker(env: dict[str, str], log_path: Path) -> Iterator[subprocess.Popen]:
    with open(log_path, "wb") as log:
        process = subprocess.Popen(  # noqa: S603
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "chat_platform",
                "-q",  # no banner: in real mode every line is a JSON event
                "worker",
                "-Q",
                ",".join(QUEUES),
                "-P",
                "threads",
                "-c",
                "8",
                "--purge",
                "--without-heartbeat",
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + 60
            while b"ready" not in log_path.read_bytes():
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"worker did not start: {log_path.read_text()[-3000:]}")
                time.sleep(0.2)
            yield process
        finally:
            _stop(process)


def process_env(**overrides: str | None) -> dict[str, str]:
    env = dict(os.environ)
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def manage(env: dict[str, str], *command: str, timeout: float = 120) -> None:
    """``manage.py COMMAND`` in a subprocess with ``env``; fails the test with its stderr."""
    done = subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", *command],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert done.returncode == 0, f"manage.py {' '.join(command)} failed:\n{done.stderr[-3000:]}"


_templates_lock = threading.Lock()


def _sqlite_template(base_temp: Path, *, seed: bool) -> Path:
    """A migrated (and, with ``seed``, ``seed_demo``'d) SQLite database, made once per run:
    every embedded platform and SQLite script starts from a copy instead of migrating again
    (~10 s of CPU each). Under pytest-xdist the workers' temporary folders share a parent; the
    first worker to need a template makes it there, under a file lock, for all of them.
    ``TEST_TEMPLATES_DIR`` names a folder that outlives one pytest session: `make test` sets
    it for its run, so its browser session copies the templates its first session made. The
    seeded template is a copy of the plain one, seeded: one migration a run, not two."""
    folder = os.environ.get("TEST_TEMPLATES_DIR")
    if folder:
        base_temp = Path(folder)
    elif os.environ.get("PYTEST_XDIST_WORKER"):
        base_temp = base_temp.parent
    # The migrations' digest in the name: a folder kept across a change of migrations never
    # hands out a template made for others.
    name = f"template-{_migrations_digest()}"
    plain = _template_made(
        base_temp / f"{name}.sqlite3", lambda _building, env: manage(env, "migrate", "--noinput")
    )
    if not seed:
        return plain

    def seeded(building: Path, env: dict[str, str]) -> None:
        shutil.copyfile(plain, building)
        manage(env, "seed_demo")

    return _template_made(base_temp / f"{name}-seeded.sqlite3", seeded)


def _template_made(path: Path, make: Callable[[Path, dict[str, str]], None]) -> Path:
    """``path``, made by ``make(building, env)`` (``env``'s database is ``building``) unless it
    exists; one process and thread at a time, renamed into place when complete."""
    path.parent.mkdir(parents=True, exist_ok=True)  # a TEST_TEMPLATES_DIR not made yet
    with _templates_lock, open(path.parent / "templates.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not path.exists():
            building = path.with_suffix(".building")
            building.unlink(missing_ok=True)
            env = process_env(
                REDIS_URL=None, SECRET_KEY=None, DEBUG="true", DATABASE_URL=f"sqlite:///{building}"
            )
            make(building, env)
            building.rename(path)
    return path


@functools.cache
def _migrations_digest() -> str:
    """A digest of every installed app's migration files: a template made for other migrations
    (another branch, a new migration) is never used."""
    from django.apps import apps

    digest = hashlib.sha256()
    for app in sorted(apps.get_app_configs(), key=lambda config: config.label):
        for path in sorted((Path(app.path) / "migrations").glob("*.py")):
            digest.update(f"{app.label}/{path.name}\0".encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def postgres_template() -> str:
    """The name of a PostgreSQL database migrated for this tree's migrations, made once per
    machine: each test process's database is cloned from it (``CREATE DATABASE … TEMPLATE``,
    about a second) and Django's migrate then finds nothing to apply, instead of every test
    process migrating its own (~20 s of CPU each). Made under an advisory lock that every run
    on this server shares, in a database of another name renamed when complete, so a run never
    clones a half-migrated template; kept for later runs of the same migrations."""
    import psycopg
    from django.conf import settings

    db = settings.DATABASES["default"]
    name = f"test_template_{_migrations_digest()}"
    server = {"host": db["HOST"], "port": db["PORT"], "user": db["USER"], "dbname": "postgres"}
    with psycopg.connect(**server, autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(hashtext('chat-platform test template'))")
        exists = admin.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone()
        if exists is None:
            building = f"{name}_building"
            admin.execute(f'DROP DATABASE IF EXISTS "{building}"')
            admin.execute(f'CREATE DATABASE "{building}"')
            url = f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{building}"
            env = process_env(DATABASE_URL=url, DEBUG="true", SECRET_KEY=None, REDIS_URL=None)
            manage(env, "migrate", "--noinput", timeout=900)
            admin.execute(f'ALTER DATABASE "{building}" RENAME TO "{name}"')
        admin.execute("SELECT pg_advisory_unlock(hashtext('chat-platform test template'))")
    return name


def sqlite_copy(tmp_path_factory, database: Path, *, seed: bool = False) -> str:
    """Copy the test process's migrated SQLite template to ``database``; returns its
    ``DATABASE_URL``."""
    shutil.copyfile(_sqlite_template(tmp_path_factory.getbasetemp(), seed=seed), database)
    return f"sqlite:///{database}"


def database_url() -> str:
    """The test database as a ``DATABASE_URL`` for the processes a test starts."""
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}"


def wait_for(predicate, *, timeout: float, interval: float = 0.1, what: str = "condition"):
    """Poll ``predicate`` until it returns something true (returned) or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"{what} not reached in time")
        time.sleep(interval)


class PrivateRedis:
    """redis-server on one port, stopped and started again on that same port."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.process: subprocess.Popen | None = None
        self.client = redis.Redis(port=port, socket_connect_timeout=1)

    def _pings(self) -> bool:
        try:
            return bool(self.client.ping())
        except redis.RedisError:
            return False

    def start(self) -> None:
        binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.process = subprocess.Popen(  # noqa: S603
            [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
            + ["--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_for(self._pings, timeout=10, what="redis-server answering")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=10)
        self.process = None


@contextmanager
def private_redis(port: int) -> Iterator[PrivateRedis]:
    server = PrivateRedis(port)
    server.start()
    try:
        yield server
    finally:
        server.stop()
