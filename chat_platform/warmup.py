"""Warm the model gateway when a process that serves turns starts, off the request path.

litellm costs seconds to import; paid lazily, the first reply after a start sat in "Thinking…"
for 3–6 s. Processes that will need it pay it at start instead, in a daemon thread so start-up
itself is not delayed: the Celery worker (``chat_platform/celery_app.py``) and the ASGI server
(``bots/apps.py``), in both modes: embedded mode runs turns inside it, and in real mode every
send's fit check reads the model's window from litellm's model map (unwarmed, the first send of
each web process paid the import: seconds before its answer).
A call that arrives while the import is still running waits on the gateway's import lock rather
than importing twice.

Management commands (``migrate``, ``seed_demo``…), shells and tests never warm: they do not serve
turns, and an import in the background would only slow them down.
"""

from __future__ import annotations

import contextlib
import gc
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import PurePath

import structlog

log = structlog.get_logger(__name__)

# Programs that serve chat_platform.asgi (uvicorn as in the Makefile / docker-compose; daphne,
# gunicorn with uvicorn workers, hypercorn).
ASGI_SERVERS = frozenset({"uvicorn", "daphne", "gunicorn", "hypercorn"})


def _program(argv: Sequence[str]) -> str:
    """``uvicorn`` for ``/…/bin/uvicorn`` and for ``python -m uvicorn`` (argv[0] is then
    ``…/uvicorn/__main__.py``)."""
    if not argv:
        return ""
    path = PurePath(argv[0])
    if path.name == "__main__.py":
        return path.parent.name
    return path.stem


def is_web_server(argv: Sequence[str], environ: Mapping[str, str]) -> bool:
    """Is this process an ASGI server (or ``runserver``'s serving child, not its reloader)?"""
    if _program(argv) in ASGI_SERVERS:
        return True
    if len(argv) > 1 and argv[1] == "runserver":
        return environ.get("RUN_MAIN") == "true" or "--noreload" in argv
    return False


def warm_in_background(reason: str, *, then: Callable[[], None] | None = None) -> threading.Thread:
    """Start importing litellm (and registering the builtin provider) in a daemon thread;
    ``then`` runs after it, in the same thread."""

    def run() -> None:
        from chat_platform.llm import gateway

        try:
            gateway.warm_up()
        except Exception:  # a broken install shows on the first call, with its real error
            log.exception("gateway_warm_up_failed", reason=reason)
            return
        log.info("gateway_warmed_up", reason=reason)
        if then is not None:
            try:
                then()
            except Exception:  # the first turn pays what is left, as it did before
                log.exception("first_turn_warm_up_failed", reason=reason)
        freeze_start_up_objects()

    thread = threading.Thread(target=run, name="gateway-warm-up", daemon=True)
    thread.start()
    return thread


def warm_web_process(
    *, argv: Sequence[str], environ: Mapping[str, str] | None = None
) -> threading.Thread | None:
    """Called from ``BotsConfig.ready()``: warm a web server, never a command or a test."""
    if not is_web_server(argv, os.environ if environ is None else environ):
        return None
    return warm_in_background("web", then=warm_first_turn)


def warm_first_turn() -> None:
    """What a web process's first turn paid once, paid after litellm's import in the warm-up
    thread (docs/performance.md, "A turn's CPU, fourth pass"): the task modules' discovery that
    the first dispatch ran (with Django's system checks), the URLconf and its views, and the
    default token encoding (tiktoken). Each is what the first request would have done, in the
    same way; litellm is already imported, so no lock is held while it is."""
    from django.urls import Resolver404, resolve

    from chat_platform.celery_app import tasks_discover
    from chat_platform.llm.tokens import count_tokens

    tasks_discover()
    with contextlib.suppress(Resolver404):
        resolve("/api/v1/sessions/0/messages/")
    count_tokens("warm")
    log.info("first_turn_warmed_up")


def warm_worker_first_turn() -> None:
    """What a worker process's first turn paid once: the default token encoding (tiktoken's
    tables, ~130 ms of CPU with the GIL held, so every turn thread of the process stood still
    while one of the first turns of a burst loaded it: docs/performance.md "A delta lost in a
    burst"). Paid after litellm's import, in the warm-up thread, and frozen with the rest."""
    from chat_platform.llm.tokens import count_tokens

    count_tokens("warm")


def freeze_start_up_objects() -> None:
    """After the warm-up, what the process has built (modules, classes, litellm's tables: about
    500,000 objects) lives as long as the process, and the cyclic garbage collector's full passes
    walked all of it: 150–180 ms each with the GIL held, so every thread of the process stood
    still; twice in a 100-step tool task's reply, 578–670 ms in all (docs/performance.md
    "Start-up objects frozen"). Frozen (``gc.freeze``), a full pass walks only what came after.
    A frozen object that becomes cyclic garbage later is never freed: a few, at start-up's size."""
    gc.collect()
    gc.freeze()
    log.info("start_up_objects_frozen", objects=gc.get_freeze_count())
