"""When a failed model call is tried again, and how long it waits first: one policy, on tenacity.

The gateway's two loops — ``complete`` (always litellm) and ``ChatStream`` (litellm or the direct
``openai_compat`` road) — both iterate ``MODEL_CALL_RETRY.attempts(...)``; nothing else in the
gateway counts attempts or sleeps. The policy:

* up to ``LLM_MAX_RETRIES`` extra attempts (read at each call, so a setting change applies to
  the next call), each after ``LLM_RETRY_BACKOFF_SECONDS * 2 ** (n - 1)`` seconds for the n-th
  failure;
* only a failure the gateway classifies as transient is retried (``transient``), and only while
  the caller says it still may (``may_retry``: a stream that has shown text must not restart);
* a failure that says when to come back (a 429's ``Retry-After``, ``hint``) waits that long
  if it is longer than the back-off; one that asks for more than ``RETRY_AFTER_MAX_SECONDS``
  is not retried: the call fails at once rather than hold a turn that long;
* the last failure is re-raised as it was (``reraise``), for the gateway to turn into its
  ``ModelCallFailed``.

The loop is tenacity's ``for attempt in retrying: with attempt: ...``. ``with attempt`` records
any exception, ``BaseException`` included; such a one (a ``GeneratorExit`` when a stream is
collected half-read, a ``KeyboardInterrupt``) is never retried, so tenacity raises it again at
once and it goes on as if the loop were not there.
"""

from __future__ import annotations

import email.utils
import time
from collections.abc import Callable, Mapping

import tenacity

# The longest a provider's ``Retry-After`` is waited out within one call.
RETRY_AFTER_MAX_SECONDS = 30.0


def _always() -> bool:
    return True


def _never(exc: BaseException) -> float | None:
    return None


def retry_after_seconds(headers: Mapping[str, str] | None) -> float | None:
    """How long an HTTP answer asks to wait before the next request: ``retry-after-ms``
    (OpenAI's), else ``Retry-After`` in seconds or as an HTTP date; None when it says nothing
    readable."""
    if not headers:
        return None
    lower = {str(k).lower(): str(v) for k, v in headers.items()}
    try:
        if "retry-after-ms" in lower:
            return max(0.0, float(lower["retry-after-ms"]) / 1000)
        value = lower.get("retry-after", "").strip()
        if not value:
            return None
        if value.replace(".", "", 1).isdigit():
            return float(value)
        when = email.utils.parsedate_to_datetime(value)
    except (ValueError, TypeError, OverflowError):
        return None
    return max(0.0, when.timestamp() - time.time())


class RetryPolicy:
    """``limits()`` gives (extra attempts, first back-off in seconds); ``transient(exc)`` says
    whether a failed attempt may be tried again."""

    def __init__(
        self,
        *,
        limits: Callable[[], tuple[int, float]],
        transient: Callable[[BaseException], bool],
        hint: Callable[[BaseException], float | None] = _never,
    ) -> None:
        self.limits = limits
        self.transient = transient
        self.hint = hint  # how long a failure asks to wait (a 429's Retry-After)

    def attempts(
        self,
        *,
        may_retry: Callable[[], bool] = _always,
        sleep: Callable[[float], object] = time.sleep,
        on_retry: Callable[[BaseException, int, float], None] | None = None,
    ) -> tenacity.Retrying:
        """The attempts of one call. ``sleep`` waits between them (a stream passes one that a
        stop cuts short); ``on_retry(exc, attempt, wait)`` runs before each wait."""
        retries, backoff = self.limits()

        def retryable(exc: BaseException) -> bool:
            if not (isinstance(exc, Exception) and self.transient(exc)):
                return False
            asked = self.hint(exc)
            return (asked is None or asked <= RETRY_AFTER_MAX_SECONDS) and may_retry()

        backoff_wait = tenacity.wait_exponential(multiplier=max(0.0, backoff), exp_base=2, min=0)

        def wait(state: tenacity.RetryCallState) -> float:
            seconds = backoff_wait(state)
            exc = state.outcome.exception() if state.outcome is not None else None
            asked = self.hint(exc) if exc is not None else None
            return max(seconds, asked) if asked is not None else seconds

        def pause(seconds: float) -> None:
            sleep(seconds)

        def before_sleep(state: tenacity.RetryCallState) -> None:
            if on_retry is None or state.outcome is None or state.next_action is None:
                return
            exc = state.outcome.exception()
            if exc is not None:
                on_retry(exc, state.attempt_number, state.next_action.sleep)

        return tenacity.Retrying(
            stop=tenacity.stop_after_attempt(1 + max(0, retries)),
            wait=wait,
            retry=tenacity.retry_if_exception(retryable),
            sleep=pause,
            before_sleep=before_sleep,
            reraise=True,
        )
