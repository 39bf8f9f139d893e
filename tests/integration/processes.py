"""Start the platform's real processes (ASGI web server, Celery worker) as subprocesses."""

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


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
                "chat,compaction,heavy",
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
