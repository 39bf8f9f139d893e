"""A caller's Stop for the unstreamed calls made on its behalf (a chat turn's blocking
compaction: the summariser's call before the reply's own).

A stream is stopped by closing it (``ChatStream.close``). An unstreamed call through litellm
cannot be cut from another thread, so under ``stop_on(event)`` ``complete`` makes it on a thread
of its own and stops waiting once ``event`` is set: it fails at once with ``CallStopped`` (the
reason "stopped", never retried), and the abandoned request runs on to its own timeout, its
answer thrown away. Without a stop event, a call is made in the caller's thread as before.
"""

from __future__ import annotations

import contextvars
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

T = TypeVar("T")

# How often a stopped caller's wait looks at its event (the watcher sets it within its own
# period, ``turns.liveness.CHECKPOINT_SECONDS``).
POLL_SECONDS = 0.05

_stop: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "gateway_stop", default=None
)


class CallStopped(Exception):
    """The caller stopped while its call was on its way."""

    def __str__(self) -> str:
        return "stopped"


@contextmanager
def stop_on(event: threading.Event) -> Iterator[None]:
    """The unstreamed calls of this block stop waiting once ``event`` is set."""
    token = _stop.set(event)
    try:
        yield
    finally:
        _stop.reset(token)


def stop_requested() -> bool:
    """Whether this caller's stop event is set (a compaction then starts nothing more)."""
    event = _stop.get()
    return event is not None and event.is_set()


def stoppable(call: Callable[[], T]) -> T:
    """``call()``, or ``CallStopped`` as soon as the caller's stop event is set."""
    event = _stop.get()
    if event is None:
        return call()
    if event.is_set():
        raise CallStopped
    results: list[T] = []
    errors: list[BaseException] = []
    done = threading.Event()
    context = contextvars.copy_context()  # the outbound policy and log context go along

    def run() -> None:
        try:
            results.append(context.run(call))
        except BaseException as exc:  # handed to the caller's thread, which raises it
            errors.append(exc)
        finally:
            done.set()

    threading.Thread(target=run, name="gateway-call", daemon=True).start()
    while not done.wait(POLL_SECONDS):
        if event.is_set():
            raise CallStopped
    if errors:
        raise errors[0]
    return results[0]
