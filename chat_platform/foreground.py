"""Foreground work, and background work that waits for it (docs/performance.md "Turns first").

Foreground work is what someone is waiting for, running in this process now: a turn's reply
(``turns.turn.turn_run``). Work that can wait (embedding the messages a turn wrote:
``memory.embed_after_turns``) is handed to ``after_foreground`` and runs on one daemon thread of
the process, one piece at a time, oldest first, each once no foreground work runs here or once
it has waited its ``max_wait`` (a process that is never idle still does it, that late). It runs
beside the turns on the process's cores no more, and it holds no task thread while it waits: a
worker's threads (and embedded mode's few task threads) stay free for turns. The count is the
process's own: a worker process whose turns are done works while its neighbour still streams.

The queue is the process's memory: what is queued when the process stops is not done (its
owner says how that loses nothing). A worker's warm shutdown stops the thread (``stop``);
``chat_platform.inprocess.tasks_wait_idle`` waits for it to be drained too. When the interpreter
exits, the piece being done is waited for (``EXIT_WAIT_SECONDS`` at most; the embedding stops
between batches once ``stopping``): the thread is a daemon, and a piece left running in ONNX
Runtime's native code while the interpreter tore its modules down ended the process with a
segfault or an abort (exit 139 or 134) after its work was done.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager

import structlog
from django.db import connections

log = structlog.get_logger(__name__)

_cond = threading.Condition()
_running = 0
# key -> (monotonic time it is due at the latest, work); insertion order is the order of work
_queue: dict[Hashable, tuple[float, Callable[[], None]]] = {}
_busy = False  # the thread is doing a piece of work now
_thread: threading.Thread | None = None
_stopping = False
# How long an exiting interpreter waits for the piece of work being done (an embedding batch).
EXIT_WAIT_SECONDS = 10.0


@contextmanager
def foreground() -> Iterator[None]:
    """Count the block as foreground work of this process while it runs."""
    global _running
    with _cond:
        _running += 1
    try:
        yield
    finally:
        with _cond:
            _running -= 1
            if _running == 0:
                _cond.notify_all()


def running() -> int:
    """How many foreground blocks run in this process now."""
    return _running


def after_foreground(key: Hashable, work: Callable[[], None], *, max_wait: float) -> None:
    """Run ``work`` on the process's background thread once no foreground work runs here, or
    ``max_wait`` seconds from now at the latest. A ``key`` still queued keeps its place and its
    first work (that work reads what was queued since: see ``memory.embed_after_turns``)."""
    global _thread
    with _cond:
        if _stopping:
            return
        if key not in _queue:
            _queue[key] = (time.monotonic() + max_wait, work)
        if _thread is None:
            _thread = threading.Thread(target=_run, name="after-foreground", daemon=True)
            _thread.start()
        _cond.notify_all()


def wait_drained(timeout: float) -> bool:
    """Wait until nothing is queued or being done (``timeout`` seconds at most); whether so."""
    with _cond:
        return _cond.wait_for(lambda: not _queue and not _busy, timeout=max(timeout, 0.0))


def queued() -> int:
    """Pieces of work queued in this process (tests, the bench)."""
    return len(_queue)


def stop() -> None:
    """The process is stopping: nothing more is started (what is queued stays undone)."""
    global _stopping
    with _cond:
        _stopping = True
        _cond.notify_all()


def stopping() -> bool:
    """Whether the process is stopping (``stop``): a long piece of work ends at its next step
    (the embedding, between batches: ``memory.embeddings``)."""
    return _stopping


def exit_wait() -> bool:
    """The interpreter is exiting (``atexit``): start nothing more, and let the piece being
    done end first (``EXIT_WAIT_SECONDS`` at most); whether it did."""
    stop()
    with _cond:
        return _cond.wait_for(lambda: not _busy, timeout=EXIT_WAIT_SECONDS)


atexit.register(exit_wait)


def _next() -> tuple[Hashable, Callable[[], None]] | None:
    """The next piece of work (its key, the work) once it may run (caller holds ``_cond``);
    None: stop."""
    while not _stopping:
        if not _queue:
            _cond.wait()
            continue
        key, (due, work) = next(iter(_queue.items()))
        left = due - time.monotonic()
        if _running == 0 or left <= 0:
            del _queue[key]
            return key, work
        _cond.wait(left)  # woken when the foreground ends or work arrives
    return None


def _after_fork_in_child() -> None:
    """A forked child (a prefork worker's) has only the forking thread: it starts with no
    background thread, nothing queued and no turn of its parent's, and a lock nobody holds."""
    global _cond, _running, _busy, _thread, _stopping
    _cond = threading.Condition()
    _running, _busy, _thread, _stopping = 0, False, None, False
    _queue.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _run() -> None:
    global _busy, _thread
    while True:
        with _cond:
            piece = _next()
            if piece is None:
                _thread = None
                _cond.notify_all()
                return
            _busy = True
        key, work = piece
        try:
            work()
        except Exception:  # one piece's failure is its own; the next still runs
            log.exception("after_foreground_work_failed", key=repr(key))
        finally:
            connections.close_all()  # the thread holds no database connection while it waits
            with _cond:
                _busy = False
                _cond.notify_all()
