"""Foreground work: what someone is waiting for, running in this process now (a turn's reply).

Counted so that background work which can wait (embedding the messages a turn wrote,
``memory.embed_after_turns``) runs after it rather than beside it on the process's core
(docs/performance.md "Turns first"). The count is the process's own: a worker process whose
turns are done embeds while its neighbour still streams.
"""

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_idle = threading.Condition()
_running = 0


@contextmanager
def foreground() -> Iterator[None]:
    """Count the block as foreground work of this process while it runs."""
    global _running
    with _idle:
        _running += 1
    try:
        yield
    finally:
        with _idle:
            _running -= 1
            if _running == 0:
                _idle.notify_all()


def running() -> int:
    """How many foreground blocks run in this process now."""
    return _running


def wait_idle(timeout: float) -> bool:
    """Wait until no foreground work runs in this process, ``timeout`` seconds at most; whether
    it is idle."""
    with _idle:
        return _idle.wait_for(lambda: _running == 0, timeout=max(timeout, 0.0))
