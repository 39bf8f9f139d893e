"""Embedded mode's task runner and beat (docs/operations.md "Embedded mode"): Celery tasks run on
a small pool of background threads inside this process, never in the request or socket handler
that dispatched them; ``InProcessBeat`` runs the beat schedule.

Every task is dispatched the way real mode does it (``task.delay(...)``, by name, after the
commit that made its rows); the app's task class (``InProcessTask``) sends it here instead of to
a broker when ``TASKS_IN_PROCESS`` is on (``REDIS_URL`` unset). The request that sent a message,
regenerated or edited a reply returns at once; the turn runs on one of
``EMBEDDED_TASK_THREADS`` threads and its frames reach the server's event loop through
``chat_platform.realtime`` exactly as a worker's do through Redis. A task waits its turn in an
in-memory queue, as it would in the broker; the queue is lost with the process, and the
watchdog (``turns.watchdog``, run in-process by ``InProcessBeat``) hands a pending reply over
again after a restart: on its first round, since nothing dispatched before ``QUEUE_BORN`` can be
in this process's queue, nor a reply that last beat before it be running here.

Each task runs on its own database connection and closes it when it ends (Django keeps one per
thread), so a pool thread holds none between tasks. The threads are daemons: stopping the server
never waits for a reply; the watchdog ends what was cut off.
"""

import collections
import datetime as dt
import itertools
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from typing import Any

import structlog
from celery import Task
from django.conf import settings
from django.db import close_old_connections, connections

from chat_platform import foreground

log = structlog.get_logger(__name__)

# When this process's queue was made: every task it will ever run is dispatched after this (the
# module is imported before the first dispatch), so an unfinished reply dispatched, or last
# stamped by its turn, before it belongs to a process that is gone (``queue_born``).
QUEUE_BORN = dt.datetime.now(dt.UTC)


def queue_born() -> dt.datetime | None:
    """``QUEUE_BORN`` when tasks run in this process (embedded mode); None on a broker, whose
    queue outlives any one process."""
    return QUEUE_BORN if settings.TASKS_IN_PROCESS else None


class _Pool:
    """A fixed number of daemon threads taking work from per-user lanes, started when first
    used. Work is queued in the lane of the user it serves (``fair_key``; None: one shared
    lane) and a free thread takes the next piece of the lane with the least work running, of
    those the one served longest ago: a user who queued twenty replies has one taken, then the
    next user's, then their second. And one lane runs on all threads but one: another user's
    work never waits behind the first user's, queued or running (docs/operations.md "Embedded
    mode")."""

    def __init__(self, size: int | None = None) -> None:
        self._size = size  # None: ``EMBEDDED_TASK_THREADS``, read at each submit
        self._lock = threading.Lock()
        self._idle = threading.Condition(self._lock)
        self._ready = threading.Condition(self._lock)
        self._lanes: dict[Hashable, collections.deque[Callable[[], None]]] = {}
        self._turns: collections.deque[Hashable] = collections.deque()  # lanes with work
        self._running: dict[Hashable, int] = {}  # lane -> its work running now
        # lane -> when its last work started (``_clock``): of lanes running as much, the one
        # served longest ago goes first; a lane never served (or forgotten) first of all.
        self._started: dict[Hashable, int] = {}
        self._clock = itertools.count()
        self._threads: list[threading.Thread] = []
        self._unfinished = 0  # queued or running (timers not yet due are not counted)

    def submit(self, work: Callable[[], None], fair_key: Hashable = None) -> None:
        with self._lock:
            self._unfinished += 1
            size = max(1, int(self._size or settings.EMBEDDED_TASK_THREADS))
            while len(self._threads) < size:
                thread = threading.Thread(
                    target=self._work, name=f"task-{len(self._threads) + 1}", daemon=True
                )
                thread.start()
                self._threads.append(thread)
            lane = self._lanes.get(fair_key)
            if lane is None:
                lane = self._lanes[fair_key] = collections.deque()
                self._turns.append(fair_key)
            lane.append(work)
            self._ready.notify()

    def _next(self) -> tuple[Hashable, Callable[[], None]]:
        """The first piece of work of the lane whose turn it is: of the lanes with work, those
        with the fewest running now, of those the one served longest ago (then the first in
        line). That lane goes to the back of the line (or leaves it, emptied). Caller holds the
        lock."""
        # One lane never holds every thread: another user's work always finds one free (a user's
        # four replies waiting on a slow tool server held all four for a minute).
        cap = max(1, len(self._threads) - 1)
        self._ready.wait_for(lambda: any(self._running.get(k, 0) < cap for k in self._turns))
        eligible = [k for k in self._turns if self._running.get(k, 0) < cap]
        key = min(eligible, key=lambda k: (self._running.get(k, 0), self._started.get(k, -1)))
        self._turns.remove(key)
        lane = self._lanes[key]
        work = lane.popleft()
        if lane:
            self._turns.append(key)
        else:
            del self._lanes[key]
        self._running[key] = self._running.get(key, 0) + 1
        self._started[key] = next(self._clock)
        return key, work

    def _work(self) -> None:
        while True:
            with self._lock:
                key, work = self._next()
            try:
                work()
            finally:
                with self._lock:
                    self._running[key] -= 1
                    if not self._running[key]:
                        del self._running[key]
                        if key not in self._lanes:  # nothing of it left: forget it
                            self._started.pop(key, None)
                    self._unfinished -= 1
                    if not self._unfinished:
                        self._idle.notify_all()
                    self._ready.notify()  # its lane may take a thread again

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or running (or ``timeout`` passes); whether it is."""
        with self._lock:
            return self._idle.wait_for(lambda: not self._unfinished, timeout)

    @property
    def size(self) -> int:
        return len(self._threads)


_pool = _Pool()


def _run(task: Task, args: tuple, kwargs: dict, task_id: str | None) -> None:
    close_old_connections()
    try:
        # ``apply`` runs the task here with its request context; a failure is logged by Celery's
        # tracer and kept in the (discarded) result, as a worker would.
        task.apply(args, kwargs, task_id=task_id)
    except Exception:  # its last word: the watchdog ends a reply its turn left unfinished
        log.exception("inprocess_task_crashed", task=task.name)
    finally:
        connections.close_all()


def task_submit(
    task: Task,
    args: tuple,
    kwargs: dict,
    *,
    task_id: str | None,
    countdown: float | None,
    fair_key: Hashable = None,
) -> None:
    """Queue one run of ``task`` in the lane of ``fair_key`` (the user it serves);
    ``countdown`` seconds from now if given (a soft compaction yielding to a running reply)."""

    def work() -> None:
        _run(task, args, kwargs, task_id)

    if countdown and countdown > 0:
        timer = threading.Timer(countdown, _pool.submit, args=(work, fair_key))
        timer.daemon = True
        timer.start()
    else:
        _pool.submit(work, fair_key)


def task_call(task: Task, args: tuple) -> Future:
    """Queue one run of ``task`` and hand back a future of its return value (or its error): for
    a caller that waits for the answer within a bound of its own (the web process's search,
    whose question is embedded here rather than in the request: docs/memory.md)."""
    future: Future = Future()

    def work() -> None:
        if not future.set_running_or_notify_cancel():
            return
        close_old_connections()
        try:
            future.set_result(task.apply(args).get(propagate=True))
        except Exception as exc:  # the caller's: it decides what a failure means
            future.set_exception(exc)
        finally:
            connections.close_all()

    _pool.submit(work)
    return future


def tasks_wait_idle(timeout: float = 30.0) -> bool:
    """Block until every queued task has run, and the work they left to run after the turns
    (``chat_platform.foreground``) too (tests, and a command that must see them done)."""
    deadline = time.monotonic() + timeout
    return _pool.wait_idle(timeout) and foreground.wait_drained(deadline - time.monotonic())


def pool_size() -> int:
    """Threads started so far (never more than ``EMBEDDED_TASK_THREADS``)."""
    return _pool.size


class InProcessTask(Task):
    """The app's task class: with ``TASKS_IN_PROCESS`` (embedded mode) a dispatch goes to the
    in-process pool; otherwise to the broker as always (or runs at once with Celery's
    ``task_always_eager``, which only tests set)."""

    def apply_async(
        self, args: Any = None, kwargs: Any = None, task_id: Any = None, **options: Any
    ):  # type: ignore[override]  # noqa: E501
        # ``fair_key``: the user the task serves, this pool's lane (a broker has no lanes).
        fair_key = options.pop("fair_key", None)
        if not getattr(settings, "TASKS_IN_PROCESS", False) or self.app.conf.task_always_eager:
            return super().apply_async(args, kwargs, task_id, **options)
        from celery.utils import uuid

        task_id = task_id or uuid()
        task_submit(
            self,
            tuple(args or ()),
            dict(kwargs or {}),
            task_id=task_id,
            countdown=options.get("countdown"),
            fair_key=fair_key,
        )
        return self.AsyncResult(task_id)


class InProcessBeat:
    """Embedded mode has no Celery beat: its web server runs the same schedule in a thread.

    Every entry of ``CELERY_BEAT_SCHEDULE`` (or ``schedule``), by task name, every ``schedule``
    seconds (shortest period first), the first time on the first round: the turns watchdog (a
    reply whose process died mid-turn ends within ``CHAT_HEARTBEAT_TIMEOUT_SECONDS`` of a
    restart), the sweeps of orphans,
    unsent attachments, context records and import jobs, and whatever is added to the schedule
    later, as beat does in real mode. The task body runs here, in this thread, one after the
    other; one that raises is logged and the others still run."""

    def __init__(self, *, interval: float, schedule: dict[str, dict[str, Any]] | None = None):
        self.interval = interval  # how often the schedule is looked at
        entries = settings.CELERY_BEAT_SCHEDULE if schedule is None else schedule
        # Shortest period first: the watchdog ends a dead reply before the orphan sweep looks
        # at the replies queued behind it.
        self.schedule = dict(sorted(entries.items(), key=lambda e: float(e[1]["schedule"])))
        self._stop = threading.Event()
        self.rounds = 0
        self.thread = threading.Thread(target=self._run, name="embedded-beat", daemon=True)

    def start(self) -> "InProcessBeat":
        self.thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.thread.join(timeout)

    def _run(self) -> None:
        due = dict.fromkeys(self.schedule, float("-inf"))
        while not self._stop.wait(self.interval):
            for name, entry in self.schedule.items():
                now = time.monotonic()
                if now < due[name]:
                    continue
                due[name] = now + float(entry["schedule"])
                self._run_entry(name, entry)
            self.rounds += 1

    @staticmethod
    def _run_entry(name: str, entry: dict[str, Any]) -> None:
        from chat_platform.celery_app import task_named

        close_old_connections()
        try:
            task_named(entry["task"])(*entry.get("args", ()), **entry.get("kwargs", {}))
        except Exception:  # the next round tries again; the failure is in the log
            log.exception("embedded_beat_failed", entry=name, task=entry["task"])
        finally:
            close_old_connections()


def start_embedded_beat() -> InProcessBeat:
    """Called from ``BotsConfig.ready()`` in an embedded-mode web server (never in real mode,
    where Celery beat runs the schedule, nor in commands and tests). The smallest period of the
    schedule is how often it looks (the watchdog's, ``CHAT_WATCHDOG_SECONDS``)."""
    periods = [float(e["schedule"]) for e in settings.CELERY_BEAT_SCHEDULE.values()]
    return InProcessBeat(interval=min([settings.CHAT_WATCHDOG_SECONDS, *periods])).start()
