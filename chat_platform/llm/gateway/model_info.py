"""What litellm knows of a model: its input window and whether it takes images."""

from __future__ import annotations

from collections.abc import Iterable

from chat_platform import outbound, provider_policy
from chat_platform.llm.gateway import lazy_litellm
from chat_platform.llm.gateway.config import BUILTIN_PREFIX

# (model, api_base) -> its input window; None: a model litellm's map does not know.
_max_input_cache: dict[tuple[str, str], int | None] = {}


def model_info_load(models: Iterable[str]) -> None:
    """Import litellm now if any of ``models`` will be looked up in its map.

    Its first import costs seconds of CPU (docs/configuration.md): a caller about to open a
    transaction that takes row locks calls this first, so that no lock is held while it runs.
    Once per process; a no-op for built-in models and once litellm is loaded.
    """
    if any(model and not model.startswith(BUILTIN_PREFIX) for model in models):
        lazy_litellm.get()


def model_max_input_tokens(
    model: str, *, api_base: str = "", api_base_trusted: bool = False
) -> int | None:
    """litellm's ``max_input_tokens`` for ``model``; ``None`` when unknown (and for builtin/*).

    Known answers are cached per process, and so is a model litellm's map does not know
    (``ModelNotMappedError``: its map is read once per process, and a turn of a bot without a
    ``context_window`` asks three times; litellm looked it up and raised each time,
    docs/performance.md "A turn's CPU, eighth pass"). For providers that ask the server
    (Ollama), pass the bot's ``api_base``: it is asked only when staff approved it or it is
    listed, under the same outbound policy as a model call; a server that could not say is
    asked again next time.
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
            info = lazy_litellm.get().get_model_info(model, api_base=api_base or None)
        value = info.get("max_input_tokens")
    except Exception as exc:  # unknown to litellm's map, or the server could not say
        if type(exc).__name__ == "ModelNotMappedError":
            _max_input_cache[key] = None
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
        return bool(lazy_litellm.get().supports_vision(model=model))
    except Exception:  # unknown to litellm's map
        return False
