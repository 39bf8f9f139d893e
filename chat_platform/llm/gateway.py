"""The one road to every model: ``complete`` / ``stream`` over ``litellm.completion``.

Everything that talks to a model — chat turns, recall re-invocations, compaction — comes through
here, built-in models included (they are a litellm custom provider, see ``builtin.provider``), so
timeouts, bounded retries, usage, ``finish_reason`` and streaming behave the same for all of them.
One shortcut inside it: a streamed call to an OpenAI-compatible server (``openai/<model>`` with
its own ``api_base``) is read directly by ``openai_compat`` instead of litellm's stream wrapper
(a sixth of the CPU); the same policy check, retries, errors and stop apply to both.

Rules kept here:

* litellm is imported lazily, once (it costs seconds), and is configured then: no debug banners,
  no telemetry, no tokenizer downloads, the ``builtin`` provider registered.
* Keys are read from ``os.environ[config.api_key_env]`` at call time and passed straight to
  litellm; they are never stored, logged or put into an error message. A call carries exactly
  the key its bot names: when it names none, a placeholder is passed, so neither litellm nor a
  provider SDK falls back to the server's ``OPENAI_API_KEY`` (or any other ambient key). Every
  error text and every streamed reply passes ``redaction`` of every configured secret.
* Every HTTP request of a call obeys ``chat_platform.outbound``: no redirect is followed, and
  nothing but the approved endpoint may be reached at a non-public address.
* Before anything is read or sent, the call is checked against the provider policy
  (``chat_platform.provider_policy``): ``api_key_env`` must be allow-listed and ``api_base`` an
  http(s) URL that staff approved (``api_base_trusted``) or one under ``PROVIDER_API_BASES``.
  A refused call names the rule, never a variable. A key variable that is unset fails with the
  very message a provider's "wrong key" answer gets, so errors never confirm that a variable
  exists.
* litellm's and the SDK's own retries are off (``num_retries=0``); we retry transient failures
  (connection errors, timeouts, HTTP 429 and 5xx) up to ``LLM_MAX_RETRIES`` extra times with
  exponential backoff from ``LLM_RETRY_BACKOFF_SECONDS``: one policy (``MODEL_CALL_RETRY``, on
  tenacity, see ``retries``) for every call on either road. A stream is retried only while it
  has not yielded any text. Everything else fails at once. Every failure reaches callers as
  ``ModelCallFailed`` with a short human reason.
* ``timeout`` bounds each attempt's wait for the provider (for a stream: the wait for each
  chunk), so a hung server costs at most ``(1 + LLM_MAX_RETRIES) * timeout`` plus backoff.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
import tenacity

from chat_platform import outbound, provider_policy, redaction
from chat_platform.llm import openai_compat, retries
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from chat_platform.textcheck import text_made_storable

log = structlog.get_logger(__name__)

BUILTIN_PREFIX = "builtin/"

# OpenAI-compatible local servers (llama.cpp, vLLM, LM Studio…) need no key, but the OpenAI SDK
# refuses to send a request without one; this placeholder is sent only to an explicit api_base
# when neither the bot nor the environment supplies a key.
_NO_KEY_PLACEHOLDER = "no-key-required"

# The one answer for a key that is missing, unset or refused by the provider (see module doc).
_KEY_FAILED = "authentication failed: the provider key is missing or was refused"


@dataclass(frozen=True)
class ModelConfig:
    model: str
    api_base: str = ""
    api_key_env: str = ""
    # True when staff set or approved this api_base (Bot.api_base_trusted); otherwise it must be
    # under PROVIDER_API_BASES.
    api_base_trusted: bool = False
    # True when staff approved this model for the bot (Bot.model_trusted): only then may a call
    # without an api_base go wherever litellm's default for the provider is.
    model_trusted: bool = False
    # The key itself, for a call through a provider connection (decrypted from the database by
    # the connections app): used instead of ``api_key_env``. Never shown in a repr or a log.
    api_key: str = field(default="", repr=False)
    # Why this call must not be made (e.g. the bot's owner may no longer use its connection):
    # refused before anything is read or sent, like a provider-policy refusal.
    refusal: str = ""
    temperature: float = 0.7
    max_output_tokens: int = 1024
    timeout: float | None = None
    # Stop sequences of the call (an API client's ``stop``); none by default.
    stop: tuple[str, ...] = ()


@dataclass
class Completion:
    text: str
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    model: str
    tool_calls: list[dict] = field(default_factory=list)


class ModelCallFailed(Exception):
    """The model could not answer (after bounded retries where that made sense).

    The gateway's own failure; callers turn it into the user-facing
    ``chat_platform.errors.ModelUnavailable`` (code ``model_unavailable``) where one is due.

    ``str()`` is a short reason fit to show a user; it never contains a key.
    """

    def __init__(
        self,
        message: str,
        *,
        status_code: int | None = None,
        transient: bool = False,
        attempts: int = 0,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.transient = transient
        self.attempts = attempts


# --- litellm, lazily ------------------------------------------------------------------------

_litellm_module: Any = None
_litellm_lock = threading.Lock()


def _litellm() -> Any:
    """Import and configure litellm once per process (thread-safe)."""
    global _litellm_module
    if _litellm_module is not None:
        return _litellm_module
    with _litellm_lock:
        if _litellm_module is None:
            from chat_platform.offline import ensure_offline_environment

            ensure_offline_environment()
            import litellm

            from chat_platform.llm.builtin.provider import build_handler

            _configure_lean(litellm)
            litellm.custom_provider_map = [
                entry for entry in litellm.custom_provider_map if entry["provider"] != "builtin"
            ] + [{"provider": "builtin", "custom_handler": build_handler()}]
            # litellm registers custom providers lazily on the first call; do it now so that
            # get_model_info and friends already know "builtin".
            from litellm.utils import custom_llm_setup

            custom_llm_setup()
            _litellm_module = litellm
    return _litellm_module


# litellm's switches, set once at import. Its defaults log every call and every chunk: each
# streamed chunk is handed to a thread pool that runs an asyncio loop for success "logging" even
# with no callback registered, and the end of a stream rebuilds the whole response for it. With
# these off a 50-chunk stream costs about half the CPU (bench/turn_overhead.py prints both).
# We log each call ourselves (llm_call); usage comes from the provider's usage chunk.
_LEAN_SWITCHES: dict[str, Any] = {
    "telemetry": False,
    "suppress_debug_info": True,
    "set_verbose": False,
    "disable_hf_tokenizer_download": True,
    # no per-chunk success handler in a thread + asyncio.run per chunk
    "disable_streaming_logging": True,
    # never copy prompts/replies into logging payloads (they are the users' text)
    "turn_off_message_logging": True,
    "disable_end_user_cost_tracking": True,
    # litellm's own token counting (tiktoken over the whole prompt) when a provider sends no
    # usage: we count with our one counter instead (_usage_tokens)
    "disable_token_counter": True,
    "disable_add_transform_inline_image_block": True,
    # The provider SDK's own retries stay off on every road (one retry policy: ours). litellm's
    # OpenAI embedding path turns ``max_retries=0`` into this default (``max_retries or
    # DEFAULT_MAX_RETRIES``), which would retry a 5xx twice behind our back.
    "DEFAULT_MAX_RETRIES": 0,
}


def _configure_lean(litellm: Any) -> None:
    for name, value in _LEAN_SWITCHES.items():
        if hasattr(litellm, name):
            setattr(litellm, name, value)
    # No callbacks: nothing for litellm to fan out to on success or failure.
    for name in (
        "callbacks",
        "success_callback",
        "failure_callback",
        "input_callback",
        "service_callback",
        "_async_success_callback",
        "_async_failure_callback",
    ):
        if isinstance(getattr(litellm, name, None), list):
            setattr(litellm, name, [])
    import logging

    # litellm's loggers format debug lines eagerly in places; keep them at WARNING.
    for name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy", "litellm"):
        logging.getLogger(name).setLevel(logging.WARNING)


def warm_up() -> None:
    """Pay litellm's import cost now (e.g. when a worker starts) instead of on the first turn."""
    _litellm()


# --- settings, lazily -----------------------------------------------------------------------

_DEFAULTS = {
    "LLM_TIMEOUT_SECONDS": 120.0,
    "LLM_MAX_RETRIES": 2,
    "LLM_RETRY_BACKOFF_SECONDS": 1.0,
    "LLM_DIRECT_OPENAI_COMPATIBLE": True,
}


def _setting(name: str) -> Any:
    from django.conf import settings

    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return _DEFAULTS[name]  # a bare script: the documented defaults, without trying
    try:
        return getattr(settings, name, _DEFAULTS[name])
    except Exception:  # settings not configured (a bare script): the documented defaults
        return _DEFAULTS[name]


# --- building a call ------------------------------------------------------------------------


def _call_kwargs(
    config: ModelConfig,
    messages: list[dict],
    *,
    tools: list[dict] | None,
    max_tokens: int | None,
    stream: bool,
) -> dict[str, Any]:
    refusal = provider_policy.call_refusal(
        api_key_env=config.api_key_env,
        api_base=config.api_base,
        api_base_trusted=config.api_base_trusted,
        model=config.model,
        model_trusted=config.model_trusted,
    )
    refusal = config.refusal or refusal
    if refusal:
        raise ModelCallFailed(f"{config.model}: {refusal}")
    api_base = provider_policy.call_api_base(
        model=config.model, api_base=config.api_base, model_trusted=config.model_trusted
    )
    timeout = config.timeout if config.timeout is not None else _setting("LLM_TIMEOUT_SECONDS")
    kwargs: dict[str, Any] = {
        "model": config.model,
        # litellm may rewrite messages in place for some providers; callers keep theirs intact.
        "messages": [dict(m) for m in messages],
        "temperature": config.temperature,
        "max_tokens": max_tokens or config.max_output_tokens,
        "timeout": float(timeout),
        "num_retries": 0,
        # e.g. o-series models reject ``temperature``: drop what a provider cannot take instead
        # of failing every turn of a bot whose settings are otherwise fine.
        "drop_params": True,
    }
    if api_base:
        kwargs["api_base"] = api_base
    api_key = _api_key(config)
    if api_key:
        kwargs["api_key"] = api_key
    if tools:
        kwargs["tools"] = tools
    if config.stop:
        kwargs["stop"] = list(config.stop)
    if stream:
        kwargs["stream"] = True
        kwargs["stream_options"] = {"include_usage": True}
    return kwargs


def _api_key(config: ModelConfig) -> str | None:
    """The key the bot names, else the placeholder: never None for a provider, because litellm
    and the SDKs fill a missing key from the server's environment (``OPENAI_API_KEY``…)."""
    if config.model.startswith(BUILTIN_PREFIX):
        return None
    if config.api_key:
        return config.api_key
    if config.api_key_env:
        value = os.environ.get(config.api_key_env)
        if not value:
            raise ModelCallFailed(f"{config.model}: {_KEY_FAILED}", status_code=401)
        return value
    return _NO_KEY_PLACEHOLDER


def _policy(config: ModelConfig, kwargs: dict[str, Any]) -> outbound.Policy:
    """Where this call's requests may go: its approved api_base (any address), or, for a
    staff-approved bot without one, wherever litellm sends that provider."""
    base = kwargs.get("api_base") or ""
    if not base:
        return outbound.policy_for(any_destination=config.model_trusted)
    return outbound.policy_for(approved_bases=[base])


# --- errors ---------------------------------------------------------------------------------

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


def _classify(exc: BaseException) -> tuple[bool, int | None, str]:
    """(transient, status_code, reason) for a failure of one attempt, on either road."""
    refused = outbound.refusal_in(exc)
    if refused is not None:
        return False, refused.status_code, str(refused)
    direct = _classify_direct(exc)
    if direct is not None:
        return direct
    # The direct road's HTTP errors take the same status arms as litellm's; only litellm's own
    # exceptions need litellm (and its classes) to be classified.
    litellm = None if isinstance(exc, openai_compat.ProviderHTTPError) else _litellm()

    def kind(*names: str) -> bool:
        return litellm is not None and isinstance(exc, tuple(getattr(litellm, n) for n in names))

    status = getattr(exc, "status_code", None)
    status = status if isinstance(status, int) else None
    if kind("Timeout"):
        return True, None, "timed out"
    message = str(exc)
    if "Missing credentials" in message or "api_key client option must be set" in message:
        return False, 401, _KEY_FAILED
    if kind("RateLimitError") or status == 429:
        return True, 429, "rate limited by the provider (HTTP 429)"
    if kind("AuthenticationError") or status == 401:
        return False, 401, _KEY_FAILED
    if kind("PermissionDeniedError") or status == 403:
        return False, status or 403, f"permission denied (HTTP {status or 403})"
    if kind("NotFoundError") or status == 404:
        return False, status or 404, f"model or endpoint not found (HTTP {status or 404})"
    if kind("ContextWindowExceededError"):
        return False, status, "the request is longer than the model's context window"
    if kind("APIConnectionError") or _is_connection_failure(exc):
        return True, None, "could not reach the provider"
    if kind("InternalServerError", "ServiceUnavailableError", "BadGatewayError") or (
        status is not None and status >= 500
    ):
        return True, status, f"provider error (HTTP {status or 500})"
    if kind("BadRequestError") or (status is not None and 400 <= status < 500):
        return False, status, f"request rejected (HTTP {status or 400})"
    return False, status, "unexpected error"


_CONTEXT_WINDOW_WORDS = re.compile(
    r"context length|context window|maximum context|too many tokens|prompt is too long", re.I
)


def _classify_direct(exc: BaseException) -> tuple[bool, int | None, str] | None:
    """What only the direct road (``openai_compat``) raises: httpx's transport errors, an
    unreadable stream, an error event without a status, a redirect, and a 400 whose words say
    the context window (litellm tells that one by its class). ``None``: the shared arms."""
    import httpx

    if isinstance(exc, httpx.TimeoutException):
        return True, None, "timed out"
    if isinstance(exc, httpx.TransportError):
        return True, None, "could not reach the provider"
    if isinstance(exc, openai_compat.ProviderProtocolError):
        return False, None, "the provider's answer could not be read"
    if not isinstance(exc, openai_compat.ProviderHTTPError):
        return None
    status = exc.status_code
    if status is None:
        return True, None, "provider error (HTTP 500)"
    if 300 <= status < 400:
        return False, status, f"the provider answered with a redirect (HTTP {status})"
    if status == 400 and _CONTEXT_WINDOW_WORDS.search(str(exc)):
        return False, 400, "the request is longer than the model's context window"
    return None


def _unavailable(
    config: ModelConfig, exc: BaseException, *, attempts: int, kwargs: dict[str, Any]
) -> ModelCallFailed:
    transient, status, reason = _classify(exc)
    message = f"{config.model}: {reason}"
    if reason == "timed out":
        message += f" after {kwargs['timeout']:g} s"
    elif reason == _KEY_FAILED:
        pass  # the provider's words would tell a refused key from a missing one
    else:
        detail = _detail(exc, kwargs.get("api_key"))
        if detail and detail.lower() not in reason.lower():
            message += f" ({detail})"
    if attempts > 1:
        message += f", after {attempts} attempts"
    return ModelCallFailed(
        redaction.redact(message), status_code=status, transient=transient, attempts=attempts
    )


def _retry_limits() -> tuple[int, float]:
    return max(0, int(_setting("LLM_MAX_RETRIES"))), max(
        0.0, float(_setting("LLM_RETRY_BACKOFF_SECONDS"))
    )


# The one retry policy of every model call, on either road (see ``retries``).
MODEL_CALL_RETRY = retries.RetryPolicy(
    limits=_retry_limits, transient=lambda exc: _classify(exc)[0]
)


def _attempts(state: tenacity.RetryCallState | None) -> int:
    return state.attempt_number if state is not None else 0


# --- results --------------------------------------------------------------------------------

_END = object()

# A provider that ignores max_tokens must not fill the worker's memory or the database: reading
# stops once the reply is past max_tokens plus a margin (finish_reason "length"). Tokens are
# counted only now and then (at 4 characters a token, then every 50 % more text); a hard stop by
# length catches one enormous chunk between counts.
_CAP_MARGIN_TOKENS = 64
_CAP_CHARS_PER_TOKEN = 16
_UNCOUNTED_MIN_CHARS = 256 * 1024


class _OutputCap:
    """``counted=False`` (a non-streamed answer, already read whole): only a hard stop by
    length, at least ``_UNCOUNTED_MIN_CHARS``, which bounds what is kept and stored; the
    caller's gates (the summariser's "shorter than its source") judge the rest."""

    def __init__(self, max_tokens: int, *, model: str, counted: bool = True) -> None:
        self.limit = max_tokens + max(_CAP_MARGIN_TOKENS, max_tokens // 10)
        self.char_limit = self.limit * _CAP_CHARS_PER_TOKEN
        if not counted:
            self.char_limit = max(self.char_limit, _UNCOUNTED_MIN_CHARS)
        self.model = model
        self.chars = 0
        self.next_count = self.limit * 4 if counted else self.char_limit + 1
        self.parts: list[str] = []
        self.reached = False

    def take(self, text: str) -> str:
        """``text`` as far as it fits; sets ``reached`` once the reply is over the cap."""
        if self.reached:
            return ""
        if self.chars + len(text) > self.char_limit:
            text = text[: self.char_limit - self.chars]
            self.reached = True
        self.chars += len(text)
        self.parts.append(text)
        if not self.reached and self.chars >= self.next_count:
            if count_tokens("".join(self.parts), model=self.model) > self.limit:
                self.reached = True
            else:
                self.next_count = self.chars + self.chars // 2 + 1
        return text


def _clean_tool_call(call: dict) -> dict:
    function = call["function"]
    return {
        **call,
        "id": text_made_storable(str(call.get("id") or "")),
        "function": {
            "name": text_made_storable(str(function.get("name") or "")),
            "arguments": text_made_storable(str(function.get("arguments") or "")),
        },
    }


def _tool_call_dict(call: Any) -> dict:
    function = _get(call, "function")
    return {
        "id": _get(call, "id") or "",
        "type": "function",
        "function": {
            "name": _get(function, "name") or "",
            "arguments": _get(function, "arguments") or "",
        },
    }


def _get(obj: Any, name: str) -> Any:
    # Called a few times per streamed chunk: the common case (an object) goes first.
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


def _estimated_prompt_tokens(config: ModelConfig, messages: list[dict]) -> int:
    total = 0
    for message in messages:
        content = message.get("content")
        if isinstance(content, list):
            content = " ".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
        total += count_message_tokens(str(content or ""), model=config.model)
    return total


def _usage_tokens(
    usage: Any, config: ModelConfig, messages: list[dict], text: str, tool_calls: list[dict]
) -> tuple[int, int]:
    prompt = _get(usage, "prompt_tokens")
    completion = _get(usage, "completion_tokens")
    if not prompt:
        prompt = _estimated_prompt_tokens(config, messages)
    if completion is None or (completion == 0 and (text or tool_calls)):
        arguments = "".join(c["function"]["arguments"] for c in tool_calls)
        completion = count_tokens(text + arguments, model=config.model)
    return int(prompt), int(completion)


def _log_done(
    config: ModelConfig, completion: Completion, *, started: float, attempts: int, streamed: bool
) -> None:
    log.info(
        "llm_call",
        model=config.model,
        stream=streamed,
        attempts=attempts,
        finish_reason=completion.finish_reason,
        prompt_tokens=completion.prompt_tokens,
        completion_tokens=completion.completion_tokens,
        tool_calls=len(completion.tool_calls),
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _log_failed(
    config: ModelConfig, error: ModelCallFailed, *, started: float, streamed: bool
) -> None:
    log.warning(
        "llm_call_failed",
        model=config.model,
        stream=streamed,
        attempts=error.attempts,
        status_code=error.status_code,
        reason=str(error),
        duration_ms=int((time.monotonic() - started) * 1000),
    )


def _log_retry(config: ModelConfig, exc: BaseException, attempt: int, wait: float) -> None:
    log.warning(
        "llm_retry",
        model=config.model,
        attempt=attempt,
        error=type(exc).__name__,
        status_code=getattr(exc, "status_code", None),
        wait_s=round(wait, 3),
    )


# --- public API -----------------------------------------------------------------------------


def complete(
    config: ModelConfig,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    max_tokens: int | None = None,
) -> Completion:
    """One non-streaming call, retried on transient failures; raises ``ModelCallFailed``."""
    started = time.monotonic()
    try:
        kwargs = _call_kwargs(config, messages, tools=tools, max_tokens=max_tokens, stream=False)
    except ModelCallFailed as error:
        _log_failed(config, error, started=started, streamed=False)
        raise
    litellm = _litellm()
    policy = _policy(config, kwargs)
    state: tenacity.RetryCallState | None = None
    try:
        for attempt in MODEL_CALL_RETRY.attempts(on_retry=partial(_log_retry, config)):
            state = attempt.retry_state
            with attempt, outbound.scope(policy):
                response = litellm.completion(**kwargs)
    except Exception as exc:
        failure = _unavailable(config, exc, attempts=_attempts(state), kwargs=kwargs)
        _log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    attempts = _attempts(state)

    choice = response.choices[0]
    message = choice.message
    tool_calls = [_clean_tool_call(_tool_call_dict(c)) for c in (_get(message, "tool_calls") or [])]
    cap = _OutputCap(kwargs["max_tokens"], model=config.model, counted=False)
    text = cap.take(redaction.redact(text_made_storable(str(_get(message, "content") or ""))))
    prompt_tokens, completion_tokens = _usage_tokens(
        _get(response, "usage"), config, messages, text, tool_calls
    )
    completion = Completion(
        text=text,
        finish_reason="length"
        if cap.reached
        else choice.finish_reason or ("tool_calls" if tool_calls else "stop"),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        model=config.model,
        tool_calls=tool_calls,
    )
    _log_done(config, completion, started=started, attempts=attempts, streamed=False)
    return completion


class EmbeddingUnreadable(Exception):
    """An embedding answer that is not one finite vector per input, all of one size."""


def _embedding_vectors(response: Any, count: int) -> list[list[float]]:
    data = _get(response, "data")
    if not isinstance(data, list) or len(data) != count:
        raise EmbeddingUnreadable(f"expected {count} embeddings")
    ordered: list[Any] = [None] * count
    for position, item in enumerate(data):
        index = _get(item, "index")
        index = index if isinstance(index, int) and 0 <= index < count else position
        ordered[index] = _get(item, "embedding")
    vectors: list[list[float]] = []
    for vector in ordered:
        if not isinstance(vector, list) or not vector:
            raise EmbeddingUnreadable("an embedding is not a list of numbers")
        if not all(
            isinstance(x, int | float) and not isinstance(x, bool) and x == x and abs(x) < 1e30
            for x in vector
        ):
            raise EmbeddingUnreadable("an embedding holds a value that is not a finite number")
        vectors.append([float(x) for x in vector])
    if len({len(v) for v in vectors}) != 1:
        raise EmbeddingUnreadable("the embeddings differ in size")
    return vectors


def embedding_tokens(config: ModelConfig, texts: list[str]) -> int:
    """What an embedding call of ``texts`` sends, counted as the provider would bill it."""
    return sum(count_tokens(text, model=config.model) for text in texts)


def embed(
    config: ModelConfig,
    texts: list[str],
    *,
    retry: bool = True,
    on_usage: Callable[[int], None] | None = None,
) -> list[list[float]]:
    """One embedding call (``litellm.embedding``) for ``texts``, under the same provider policy,
    keys, outbound rules and retry policy as a completion (``retry=False``: one attempt, for a
    caller that has a fallback and must not wait); one vector per text, in order. Raises
    ``ModelCallFailed`` (an answer that is not one finite vector per text, all of one size,
    included: "the provider's answer could not be read").

    ``on_usage``: told the tokens the call cost once the provider answered (its reported
    ``usage``, else the inputs counted), for the caller to charge (connections.usage)."""
    started = time.monotonic()
    kwargs: dict[str, Any] = {}
    try:
        kwargs = _call_kwargs(config, [], tools=None, max_tokens=None, stream=False)
    except ModelCallFailed as error:
        _log_failed(config, error, started=started, streamed=False)
        raise
    if not texts:
        return []
    call: dict[str, Any] = {
        "model": config.model,
        "input": list(texts),
        "timeout": kwargs["timeout"],
        # Our retry policy only (see DEFAULT_MAX_RETRIES in _LEAN_SWITCHES).
        "num_retries": 0,
        "max_retries": 0,
        "drop_params": True,
    }
    for name in ("api_base", "api_key"):
        if name in kwargs:
            call[name] = kwargs[name]
    litellm = _litellm()
    policy = _policy(config, kwargs)
    state: tenacity.RetryCallState | None = None
    try:
        retrying = MODEL_CALL_RETRY.attempts(
            may_retry=lambda: retry, on_retry=partial(_log_retry, config)
        )
        for attempt in retrying:
            state = attempt.retry_state
            with attempt, outbound.scope(policy):
                response = litellm.embedding(**call)
        if on_usage is not None:
            reported = _get(_get(response, "usage"), "prompt_tokens")
            on_usage(int(reported) if reported else embedding_tokens(config, texts))
        vectors = _embedding_vectors(response, len(texts))
    except EmbeddingUnreadable as exc:
        failure = ModelCallFailed(
            f"{config.model}: the provider's answer could not be read ({exc})",
            attempts=_attempts(state),
        )
        _log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    except Exception as exc:
        failure = _unavailable(config, exc, attempts=_attempts(state), kwargs=kwargs)
        _log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    log.info(
        "llm_embedding",
        model=config.model,
        inputs=len(texts),
        dimensions=len(vectors[0]),
        attempts=_attempts(state),
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    return vectors


def stream(
    config: ModelConfig,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    on_open: Callable[[], None] | None = None,
) -> ChatStream:
    """A streaming call. Nothing is sent until the returned stream is iterated.

    ``on_open`` runs once, in the iterating thread, when the provider has accepted the request
    (its response has begun) and before the first chunk is read: work the caller can do while
    the model produces its first token. An exception it raises is logged, not propagated.
    """
    return ChatStream(config, messages, tools=tools, on_open=on_open)


class ChatStream:
    """Iterate for text deltas; ``completion`` is set once the stream ends normally.

    ``close()`` stops early (user pressed stop): the HTTP response is closed, iteration ends
    quietly and ``completion`` stays ``None``. It may be called from another thread. Breaking out
    of the loop without calling ``close()`` closes the response too (when the iterator is
    collected). ``text`` is what has arrived so far.
    """

    def __init__(
        self,
        config: ModelConfig,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.messages = messages
        self.tools = tools
        self._on_open = on_open
        self.completion: Completion | None = None
        self._parts: list[str] = []
        self._response: Any = None
        self._closed = threading.Event()
        self._iterator: Iterator[str] | None = None
        self._lock = threading.Lock()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __iter__(self) -> Iterator[str]:
        if self._iterator is not None:
            raise RuntimeError("a ChatStream can be iterated only once")
        self._iterator = self._run()
        return self._iterator

    def close(self) -> None:
        self._closed.set()
        self._close_response()
        if self._iterator is not None:
            # ValueError: it is running in another thread; the closed response ends it there.
            with contextlib.suppress(ValueError):
                self._iterator.close()  # type: ignore[attr-defined]

    def _opened(self) -> None:
        callback, self._on_open = self._on_open, None
        if callback is None:
            return
        try:
            callback()
        except Exception:  # the caller's bookkeeping must not fail the model call
            log.exception("llm_stream_on_open_failed", model=self.config.model)

    def _close_response(self) -> None:
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            try:
                _shutdown_socket(response)
                response.close()
            except Exception:  # best effort: the stream is being abandoned anyway
                log.debug("llm_stream_close_failed", model=self.config.model, exc_info=True)

    def _run(self) -> Iterator[str]:
        config = self.config
        started = time.monotonic()
        try:
            kwargs = _call_kwargs(
                config, self.messages, tools=self.tools, max_tokens=None, stream=True
            )
        except ModelCallFailed as error:
            _log_failed(config, error, started=started, streamed=True)
            raise
        direct = openai_compat.is_direct(
            config.model,
            kwargs.get("api_base") or "",
            enabled=bool(_setting("LLM_DIRECT_OPENAI_COMPATIBLE")),
        )
        policy = _policy(config, kwargs)
        secrets = redaction.secret_values()
        state: tenacity.RetryCallState | None = None
        retrying = MODEL_CALL_RETRY.attempts(
            # A stream that has shown text is not started again: the user has read it.
            may_retry=lambda: not self._parts,
            # A stop during the back-off ends the wait (and, below, the call).
            sleep=self._closed.wait,
            on_retry=partial(_log_retry, config),
        )
        try:
            for attempt in retrying:
                state = attempt.retry_state
                if self.closed:
                    return
                # Each attempt starts clean: nothing of a failed one was shown, so what its
                # redactor held or its cap counted is not part of the next one.
                cap = _OutputCap(kwargs["max_tokens"], model=config.model)
                redactor = redaction.StreamRedactor(secrets)
                calls: dict[int, dict] = {}
                finish_reason: str | None = None
                usage: Any = None
                with attempt:
                    try:
                        with outbound.scope(policy):
                            response = _open_stream(kwargs, direct=direct)
                        with self._lock:
                            self._response = response
                        if self.closed:
                            return
                        self._opened()
                        chunks = iter(response)
                        while True:
                            # Only the reads are in the policy's scope: a yield leaves this frame,
                            # and the caller's code between chunks must not run inside it.
                            with outbound.scope(policy):
                                chunk = next(chunks, _END)
                            if chunk is _END:
                                break
                            chunk_usage = _get(chunk, "usage")
                            if chunk_usage is not None:
                                usage = chunk_usage
                                if finish_reason is not None and not direct:
                                    # The provider's usage chunk follows the last choice: the
                                    # answer is whole. Reading on only makes litellm rebuild the
                                    # full response for its logging (a quarter of a call's CPU).
                                    # (The direct road reads on to [DONE]: its connection goes
                                    # back to the pool.)
                                    break
                            choices = _get(chunk, "choices")
                            if not choices:
                                continue
                            choice = choices[0]
                            finish_reason = _get(choice, "finish_reason") or finish_reason
                            delta = _get(choice, "delta")
                            if _get(delta, "tool_calls"):
                                for call in _get(delta, "tool_calls"):
                                    _merge_tool_call_delta(calls, call)
                            content = _get(delta, "content")
                            if content:
                                content = cap.take(text_made_storable(str(content)))
                                shown = redactor.feed(content)
                                if shown:
                                    self._parts.append(shown)
                                    yield shown
                                if cap.reached:
                                    # Far past max_tokens: the provider ignores the cap. Stop
                                    # reading; what arrived is the reply, cut at the cap.
                                    finish_reason = "length"
                                    self._close_response()
                                    break
                        if self.closed:
                            # Stopped: a closed socket can read as the body's end (HTTP/1.0), so
                            # the loop may finish normally; it is still a stop, not an answer.
                            return
                        if (
                            direct
                            and finish_reason is None
                            and not cap.reached
                            and not getattr(response, "done", True)
                        ):
                            raise openai_compat.ProviderProtocolError(
                                "the provider's stream ended before the answer did"
                            )
                    except Exception:
                        if self.closed:
                            return
                        self._close_response()
                        raise
        except Exception as exc:
            failure = _unavailable(config, exc, attempts=_attempts(state), kwargs=kwargs)
            _log_failed(config, failure, started=started, streamed=True)
            raise failure from exc
        finally:
            self._close_response()

        rest = redactor.flush()
        if rest:
            self._parts.append(rest)
            yield rest
        tool_calls = [_clean_tool_call(calls[i]) for i in sorted(calls)]
        text = self.text
        prompt_tokens, completion_tokens = _usage_tokens(
            usage, config, self.messages, text, tool_calls
        )
        self.completion = Completion(
            text=text,
            finish_reason=finish_reason or ("tool_calls" if tool_calls else "stop"),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model=config.model,
            tool_calls=tool_calls,
        )
        _log_done(
            config, self.completion, started=started, attempts=_attempts(state), streamed=True
        )


def _open_stream(kwargs: dict[str, Any], *, direct: bool) -> Any:
    if direct:
        return openai_compat.open_stream(kwargs)
    return _litellm().completion(**kwargs)


def _shutdown_socket(response: Any) -> None:
    """Wake a thread blocked reading this stream's socket.

    Closing an httpx response from another thread does not interrupt a ``recv`` already waiting
    on its socket (Linux), so a stop during a silent stretch would wait for the timeout.
    ``shutdown`` does interrupt it. Only HTTP streams have a socket; others are skipped.
    """
    import socket

    http_response = (
        response.response
        if isinstance(response, openai_compat.SSEStream)
        else getattr(getattr(response, "completion_stream", None), "response", None)
    )
    extensions = getattr(http_response, "extensions", None)
    network_stream = extensions.get("network_stream") if isinstance(extensions, dict) else None
    get_extra_info = getattr(network_stream, "get_extra_info", None)
    sock = get_extra_info("socket") if callable(get_extra_info) else None
    if isinstance(sock, socket.socket):
        with contextlib.suppress(OSError):  # already closed
            sock.shutdown(socket.SHUT_RDWR)


def _merge_tool_call_delta(calls: dict[int, dict], delta: Any) -> None:
    index = _get(delta, "index")
    index = index if isinstance(index, int) else len(calls)
    call = calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": ""}}
    )
    if _get(delta, "id"):
        call["id"] = _get(delta, "id")
    function = _get(delta, "function")
    if _get(function, "name"):
        call["function"]["name"] = _get(function, "name")
    if _get(function, "arguments"):
        call["function"]["arguments"] += _get(function, "arguments")


# --- model facts ----------------------------------------------------------------------------

_max_input_cache: dict[tuple[str, str], int] = {}


def model_max_input_tokens(
    model: str, *, api_base: str = "", api_base_trusted: bool = False
) -> int | None:
    """litellm's ``max_input_tokens`` for ``model``; ``None`` when unknown (and for builtin/*).

    Known answers are cached per process. For providers that ask the server (Ollama), pass the
    bot's ``api_base``: it is asked only when staff approved it or it is listed, under the same
    outbound policy as a model call.
    """
    if not model or model.startswith(BUILTIN_PREFIX):
        return None
    if api_base and not (api_base_trusted or provider_policy.api_base_listed(api_base)):
        api_base = ""
    key = (model, api_base)
    if key in _max_input_cache:
        return _max_input_cache[key]
    try:
        with outbound.scope(outbound.policy_for(approved_bases=[api_base])):
            info = _litellm().get_model_info(model, api_base=api_base or None)
        value = info.get("max_input_tokens")
    except Exception:  # unknown to litellm's map, or the server could not say
        return None
    if not isinstance(value, int) or value <= 0:
        return None
    _max_input_cache[key] = value
    return value


def model_supports_images(model: str) -> bool:
    """Does ``model`` accept image content parts? litellm's capability lookup
    (``supports_vision``, from its local model map); built-in models and models litellm does not
    know do not."""
    if not model or model.startswith(BUILTIN_PREFIX):
        return False
    try:
        return bool(_litellm().supports_vision(model=model))
    except Exception:  # unknown to litellm's map
        return False
