"""uvicorn's main loop, woken once a second rather than ten times (docs/performance.md "A turn's
CPU and latency, seventh pass (web)").

uvicorn's ``Server.main_loop`` sleeps 0.1 s between ticks, for ever, in every web process: an
idle web process spent ~1 ms of CPU a second waking up to find nothing to do. What a tick does
is needed once a second (the ``date`` header, the ``--limit-max-requests`` check, a process
manager's notify callback); the only thing it polls faster is ``should_exit``, which uvicorn
sets from its signal handler. So the loop here ticks once a second and the signal handler wakes
it at once: a stop is as quick as before. Installed when the process is an ASGI server
(``chat_platform.asgi``), before uvicorn reaches its main loop (it loads the application
first); a uvicorn whose server lacks the methods replaced is left as it is.
"""

import asyncio
import contextlib
import signal
import threading
from types import FrameType
from typing import Any

# Seconds between the loop's ticks (uvicorn's: 0.1).
TICK_SECONDS = 1.0
# uvicorn's own tick count for a second: ``on_tick`` does its once-a-second work when the count
# is a multiple of it.
_UVICORN_TICKS_A_SECOND = 10
_COUNTER_WRAP = 864000
# The signals uvicorn's server stops on (``uvicorn.server.HANDLED_SIGNALS``).
_HANDLED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


async def main_loop(self: Any) -> None:
    """``uvicorn.Server.main_loop``, one tick a second, woken at once by ``handle_exit``."""
    self._chat_wake = asyncio.Event()
    self._chat_loop = asyncio.get_running_loop()
    _signals_wake(self)
    counter = 0
    should_exit = await self.on_tick(counter)
    while not should_exit:
        counter = (counter + _UVICORN_TICKS_A_SECOND) % _COUNTER_WRAP
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._chat_wake.wait(), TICK_SECONDS)
        should_exit = await self.on_tick(counter)


def _signals_wake(server: Any) -> None:
    """uvicorn set its signal handlers (``capture_signals``) before it loaded the application,
    so they are its own ``handle_exit``, bound then: the same server's, bound now (the one that
    wakes the loop), in their place. ``capture_signals`` still restores what was there before it."""
    if threading.current_thread() is not threading.main_thread():
        return  # uvicorn listens to no signal off the main thread either
    for sig in _HANDLED_SIGNALS:
        handler = signal.getsignal(sig)
        if getattr(handler, "__self__", None) is server and handler != server.handle_exit:
            signal.signal(sig, server.handle_exit)


def _handle_exit(original: Any) -> Any:
    def handle_exit(self: Any, sig: int, frame: FrameType | None) -> None:
        original(self, sig, frame)
        loop, wake = getattr(self, "_chat_loop", None), getattr(self, "_chat_wake", None)
        if loop is not None and wake is not None and not loop.is_closed():
            loop.call_soon_threadsafe(wake.set)

    handle_exit.__wrapped__ = original  # type: ignore[attr-defined]
    return handle_exit


def install() -> bool:
    """Replace uvicorn's main loop in this process (once); whether it is replaced."""
    try:
        from uvicorn.server import Server
    except ImportError:
        return False
    if Server.main_loop is main_loop:
        return True
    if not all(callable(getattr(Server, name, None)) for name in ("on_tick", "handle_exit")):
        return False
    Server.handle_exit = _handle_exit(Server.handle_exit)  # type: ignore[method-assign]
    Server.main_loop = main_loop  # type: ignore[method-assign]
    return True
