"""structlog configuration: JSON lines in real mode, readable console lines in embedded mode.

One configuration for every process: the web server (through settings), the Celery worker and
beat (``chat_platform/celery_app.py`` stops Celery from installing its own handlers). In JSON
mode each event is one line; a traceback (``log.exception``, ``exc_info=``, and stdlib loggers
such as Django's request logger) is rendered into the string field ``exception``. So is an
exception nothing caught, in the main thread or another: Python would print it as raw lines
(celery beat, stopped mid-tick, raises from its closed schedule file on the way out).
"""

import logging
import logging.config
import signal
import sys
import threading
import warnings
from typing import Any

import structlog

from chat_platform import redaction


def quiet_known_warnings() -> None:
    """Django warns once per static file that WhiteNoise (synchronous) serves under ASGI: ~60
    identical lines per page load that drowned the log (docs/operations.md, "Logs, shutdown and
    workers"). Django reads such a body in a thread; nothing is wrong."""
    warnings.filterwarnings(
        "ignore", message="StreamingHttpResponse must consume synchronous iterators"
    )


def configure_logging(*, level: str, json: bool) -> None:  # noqa: A002 - mirrors the setting name
    shared: list[Any] = [
        structlog.contextvars.merge_contextvars,
        structlog.stdlib.add_log_level,
        structlog.stdlib.add_logger_name,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    # The console renderer prints exc_info itself (readably); JSON needs it turned into text
    # first, or it is rendered as "<traceback object at 0x…>".
    renderer: list[Any] = (
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()]
        if json
        # A plain traceback, never rich's default one: that prints every frame's local
        # variables, which hold whatever the code was handling (an API key being checked, a
        # provider key, a password).
        else [
            structlog.dev.ConsoleRenderer(
                colors=False, exception_formatter=structlog.dev.plain_traceback
            )
        ]
    )
    logging.config.dictConfig(
        {
            "version": 1,
            "disable_existing_loggers": False,
            "formatters": {
                "structlog": {
                    "()": structlog.stdlib.ProcessorFormatter,
                    "processors": [
                        structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                        *renderer,
                        _redact_line,
                    ],
                    "foreign_pre_chain": shared,
                }
            },
            "handlers": {"default": {"class": "logging.StreamHandler", "formatter": "structlog"}},
            "root": {"handlers": ["default"], "level": level},
            "loggers": {
                "LiteLLM": {"level": "WARNING"},
                "httpx": {"level": "WARNING"},
                "daphne": {"level": "WARNING"},
            },
        }
    )
    # warnings.warn() output becomes a log event (logger "py.warnings") instead of a raw line.
    logging.captureWarnings(json)
    quiet_known_warnings()
    if json:
        sys.excepthook = _log_uncaught
        threading.excepthook = _log_uncaught_in_thread
        sys.unraisablehook = _log_unraisable
    structlog.configure(
        processors=[*shared, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=True,
    )


def _redact_line(logger: Any, method: str, line: Any) -> Any:
    """The rendered line, every configured secret masked (``chat_platform.redaction``): a
    provider's echoed key in an error, a traceback or a third-party logger's message."""
    return redaction.redact(line) if isinstance(line, str) else line


def _log_uncaught(kind: type[BaseException], value: BaseException, traceback: Any) -> None:
    if issubclass(kind, KeyboardInterrupt):
        sys.__excepthook__(kind, value, traceback)
        return
    structlog.get_logger("uncaught").critical(
        "uncaught_exception", exc_info=(kind, value, traceback)
    )


def _log_unraisable(unraisable: Any) -> None:
    """An exception Python could not raise (a finaliser's, often while a process stops): one
    JSON line like every other, not raw text on stderr (a stopping beat printed "Exception
    ignored in: <function WeakSet…>")."""
    try:
        structlog.get_logger("uncaught").error(
            "unraisable_exception",
            message=unraisable.err_msg or "Exception ignored in",
            object=repr(unraisable.object),
            exc_info=(unraisable.exc_type, unraisable.exc_value, unraisable.exc_traceback),
        )
    except Exception:  # logging itself is gone (interpreter shutdown): Python's own words
        sys.__unraisablehook__(unraisable)
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, SystemExit):
        _stop_again()


def _stop_again() -> None:
    """A SystemExit Python could not raise is a stop signal lost: celery beat's SIGTERM handler
    raises it, and when the signal lands inside a weakref callback Python reports it here and
    the process runs on (``make beat`` never stopped). Deliver SIGTERM again a moment later,
    once this hook has returned, so that its handler runs in the main thread's own code (should
    it land in a callback again, it comes back here and is delivered once more)."""
    if callable(signal.getsignal(signal.SIGTERM)):
        # To the main thread itself: a blocked sleep there (beat's tick) wakes to run it.
        main = threading.main_thread().ident
        again = threading.Timer(0.05, signal.pthread_kill, args=(main, signal.SIGTERM))
        again.daemon = True
        again.start()


def _log_uncaught_in_thread(args: threading.ExceptHookArgs) -> None:
    if args.exc_type is SystemExit or args.exc_value is None:
        return
    structlog.get_logger("uncaught").critical(
        "uncaught_exception",
        thread=getattr(args.thread, "name", ""),
        exc_info=(args.exc_type, args.exc_value, args.exc_traceback),
    )
