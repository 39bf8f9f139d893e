"""Building one call: the provider policy check, the key, the timeout, litellm's arguments, and
the outbound policy its requests obey (see the package doc)."""

from __future__ import annotations

import os
from typing import Any

from chat_platform import outbound, provider_policy
from chat_platform.llm.gateway.config import (
    BUILTIN_PREFIX,
    KEY_FAILED,
    NO_KEY_PLACEHOLDER,
    ModelCallFailed,
    ModelConfig,
)

_DEFAULTS = {
    "LLM_TIMEOUT_SECONDS": 120.0,
    "LLM_MAX_RETRIES": 2,
    "LLM_RETRY_BACKOFF_SECONDS": 1.0,
    "LLM_DIRECT_OPENAI_COMPATIBLE": True,
}


def setting(name: str) -> Any:
    from django.conf import settings

    if not settings.configured and not os.environ.get("DJANGO_SETTINGS_MODULE"):
        return _DEFAULTS[name]  # a bare script: the documented defaults, without trying
    try:
        return getattr(settings, name, _DEFAULTS[name])
    except Exception:  # settings not configured (a bare script): the documented defaults
        return _DEFAULTS[name]


# --- building a call ------------------------------------------------------------------------


def call_kwargs(
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
    timeout = config.timeout if config.timeout is not None else setting("LLM_TIMEOUT_SECONDS")
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
    api_key = call_api_key(config)
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


def call_api_key(config: ModelConfig) -> str | None:
    """The key the bot names, else the placeholder: never None for a provider, because litellm
    and the SDKs fill a missing key from the server's environment (``OPENAI_API_KEY``…)."""
    if config.model.startswith(BUILTIN_PREFIX):
        return None
    if config.api_key:
        return config.api_key
    if config.api_key_env:
        value = os.environ.get(config.api_key_env)
        if not value:
            raise ModelCallFailed(f"{config.model}: {KEY_FAILED}", status_code=401)
        return value
    return NO_KEY_PLACEHOLDER


def outbound_policy(config: ModelConfig, kwargs: dict[str, Any]) -> outbound.Policy:
    """Where this call's requests may go: its approved api_base (any address), or, for a
    staff-approved bot without one, wherever litellm sends that provider."""
    base = kwargs.get("api_base") or ""
    if not base:
        return outbound.policy_for(any_destination=config.model_trusted)
    return outbound.policy_for(approved_bases=[base])
