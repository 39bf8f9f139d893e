"""uvicorn's main loop in a web process (chat_platform/serverloop.py): one tick a second, not
ten, and a stop still wakes it at once. Counted on a simulated clock, never timed."""

import asyncio
import signal
import threading

import pytest
import uvicorn
from uvicorn.server import Server

from chat_platform import serverloop


@pytest.fixture
def server():
    config = uvicorn.Config(app="chat_platform.asgi:application", log_level="warning")
    config.encoded_headers = []  # what Config.load() sets; on_tick's header refresh reads it
    return Server(config)


def _ticks_in(server, monkeypatch, seconds: float) -> list[float]:
    """Run ``server.main_loop`` over ``seconds`` of a simulated clock: every wait returns at
    once, its length counted; the waits it made, one per tick."""
    waits: list[float] = []
    # Only this thread's clock is simulated: another thread of the process (a test server's
    # own event loop) that sleeps meanwhile sleeps for real, and its waits are not counted.
    here = threading.get_ident()
    real_sleep, real_wait_for = asyncio.sleep, asyncio.wait_for

    async def sleep(delay, *args, **kwargs):
        if threading.get_ident() != here:
            return await real_sleep(delay, *args, **kwargs)
        waits.append(delay)

    async def wait_for(awaitable, timeout):
        if threading.get_ident() != here:
            return await real_wait_for(awaitable, timeout)
        awaitable.close()
        waits.append(timeout)
        raise TimeoutError

    monkeypatch.setattr(asyncio, "sleep", sleep)
    monkeypatch.setattr(asyncio, "wait_for", wait_for)
    real_on_tick = server.on_tick

    async def on_tick(counter):
        if sum(waits) >= seconds:
            server.should_exit = True
        return await real_on_tick(counter)

    monkeypatch.setattr(server, "on_tick", on_tick)
    asyncio.run(server.main_loop())
    return waits


def test_an_idle_web_process_wakes_once_a_second(server, monkeypatch):
    monkeypatch.setattr(Server, "main_loop", Server.main_loop)  # undone after the test
    monkeypatch.setattr(Server, "handle_exit", Server.handle_exit)
    assert serverloop.install()

    waits = _ticks_in(server, monkeypatch, seconds=5)

    # uvicorn's own loop: 50 waits of 0.1 s for the same 5 s
    assert waits == [1.0] * 5


def test_another_thread_s_sleeps_are_not_the_loop_s(server, monkeypatch):
    """A test server's event loop on another thread of the process sleeps meanwhile (the suite
    runs several): its waits were counted as the loop's, thousands of them on a loaded CI."""
    monkeypatch.setattr(Server, "main_loop", Server.main_loop)
    monkeypatch.setattr(Server, "handle_exit", Server.handle_exit)
    serverloop.install()
    slept, done = threading.Event(), threading.Event()

    async def other() -> None:
        while not done.is_set():
            await asyncio.sleep(0.01)
            slept.set()

    thread = threading.Thread(target=asyncio.run, args=(other(),), daemon=True)
    thread.start()
    real_on_tick = server.on_tick

    async def on_tick(counter):
        slept.clear()
        assert slept.wait(10)  # the other thread slept during this tick
        return await real_on_tick(counter)

    monkeypatch.setattr(server, "on_tick", on_tick)
    try:
        waits = _ticks_in(server, monkeypatch, seconds=3)
    finally:
        done.set()
        thread.join(10)

    assert waits == [1.0] * 3


def test_a_tick_still_does_uvicorn_s_once_a_second_work(server, monkeypatch):
    monkeypatch.setattr(Server, "main_loop", Server.main_loop)
    monkeypatch.setattr(Server, "handle_exit", Server.handle_exit)
    serverloop.install()
    counters = []
    real_on_tick = server.on_tick

    async def on_tick(counter):
        counters.append(counter)
        server.should_exit = len(counters) == 3
        return await real_on_tick(counter)

    monkeypatch.setattr(server, "on_tick", on_tick)
    monkeypatch.setattr(serverloop, "TICK_SECONDS", 0.001)
    asyncio.run(server.main_loop())

    assert counters == [0, 10, 20]  # each a multiple of uvicorn's ten ticks: the date header
    assert server.server_state.default_headers[0][0] == b"date"


def test_a_stop_wakes_the_loop_at_once(server, monkeypatch):
    monkeypatch.setattr(Server, "main_loop", Server.main_loop)
    monkeypatch.setattr(Server, "handle_exit", Server.handle_exit)
    serverloop.install()
    monkeypatch.setattr(serverloop, "TICK_SECONDS", 3600.0)

    async def run() -> None:
        asyncio.get_running_loop().call_later(0.01, server.handle_exit, signal.SIGTERM, None)
        # an hour's tick, ended by the signal handler's wake-up
        await asyncio.wait_for(server.main_loop(), 30)

    asyncio.run(run())

    assert server.should_exit


def test_a_termination_signal_wakes_the_loop_at_once(server, monkeypatch):
    """As in a server process: uvicorn binds its signal handlers before it loads the
    application (which installs the loop), so the loop puts the waking one in their place."""
    monkeypatch.setattr(Server, "main_loop", Server.main_loop)
    monkeypatch.setattr(Server, "handle_exit", Server.handle_exit)
    monkeypatch.setattr(serverloop, "TICK_SECONDS", 3600.0)

    async def run() -> None:
        with server.capture_signals():  # as Server.serve, before the application is loaded
            serverloop.install()
            asyncio.get_running_loop().call_later(0.01, signal.raise_signal, signal.SIGTERM)
            try:
                # an hour's tick, ended by the signal
                await asyncio.wait_for(server.main_loop(), 30)
            finally:
                server._captured_signals.clear()  # uvicorn would raise it again once out

    asyncio.run(run())

    assert server.should_exit
