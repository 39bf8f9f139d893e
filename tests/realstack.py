"""The real stack, one per test process: uvicorn and a Celery worker
(``tests/integration/processes.py``) on the test database, shared by every test that asks for
``real_stack`` (the cross-process tests of ``tests/integration``, the ``tests/openai_api``
modules through their ``stack``). Why sharing it is safe (docs/testing.md, "Shared processes"):

- its processes run on ``tests.integration.stack_settings``: their broker and channel-layer keys
  carry a prefix of this test process, so its worker takes only the tasks its own web server and
  worker queue, never one the test process or a worker another test starts queues on the same
  Redis db, and no such worker takes one of the stack's;
- each test makes users, bots and sessions of its own, and ids never repeat in a test database;
- each test ends by waiting until no task of the stack is queued or taken and unacknowledged
  (the tasks are ``acks_late``), before its rows are deleted: nothing of one test runs into the
  next. A stack that does not get there, or a process of it that exited, fails that test, and
  the next test starts a new stack under a new prefix.
"""

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import redis

from tests.integration.processes import (
    QUEUES,
    celery_worker,
    database_url,
    process_env,
    web_server_process,
)

# Generous, like every wait on these processes (docs/testing.md, "Timeouts are for hangs").
IDLE_TIMEOUT_SECONDS = 120
# A worker pops a task from its queue, then records it as unacknowledged: idle must be seen a few
# times in a row, not once in that gap.
IDLE_POLLS = 3
IDLE_POLL_SECONDS = 0.05


class RealStack:
    """The shared stack's processes: started on first use, and again (under a new prefix) after
    a test's wait for them failed or one of them exited (checked there, by ``wait_idle``)."""

    def __init__(self, logs: Path) -> None:
        from django.conf import settings

        self.logs = logs
        self.prefix = ""
        self.base = ""
        self.starts = 0
        self._processes: list[subprocess.Popen] = []
        self._log_paths: list[Path] = []
        self._exit: ExitStack | None = None
        self._redis = redis.Redis.from_url(settings.REDIS_URL)

    def running(self) -> bool:
        return self._exit is not None and all(p.poll() is None for p in self._processes)

    def start(self) -> None:
        self.starts += 1
        # A new prefix for each start: tasks a stopped stack left behind are no new one's.
        self.prefix = f"real-stack-{os.getpid()}-{self.starts}:"
        env = process_env(
            DATABASE_URL=database_url(),
            DEBUG="false",
            LOG_JSON="true",
            DJANGO_SETTINGS_MODULE="tests.integration.stack_settings",
            REAL_STACK_KEY_PREFIX=self.prefix,
        )
        self._log_paths = [
            self.logs / f"worker-{self.starts}.log",
            self.logs / f"web-{self.starts}.log",
        ]
        with ExitStack() as started:
            worker = started.enter_context(celery_worker(env, self._log_paths[0]))
            self.base, web = started.enter_context(web_server_process(env, self._log_paths[1]))
            self._processes = [worker, web]
            self._exit = started.pop_all()

    def stop(self) -> None:
        if self._exit is not None:
            self._exit.close()
            self._exit = None

    def close(self) -> None:
        self.stop()
        self._redis.close()

    def busy(self) -> list[str]:
        """The stack's broker keys that hold a task: a queue, or ``unacked`` (taken, running)."""
        held = [q for q in QUEUES if self._redis.llen(f"{self.prefix}{q}")]
        if self._redis.hlen(f"{self.prefix}unacked"):
            held.append("unacked")
        return held

    def wait_idle(self, timeout: float = IDLE_TIMEOUT_SECONDS) -> None:
        deadline = time.monotonic() + timeout
        quiet = 0
        while quiet < IDLE_POLLS:
            if not self.running():
                raise AssertionError(f"a process of the real stack exited{self.log_tails()}")
            held = self.busy()
            if held and time.monotonic() > deadline:
                raise AssertionError(f"the real stack still holds tasks ({held}){self.log_tails()}")
            quiet = 0 if held else quiet + 1
            time.sleep(IDLE_POLL_SECONDS)

    def log_tails(self) -> str:
        return "".join(
            f"\n--- {path.name} ---\n{path.read_text(errors='replace')[-3000:]}"
            for path in self._log_paths
            if path.exists()
        )


@pytest.fixture(scope="session")
def real_stack_processes(django_db_setup, tmp_path_factory) -> Iterator[RealStack]:
    """This test process's real stack (see the module's docstring); stopped at the end."""
    stack = RealStack(tmp_path_factory.mktemp("real-stack"))
    try:
        yield stack
    finally:
        stack.close()


@pytest.fixture
def real_stack(real_stack_processes) -> Iterator[str]:
    """The shared uvicorn and Celery worker on the test database (``RealStack``); yields the web
    server's base URL. The test's rows must be committed for the stack to see them
    (``django_db(transaction=True)``). At the end the test waits until the stack has no task
    left, so none runs into the next test (docs/testing.md, "Shared processes")."""
    stack = real_stack_processes
    if not stack.running():
        stack.stop()  # what is left of a stack whose process exited
        stack.start()
    yield stack.base
    try:
        stack.wait_idle()
    except AssertionError:
        stack.stop()  # the next test starts a new one
        raise
