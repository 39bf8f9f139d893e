"""One watcher per process for every turn it runs: heartbeats and stop requests.

A worker process streams many turns at once (a thread each). Rather than a thread and a database
connection per turn, one ``TurnWatcher`` thread serves them all with one connection: every
``CHECKPOINT_SECONDS`` one query finds the turns whose user pressed stop (their provider streams
are closed at once, which also ends a stream that is silent), and every
``CHAT_HEARTBEAT_SECONDS`` one ``UPDATE`` stamps ``heartbeat_at`` on all of them, so the watchdog
can tell a live turn, however slow its provider, from one whose worker died.

The thread starts with the first turn and ends (closing its connection) once the process has
had no turn for a few seconds.
"""

import threading
import time
from typing import Any

import structlog
from django.conf import settings
from django.db import connection

from bots.models import Message
from bots.queries import replies_watched
from bots.transitions import replies_heartbeat, reply_checkpoint
from chat_platform.llm import gateway

log = structlog.get_logger(__name__)

CHECKPOINT_SECONDS = 0.5
# An idle watcher lets go of its thread and connection after this long without turns.
IDLE_EXIT_SECONDS = 5.0


class TurnHandle:
    """What the watcher knows of one running turn: whether it was stopped, and its stream."""

    def __init__(self, message_id: int) -> None:
        self.message_id = message_id
        self.stopped = threading.Event()
        self._stream: gateway.ChatStream | None = None
        self._lock = threading.Lock()
        # The turn's state (its ``text``) while text arrived since its last checkpoint: a
        # stream that stalls sends no further delta to checkpoint on, so the watcher saves it.
        self.unsaved: Any = None
        self.unsaved_since = 0.0

    def text_arrived(self, state: Any) -> None:
        """The turn's relay, on every delta: ``state.text`` has text not yet checkpointed."""
        if self.unsaved is None:
            self.unsaved_since = time.monotonic()
            self.unsaved = state

    def stalled(self, *, now: float) -> bool:
        """Text has waited two checkpoint periods: the turn checkpoints on the next delta after
        each period, so no delta came (the stream stalls), and the watcher saves it."""
        return self.unsaved is not None and now - self.unsaved_since >= 2 * CHECKPOINT_SECONDS

    def save_unsaved(self) -> None:
        """Save the partial text the turn has not checkpointed yet (the watcher's, once a tick;
        only a streaming reply is written, so a finished one is never overwritten)."""
        state, self.unsaved = self.unsaved, None
        if state is not None:
            reply_checkpoint(message_id=self.message_id, content=state.text)

    def attach(self, stream: gateway.ChatStream) -> None:
        """The turn's current provider stream; closed at once if a stop already came in."""
        with self._lock:
            self._stream = stream
            stopped = self.stopped.is_set()
        if stopped:
            stream.close()

    def stop(self) -> None:
        with self._lock:
            if self.stopped.is_set():
                return
            self.stopped.set()
            stream = self._stream
        if stream is not None:
            stream.close()


class TurnWatcher:
    def __init__(self) -> None:
        self._turns: dict[int, TurnHandle] = {}
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def register(self, message_id: int) -> TurnHandle:
        handle = TurnHandle(message_id)
        with self._lock:
            self._turns[message_id] = handle
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="turn-watcher", daemon=True)
                self._thread.start()
        return handle

    def unregister(self, handle: TurnHandle) -> None:
        with self._lock:
            if self._turns.get(handle.message_id) is handle:
                del self._turns[handle.message_id]

    def active(self) -> list[int]:
        with self._lock:
            return list(self._turns)

    def _run(self) -> None:
        last_beat = time.monotonic()
        idle_since: float | None = None
        seen: set[int] = set()  # the registered replies a check has found
        try:
            while True:
                time.sleep(CHECKPOINT_SECONDS)
                went_idle = False
                with self._lock:
                    handles = dict(self._turns)
                    if not handles:
                        went_idle = idle_since is None
                        idle_since = idle_since or time.monotonic()
                        if time.monotonic() - idle_since >= IDLE_EXIT_SECONDS:
                            self._thread = None
                            return
                if not handles:
                    if went_idle:
                        connection.close()  # no turn to watch: no connection held while none runs
                    continue
                idle_since = None
                try:
                    if time.monotonic() - last_beat >= settings.CHAT_HEARTBEAT_SECONDS:
                        last_beat = time.monotonic()
                        replies_heartbeat(message_ids=list(handles))
                    # A reply asked to stop, ended by the sweep (``interrupted``: a provider
                    # that kept the connection open and sent nothing held the thread after its
                    # reply had ended), or deleted with its chat since a check saw it: its
                    # provider call is cut (a deleted chat's reply would be paid for and thrown
                    # away). A row no check has seen yet (not yet committed) is left.
                    rows = {
                        pk: stop or status == Message.Status.INTERRUPTED
                        for pk, stop, status in replies_watched(list(handles))
                    }
                    for message_id, handle in handles.items():
                        if rows.get(message_id) or (message_id not in rows and message_id in seen):
                            handle.stop()
                        elif handle.stalled(now=time.monotonic()):
                            handle.save_unsaved()
                    seen = (seen & handles.keys()) | rows.keys()
                except Exception:  # the database blinked: try again next tick
                    log.warning("turn_watcher_db_error", turns=len(handles), exc_info=True)
                    connection.close()
        finally:
            connection.close()


# The process's watcher (threads of one process share it; a forked child starts its own).
watcher = TurnWatcher()
