"""Every failure of a model call, on either road, classified once: transient or not, its HTTP
status, a short reason fit to show a user; and the one retry policy built on that."""

from __future__ import annotations

import re
from typing import Any

import tenacity

from chat_platform import outbound, redaction
from chat_platform.llm import openai_compat, retries
from chat_platform.llm.gateway import lazy_litellm
from chat_platform.llm.gateway.config import KEY_FAILED, ModelCallFailed, ModelConfig
from chat_platform.llm.gateway.request import setting
from chat_platform.llm.gateway.stop import CallStopped

_LITELLM_PREFIX = re.compile(r"^(?:litellm\.\w+:\s*)?(?:\w+(?:Error|Exception)\s*[:-]\s*)*")


def _detail(exc: BaseException, secret: str | None) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = _LITELLM_PREFIX.sub("", text).strip() or type(exc).__name__
    if secret:
        text = text.replace(secret, "***")
    text = redaction.redact(text)
    return text if len(text) <= 160 else text[:157] + "..."


def _is_connection_failure(exc: BaseException) -> bool:
    """litellm reports a refused/reset connection to an OpenAI-style server as HTTP 500 with
    "Connection error." and no provider status; look at what it wrapped."""
    import httpx

    seen: BaseException | None = exc
    for _ in range(5):
        if seen is None:
            break
        if isinstance(seen, httpx.TransportError) or type(seen).__name__ == "APIConnectionError":
            return True
        seen = seen.__cause__ or seen.__context__
    return getattr(exc, "provider_status_code", 0) is None and "Connection error" in str(exc)


# The reason of a provider's refusal of a request longer than its model's window
# (``ModelCallFailed.context_window``: the turn answers it as ``context_too_large``).
CONTEXT_WINDOW = "the request is longer than the model's context window"
_CONTEXT_WINDOW_WORDS = re.compile(
    r"context length|context window|maximum context|too many tokens|prompt is too long", re.I
)


def classify(exc: BaseException) -> tuple[bool, int | None, str]:
    """(transient, status_code, reason) for a failure of one attempt, on either road.

    One rule for both: litellm's exceptions are told by their class, the direct road's
    (``openai_compat``) by what it raises — httpx's transport errors, an unreadable stream, an
    error event without a status, a redirect, a 400 whose words say the context window — and
    both by the HTTP status. The first arm that matches decides."""
    import httpx

    if isinstance(exc, CallStopped):  # the caller's Stop: not the provider's failure
        return False, None, "stopped"
    refused = outbound.refusal_in(exc)
    if refused is not None:
        return False, refused.status_code, str(refused)
    if isinstance(exc, httpx.TimeoutException):
        return True, None, "timed out"
    if isinstance(exc, httpx.TransportError):
        return True, None, "could not reach the provider"
    if isinstance(exc, openai_compat.ProviderProtocolError):
        return False, None, "the provider's answer could not be read"
    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    direct_http = isinstance(exc, openai_compat.ProviderHTTPError)
    if direct_http and status is None:
        return True, None, "provider error (HTTP 500)"
    if direct_http and status is not None and 300 <= status < 400:
        return False, status, f"the provider answered with a redirect (HTTP {status})"
    if direct_http and status == 400 and _CONTEXT_WINDOW_WORDS.search(str(exc)):
        return False, 400, CONTEXT_WINDOW
    # Only litellm's own exceptions need litellm (and its classes) to be classified.
    litellm = None if direct_http else lazy_litellm.get()

    def kind(*names: str) -> bool:
        return litellm is not None and isinstance(exc, tuple(getattr(litellm, n) for n in names))

    if kind("Timeout"):
        return True, None, "timed out"
    message = str(exc)
    if "Missing credentials" in message or "api_key client option must be set" in message:
        return False, 401, KEY_FAILED
    if kind("RateLimitError") or status == 429:
        asked = retry_after(exc)
        if asked is not None and asked > retries.RETRY_AFTER_MAX_SECONDS:
            return (
                True,
                429,
                f"rate limited by the provider (HTTP 429): the provider asks to wait {asked:.0f} s",
            )
        return True, 429, "rate limited by the provider (HTTP 429)"
    if kind("AuthenticationError") or status == 401:
        return False, 401, KEY_FAILED
    if kind("PermissionDeniedError") or status == 403:
        return False, status or 403, f"permission denied (HTTP {status or 403})"
    if kind("NotFoundError") or status == 404:
        return False, status or 404, f"model or endpoint not found (HTTP {status or 404})"
    if kind("ContextWindowExceededError"):
        return False, status, CONTEXT_WINDOW
    if kind("APIConnectionError") or _is_connection_failure(exc):
        return True, None, "could not reach the provider"
    if kind("InternalServerError", "ServiceUnavailableError", "BadGatewayError") or (
        status is not None and status >= 500
    ):
        return True, status, f"provider error (HTTP {status or 500})"
    if kind("BadRequestError") or (status is not None and 400 <= status < 500):
        return False, status, f"request rejected (HTTP {status or 400})"
    return False, status, "unexpected error"


def unavailable(
    config: ModelConfig, exc: BaseException, *, attempts: int, kwargs: dict[str, Any]
) -> ModelCallFailed:
    transient, status, reason = classify(exc)
    message = f"{config.model}: {reason}"
    if reason == "timed out":
        message += f" after {kwargs['timeout']:g} s"
    elif reason == KEY_FAILED:
        pass  # the provider's words would tell a refused key from a missing one
    else:
        detail = _detail(exc, kwargs.get("api_key"))
        if detail and detail.lower() not in reason.lower():
            message += f" ({detail})"
    if attempts > 1:
        message += f", after {attempts} attempts"
    return ModelCallFailed(
        redaction.redact(message),
        status_code=status,
        transient=transient,
        attempts=attempts,
        context_window=reason == CONTEXT_WINDOW,
    )


def _retry_limits() -> tuple[int, float]:
    return max(0, int(setting("LLM_MAX_RETRIES"))), max(
        0.0, float(setting("LLM_RETRY_BACKOFF_SECONDS"))
    )


def retry_after(exc: BaseException) -> float | None:
    """How long a failed attempt's answer asked to wait (a 429's ``Retry-After``), on either
    road: the direct road reads it into ``ProviderHTTPError.retry_after``; litellm's exceptions
    carry the provider's ``response`` (or its headers)."""
    if isinstance(exc, openai_compat.ProviderHTTPError):
        return exc.retry_after
    headers = getattr(getattr(exc, "response", None), "headers", None)
    if headers is None:
        headers = getattr(exc, "litellm_response_headers", None)
    try:
        return retries.retry_after_seconds(headers)
    except AttributeError:  # not a mapping after all
        return None


# The one retry policy of every model call, on either road (see ``retries``).
MODEL_CALL_RETRY = retries.RetryPolicy(
    limits=_retry_limits, transient=lambda exc: classify(exc)[0], hint=retry_after
)


def attempts_of(state: tenacity.RetryCallState | None) -> int:
    return state.attempt_number if state is not None else 0
