"""A call's answer made into a ``Completion``: the output cap, tool calls, token usage, and the
one log line of each call."""

from __future__ import annotations

import json
import time
from typing import Any

import structlog

from chat_platform.llm.gateway.config import Completion, ModelCallFailed, ModelConfig
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from chat_platform.textcheck import text_made_storable

# The gateway's one logger name, whichever of its modules logs.
log = structlog.get_logger("chat_platform.llm.gateway")

# A provider that ignores max_tokens must not fill the worker's memory or the database: reading
# stops once the reply is past max_tokens plus a margin (finish_reason "length"). Tokens are
# counted only now and then (at 4 characters a token, then every 50 % more text); a hard stop by
# length catches one enormous chunk between counts.
_CAP_MARGIN_TOKENS = 64
_CAP_CHARS_PER_TOKEN = 16
_UNCOUNTED_MIN_CHARS = 256 * 1024


class OutputCap:
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


# --- what a provider bends: read as well as it can be, never a crash --------------------------
# Each of these failed a turn after its text had reached the user (an internal error, or "the
# database is unreachable" when a negative count broke a check constraint).

# The most a stored count holds; a count over it, negative, fractional or not a number is read
# as absent (counted here instead).
USAGE_COUNT_MAX = 2**31 - 1
FINISH_REASON_MAX_CHARS = 32


def usage_count(value: Any) -> int | None:
    """A usage count the provider reported, if it is one."""
    if value.__class__ is int:
        return value if 0 <= value <= USAGE_COUNT_MAX else None
    if isinstance(value, float) and value.is_integer() and 0 <= value <= USAGE_COUNT_MAX:
        return int(value)
    return None


def content_text(content: Any) -> str:
    """A message's or delta's content as text: a list of parts (the request's own shape, which
    some providers answer in) is its text parts joined; anything else not text, its JSON."""
    if content.__class__ is str:
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str) else ""
            for part in content
        )
    if isinstance(content, (dict, int, float)) and not isinstance(content, bool):
        return json.dumps(content)
    return str(content)


def arguments_text(arguments: Any) -> str:
    """A tool call's arguments as the JSON text the format has them in (an object is sent as
    such by some providers)."""
    if arguments.__class__ is str:
        return arguments
    return json.dumps(arguments) if isinstance(arguments, (dict, list)) else str(arguments)


def finish_reason_of(value: Any) -> str | None:
    """The provider's finish reason, if it can be one (else as if it sent none)."""
    if value.__class__ is str and len(value) <= FINISH_REASON_MAX_CHARS:
        return value
    return None


def clean_tool_call(call: dict) -> dict:
    function = call["function"]
    return {
        **call,
        "id": text_made_storable(str(call.get("id") or "")),
        "function": {
            "name": text_made_storable(str(function.get("name") or "")),
            "arguments": text_made_storable(arguments_text(function.get("arguments") or "")),
        },
    }


def tool_call_dict(call: Any) -> dict:
    function = field_of(call, "function")
    return {
        "id": field_of(call, "id") or "",
        "type": "function",
        "function": {
            "name": field_of(function, "name") or "",
            "arguments": field_of(function, "arguments") or "",
        },
    }


def field_of(obj: Any, name: str) -> Any:
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


def usage_tokens(
    usage: Any, config: ModelConfig, messages: list[dict], text: str, tool_calls: list[dict]
) -> tuple[int, int]:
    prompt = usage_count(field_of(usage, "prompt_tokens"))
    completion = usage_count(field_of(usage, "completion_tokens"))
    if not prompt:
        prompt = _estimated_prompt_tokens(config, messages)
    if completion is None or (completion == 0 and (text or tool_calls)):
        arguments = "".join(c["function"]["arguments"] for c in tool_calls)
        completion = count_tokens(text + arguments, model=config.model)
    return int(prompt), int(completion)


def log_done(
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


def log_failed(
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


def log_retry(config: ModelConfig, exc: BaseException, attempt: int, wait: float) -> None:
    log.warning(
        "llm_retry",
        model=config.model,
        attempt=attempt,
        error=type(exc).__name__,
        status_code=getattr(exc, "status_code", None),
        wait_s=round(wait, 3),
    )
