"""litellm, imported lazily, once (it costs seconds), and configured then: no debug banners, no
telemetry, no tokenizer downloads, no logging callbacks, the ``builtin`` provider registered.

Every part of the gateway reaches litellm through ``get()``, so a test can replace it in one
place."""

from __future__ import annotations

import threading
from typing import Any

_module: Any = None
_lock = threading.Lock()


def get() -> Any:
    """Import and configure litellm once per process (thread-safe).

    Until it is loaded, a caller first gives its thread's pooled database connection back
    (``chat_platform.dbconn``; not inside a transaction): the import is seconds of CPU, tens on a
    busy machine, and so is the wait of a caller queued behind the warm-up thread's import.
    Held through it, a web process's first sends emptied its pool, and every other request
    waited DATABASE_POOL_TIMEOUT and failed as ``service_unavailable``.
    """
    global _module
    if _module is not None:
        return _module
    from django.conf import settings

    if settings.configured:  # a script may call a model with no Django at all
        from chat_platform.dbconn import connection_release

        connection_release()
    with _lock:
        if _module is None:
            from chat_platform.offline import ensure_offline_environment

            ensure_offline_environment()
            import litellm

            from chat_platform.llm.builtin.provider import build_handler

            configure_lean(litellm)
            litellm.custom_provider_map = [
                entry for entry in litellm.custom_provider_map if entry["provider"] != "builtin"
            ] + [{"provider": "builtin", "custom_handler": build_handler()}]
            # litellm registers custom providers lazily on the first call; do it now so that
            # get_model_info and friends already know "builtin".
            from litellm.utils import custom_llm_setup

            custom_llm_setup()
            _module = litellm
    return _module


# litellm's switches, set once at import. Its defaults log every call and every chunk: each
# streamed chunk is handed to a thread pool that runs an asyncio loop for success "logging" even
# with no callback registered, and the end of a stream rebuilds the whole response for it. With
# these off a 50-chunk stream costs about half the CPU (bench/turn_overhead.py prints both).
# We log each call ourselves (llm_call); usage comes from the provider's usage chunk.
LEAN_SWITCHES: dict[str, Any] = {
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
    # usage: we count with our one counter instead (usage_tokens)
    "disable_token_counter": True,
    "disable_add_transform_inline_image_block": True,
    # The provider SDK's own retries stay off on every road (one retry policy: ours). litellm's
    # OpenAI embedding path turns ``max_retries=0`` into this default (``max_retries or
    # DEFAULT_MAX_RETRIES``), which would retry a 5xx twice behind our back.
    "DEFAULT_MAX_RETRIES": 0,
}


def configure_lean(litellm: Any) -> None:
    for name, value in LEAN_SWITCHES.items():
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
    get()
