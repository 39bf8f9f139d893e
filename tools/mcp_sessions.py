"""One reply's MCP sessions: at most one open per tool server, reused by every round and every
parallel call of that reply, closed when the reply ends (docs/tools.md, "The tool loop").

Opening a session (the transport, the SDK's discovery or handshake, its tool listing) cost
37–48 ms of a 63 ms call; the same call in an open session took 3.7 ms (docs/performance.md,
"The tool task"). So a reply's ``ToolSessions`` keeps each server's ``mcp.client.Client`` (the
SDK's ``ClientSession`` under it, which matches responses to requests by id, so the calls of one
round share the session and still run concurrently) open on one event loop, in one helper
thread, until ``close()``. The outbound rules are ``tools.mcp_client``'s, unchanged: each
session is that module's client.

* **Each call keeps its deadline** (``anyio.fail_after``), opening included, and the session
  has none of its own: its SDK client and HTTP client are made without a read timeout
  (``mcp_client(endpoint, None)``). A session made with the deadline of the call that opened
  it kept that deadline for every later call: after a call timed out at 0.5 s, the next one
  (5 s) had 0.5 s for each of its requests, and failed when one took longer (a loaded
  machine; a tool that answers in 1 s). A call that times out or is stopped leaves the
  session usable (the SDK aborts that request's HTTP exchange), but it is **retired**: the
  next call opens a new session, and the retired one closes as soon as no call runs on it.
  What an abandoned request leaves on a session is then never the next call's problem: on the
  older protocols the SDK posts the cancellation inline, ahead of every later message, and a
  server that holds that post would otherwise hold every later call of the reply. A timeout or
  a stop costs the next call one opening (about 40 ms).
* **A broken session is reopened once.** When a call on a session opened earlier finds it closed
  (the SDK's ``CONNECTION_CLOSED``: the server went away or restarted) or the server cannot be
  reached, the session is dropped and the call is made once more on a new one; that failing,
  the call fails with its reason. A session that cannot be opened is not kept: the next call
  tries again.
* **Nothing outlives ``close()``**: the sessions are closed (each within ``CLOSE_GRACE_SECONDS``,
  then cancelled), their HTTP clients too, and the helper thread ends.
"""

from __future__ import annotations

import concurrent.futures
import math
import time
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import httpx2
import structlog
from anyio.abc import TaskGroup, TaskStatus
from anyio.from_thread import BlockingPortal, start_blocking_portal

if TYPE_CHECKING:  # the SDK is imported where a round uses it (tools.mcp_client)
    from mcp.client import Client

from tools.mcp_client import (
    STOP_POLL_SECONDS,
    STOPPED,
    Call,
    CallOutcome,
    Endpoint,
    failure_reason,
    mcp_client,
    result_text,
)

log = structlog.get_logger(__name__)

# How long closing a session may take before it is cancelled.
CLOSE_GRACE_SECONDS = 2.0
# Failures after which a session opened earlier is dropped and the call made once more: the
# server could not be reached, or the session was closed (the server went away, or restarted).
_UNDELIVERED = (httpx2.ConnectError, anyio.ClosedResourceError, anyio.BrokenResourceError)

_Key = tuple[str, str, str, tuple[tuple[str, str], ...]]


def _key(endpoint: Endpoint) -> _Key:
    headers = tuple(sorted(endpoint.headers.items()))
    return (endpoint.name, endpoint.url, endpoint.transport, headers)


@dataclass
class _Held:
    """One open session and the event that closes it."""

    client: Client
    closing: anyio.Event
    alive: bool = True  # given to new calls
    calls: int = 0  # calls running on it

    def retire(self) -> None:
        """Given to no new call; closed once the calls running on it end."""
        self.alive = False
        if not self.calls:
            self.closing.set()


@dataclass
class _Loop:
    portal: BlockingPortal
    stop_portal: Any  # the portal's context manager
    closing: anyio.Event
    main: concurrent.futures.Future[None]


class ToolSessions:
    """A reply's sessions to its tool servers (see the module's doc). Not thread-safe: one
    reply's thread calls ``run`` and ``close``."""

    def __init__(self) -> None:
        self._loop: _Loop | None = None
        self._group: TaskGroup | None = None
        self._held: dict[_Key, _Held] = {}
        self._locks: dict[_Key, anyio.Lock] = {}
        self.opened = 0  # sessions opened so far
        self.closed = False
        self.http_clients: list[httpx2.AsyncClient] = []  # every HTTP client made (all closed)

    def __enter__(self) -> ToolSessions:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _started(self) -> _Loop:
        if self._loop is not None:
            return self._loop
        if self.closed:
            raise RuntimeError("the reply's tool sessions are closed")
        stop_portal = start_blocking_portal(name="tool-sessions")
        portal = stop_portal.__enter__()
        main, (self._group, closing) = portal.start_task(self._main)
        self._loop = _Loop(portal, stop_portal, closing, main)
        return self._loop

    async def _main(self, *, task_status: TaskStatus[tuple[TaskGroup, anyio.Event]]) -> None:
        """The sessions' task group: open until ``close()``, then each session gets
        ``CLOSE_GRACE_SECONDS`` to close before it is cancelled."""
        closing = anyio.Event()
        async with anyio.create_task_group() as group:
            task_status.started((group, closing))
            await closing.wait()
            for held in list(self._held.values()):
                held.closing.set()
            group.cancel_scope.deadline = anyio.current_time() + CLOSE_GRACE_SECONDS

    async def _hold(
        self, endpoint: Endpoint, timeout: float, *, task_status: TaskStatus[_Held]
    ) -> None:
        """Open a session, hand it over, keep it open until it is told to close (or breaks).
        ``timeout`` bounds the opening only; each call bounds itself (the module's doc)."""
        client, http = mcp_client(endpoint, None)
        if http is not None:
            self.http_clients.append(http)
        held: _Held | None = None
        try:
            # The opening's deadline, lifted once open, then the closing's (a scope around the
            # whole session: the SDK's task groups must close inside it).
            with anyio.CancelScope(deadline=anyio.current_time() + timeout) as bound:
                async with AsyncExitStack() as stack:
                    if http is not None:
                        await stack.enter_async_context(http)
                    await stack.enter_async_context(client)
                    bound.deadline = math.inf
                    self.opened += 1
                    held = _Held(client=client, closing=anyio.Event())
                    task_status.started(held)
                    await held.closing.wait()
                    bound.deadline = anyio.current_time() + CLOSE_GRACE_SECONDS
            if held is None:
                raise TimeoutError
        except Exception as exc:
            if held is None:
                raise  # to the caller that asked for the session
            log.info(
                "tool_session_broke",
                server=endpoint.name,
                reason=failure_reason(exc, endpoint=endpoint, timeout=timeout),
            )
        finally:
            if held is not None:
                held.alive = False
                if self._held.get(_key(endpoint)) is held:
                    del self._held[_key(endpoint)]

    async def _session(self, endpoint: Endpoint, timeout: float) -> tuple[_Held, bool]:
        """The server's open session, opened if there is none; and whether it was just opened."""
        assert self._group is not None
        key = _key(endpoint)
        lock = self._locks.setdefault(key, anyio.Lock())
        async with lock:  # the parallel calls of a round open one session, not one each
            held = self._held.get(key)
            if held is not None and held.alive:
                return held, False
            held = await self._group.start(self._hold, endpoint, timeout)
            self._held[key] = held
            return held, True

    async def _call(self, call: Call, timeout: float) -> CallOutcome:
        started = time.monotonic()
        try:
            with anyio.fail_after(timeout):
                result = await self._call_reopening(call, timeout)
        except Exception as exc:
            reason = failure_reason(exc, endpoint=call.endpoint, timeout=timeout)
            return CallOutcome(ok=False, text=reason, seconds=time.monotonic() - started)
        text = result_text(result)
        if result.is_error:
            text = text or "the tool reported an error"
        return CallOutcome(ok=not result.is_error, text=text, seconds=time.monotonic() - started)

    async def _call_reopening(self, call: Call, timeout: float) -> Any:
        held, fresh = await self._session(call.endpoint, timeout)
        try:
            return await self._call_on(held, call)
        except Exception as exc:
            if fresh or not _session_broken(exc):
                raise
            log.info("tool_session_reopened", server=call.endpoint.name)
            held.retire()
        held, _ = await self._session(call.endpoint, timeout)
        return await self._call_on(held, call)

    async def _call_on(self, held: _Held, call: Call) -> Any:
        """The call on ``held``; cancelled (its deadline, a stop), it retires the session."""
        held.calls += 1
        try:
            return await held.client.call_tool(call.tool, call.arguments)
        except anyio.get_cancelled_exc_class():
            if held.alive:
                log.info("tool_session_retired", server=call.endpoint.name)
            held.retire()
            raise
        finally:
            held.calls -= 1
            if not held.alive and not held.calls:
                held.closing.set()

    def run(
        self,
        calls: list[Call],
        *,
        timeout: float,
        should_stop: Any = None,
        on_finished: Any = None,
    ) -> list[CallOutcome]:
        """Run one round's calls concurrently on the reply's sessions, each within ``timeout``
        seconds. A call that fails is an outcome with ``ok=False`` and its reason, never an
        exception. This thread waits, calls ``on_finished(index, outcome)`` as each call ends
        (so database writes and frames stay on the caller's thread), and asks ``should_stop``
        whenever nothing ended for ``STOP_POLL_SECONDS``: once it is true, the calls still
        running are cancelled and end as ``STOPPED`` (their sessions stay open)."""
        if not calls:
            return []
        loop = self._started()
        index_of = {
            loop.portal.start_task_soon(self._call, call, timeout): index
            for index, call in enumerate(calls)
        }
        outcomes: list[CallOutcome | None] = [None] * len(calls)

        def ended(future: concurrent.futures.Future[CallOutcome]) -> None:
            outcome = CallOutcome(ok=False, text=STOPPED)
            if not future.cancelled() and future.exception() is None:
                outcome = future.result()
            outcomes[index_of[future]] = outcome
            if on_finished is not None:
                on_finished(index_of[future], outcome)

        pending = set(index_of)
        while pending:
            done, pending = concurrent.futures.wait(
                pending, timeout=STOP_POLL_SECONDS, return_when=concurrent.futures.FIRST_COMPLETED
            )
            for future in sorted(done, key=index_of.__getitem__):
                ended(future)
            if not done and should_stop is not None and should_stop():
                break
        for future in pending:
            future.cancel()
        concurrent.futures.wait(pending, timeout=10)
        for future in sorted(pending, key=index_of.__getitem__):
            ended(future)
        return [o for o in outcomes if o is not None]

    def close(self) -> None:
        """Close every session, their HTTP clients and the helper thread. Idempotent."""
        self.closed = True
        loop, self._loop = self._loop, None
        if loop is None:
            return
        try:
            loop.portal.call(loop.closing.set)
            loop.main.result(timeout=CLOSE_GRACE_SECONDS + 5)
        except Exception as exc:  # the thread still ends below
            log.warning("tool_sessions_close_failed", error=repr(exc))
        finally:
            loop.stop_portal.__exit__(None, None, None)


def _session_broken(exc: BaseException) -> bool:
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    leaf = _leaf(exc)
    if isinstance(leaf, MCPError):
        return leaf.code == CONNECTION_CLOSED
    return isinstance(leaf, _UNDELIVERED)


def _leaf(exc: BaseException) -> BaseException:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def tool_calls_run(
    calls: list[Call],
    *,
    timeout: float,
    should_stop: Any = None,
    on_finished: Any = None,
) -> list[CallOutcome]:
    """One round on sessions of its own (opened for it, closed after it): ``ToolSessions.run``."""
    with ToolSessions() as sessions:
        return sessions.run(
            calls, timeout=timeout, should_stop=should_stop, on_finished=on_finished
        )
