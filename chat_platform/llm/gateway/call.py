"""One non-streaming call (``complete``): through litellm, a built-in model's in-process
(``builtin_road``)."""

from __future__ import annotations

import time
from functools import partial
from typing import Any

import tenacity

from chat_platform import outbound, redaction
from chat_platform.llm.gateway import builtin_road, lazy_litellm
from chat_platform.llm.gateway.config import Completion, ModelCallFailed, ModelConfig
from chat_platform.llm.gateway.errors import MODEL_CALL_RETRY, attempts_of, unavailable
from chat_platform.llm.gateway.request import call_kwargs, outbound_policy
from chat_platform.llm.gateway.results import (
    OutputCap,
    clean_tool_call,
    content_text,
    field_of,
    finish_reason_of,
    log_done,
    log_failed,
    log_retry,
    tool_call_dict,
    usage_tokens,
)
from chat_platform.llm.gateway.stop import stoppable
from chat_platform.textcheck import text_made_storable


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
        kwargs = call_kwargs(config, messages, tools=tools, max_tokens=max_tokens, stream=False)
    except ModelCallFailed as error:
        log_failed(config, error, started=started, streamed=False)
        raise
    builtin = builtin_road.is_builtin(config.model)
    call = builtin_road.complete if builtin else partial(_litellm_completion, lazy_litellm.get())
    policy = outbound_policy(config, kwargs)
    state: tenacity.RetryCallState | None = None
    try:
        for attempt in MODEL_CALL_RETRY.attempts(on_retry=partial(log_retry, config)):
            state = attempt.retry_state
            with attempt, outbound.scope(policy):
                # A built-in model answers in-process at once; a provider's call stops
                # waiting on the caller's Stop (``stop``).
                response = call(kwargs) if builtin else stoppable(partial(call, kwargs))
    except Exception as exc:
        failure = unavailable(config, exc, attempts=attempts_of(state), kwargs=kwargs)
        log_failed(config, failure, started=started, streamed=False)
        raise failure from exc
    attempts = attempts_of(state)

    choice = field_of(response, "choices")[0]
    message = field_of(choice, "message")
    tool_calls = [
        clean_tool_call(tool_call_dict(c)) for c in (field_of(message, "tool_calls") or [])
    ]
    cap = OutputCap(kwargs["max_tokens"], model=config.model, counted=False)
    text = cap.take(
        redaction.redact(text_made_storable(content_text(field_of(message, "content") or "")))
    )
    prompt_tokens, completion_tokens = usage_tokens(
        field_of(response, "usage"), config, messages, text, tool_calls
    )
    completion = Completion(
        text=text,
        finish_reason="length"
        if cap.reached
        else finish_reason_of(field_of(choice, "finish_reason"))
        or ("tool_calls" if tool_calls else "stop"),
        prompt_tokens=prompt_tokens,
        completion_tokens=completion_tokens,
        model=config.model,
        tool_calls=tool_calls,
    )
    log_done(config, completion, started=started, attempts=attempts, streamed=False)
    return completion


def _litellm_completion(litellm: Any, kwargs: dict[str, Any]) -> Any:
    return litellm.completion(**kwargs)
