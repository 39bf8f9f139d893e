"""Which provider credentials and endpoints a bot may use (docs/configuration.md, §4).

A bot names an environment variable (``api_key_env``) whose value the platform sends to the bot's
``api_base`` as its key. Left open, that lets anyone send ``SECRET_KEY`` to a server they control,
or make the server call internal addresses. So:

* ``api_key_env`` must be one of ``PROVIDER_KEY_ENV_ALLOWED`` (for everyone, staff included);
  the allow-list may never name a setting of Django or of this project.
* ``api_base`` must be an http(s) URL; staff may set any, everyone else only one under an entry
  of ``PROVIDER_API_BASES`` (same scheme, host and port, and a path at or below the entry's).
* a non-staff bot's model must name one of ``USER_PROVIDERS`` (providers whose only credential
  is the key we pass); with an empty ``api_base`` the provider's default endpoint is what would
  be called, so that endpoint must be listed too, and it is then passed explicitly (an
  ``OLLAMA_API_BASE`` or ``OPENAI_BASE_URL`` in the server's environment never redirects it).

Pure functions over strings; the lists are read from Django settings at call time, so the gateway
re-checks every call (a row written before these rules, or behind the service's back, never leaks).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from urllib.parse import urlsplit

# The provider key variables litellm documents for its main providers. Operators may replace
# the list with PROVIDER_KEY_ENV_ALLOWED (comma-separated).
DEFAULT_PROVIDER_KEY_ENVS: tuple[str, ...] = (
    "OPENAI_API_KEY",
    "ANTHROPIC_API_KEY",
    "AZURE_API_KEY",
    "AZURE_OPENAI_API_KEY",
    "AZURE_AI_API_KEY",
    "GEMINI_API_KEY",
    "MISTRAL_API_KEY",
    "CODESTRAL_API_KEY",
    "GROQ_API_KEY",
    "COHERE_API_KEY",
    "DEEPSEEK_API_KEY",
    "OPENROUTER_API_KEY",
    "TOGETHERAI_API_KEY",
    "XAI_API_KEY",
    "PERPLEXITYAI_API_KEY",
    "FIREWORKS_AI_API_KEY",
    "HUGGINGFACE_API_KEY",
    "DEEPINFRA_API_KEY",
    "NVIDIA_NIM_API_KEY",
    "CEREBRAS_API_KEY",
    "SAMBANOVA_API_KEY",
    "VOYAGE_API_KEY",
    "REPLICATE_API_KEY",
    "AI21_API_KEY",
    "OLLAMA_API_KEY",
    "HOSTED_VLLM_API_KEY",
    "LITELLM_PROXY_API_KEY",
)

# Variables the process itself relies on; never a provider key.
PROCESS_ENV_NAMES: frozenset[str] = frozenset(
    {
        "DJANGO_SETTINGS_MODULE",
        "LITELLM_LOCAL_MODEL_COST_MAP",
        "TIKTOKEN_CACHE_DIR",
        "PROVIDER_KEY_ENV_ALLOWED",
        "PROVIDER_API_BASES",
    }
)

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")

# One message for every call-time refusal: it names the rule, never a variable or its state.
KEY_ENV_NOT_ALLOWED = "this bot's api_key_env is not an allowed provider key variable"
API_BASE_NOT_ALLOWED = "this bot's api_base is not an allowed provider address"
PROVIDER_NOT_ALLOWED = "this bot's model names a provider its owner may not use"

BUILTIN_PROVIDER = "builtin"

# The providers a non-staff bot may name, and the endpoint litellm calls for each when a bot
# sets no api_base (None: the provider has no default, an api_base is required). Each of them
# authenticates with the api_key we pass and nothing else; providers that sign with ambient
# cloud credentials (bedrock, vertex_ai, sagemaker, azure AD…) are for staff-approved bots only.
USER_PROVIDERS: dict[str, str | None] = {
    "openai": "https://api.openai.com/v1",
    "hosted_vllm": None,
    "litellm_proxy": None,
    "lm_studio": None,
    "ollama": "http://localhost:11434",
    "ollama_chat": "http://localhost:11434",
    "anthropic": "https://api.anthropic.com",
    "groq": "https://api.groq.com/openai/v1",
    "mistral": "https://api.mistral.ai/v1",
    "deepseek": "https://api.deepseek.com",
    "openrouter": "https://openrouter.ai/api/v1",
    "xai": "https://api.x.ai/v1",
    "fireworks_ai": "https://api.fireworks.ai/inference/v1",
    "deepinfra": "https://api.deepinfra.com/v1/openai",
}


def key_env_allow_list_check(names: Iterable[str], *, forbidden: Iterable[str]) -> list[str]:
    """The configured allow-list, validated; raises ``ValueError`` naming the bad entries.

    ``forbidden``: the names of every Django and project setting and every variable the settings
    read. Settings turn the error into ``ImproperlyConfigured`` at start-up.
    """
    allowed = [name.strip() for name in names if name.strip()]
    malformed = sorted({name for name in allowed if not ENV_NAME.match(name)})
    if malformed:
        raise ValueError(f"not environment variable names: {', '.join(malformed)}")
    blocked = set(forbidden) | PROCESS_ENV_NAMES
    clashes = sorted({name for name in allowed if name in blocked})
    if clashes:
        names = ", ".join(clashes)
        raise ValueError(
            f"names settings of Django or of this project, never provider keys: {names}"
        )
    return allowed


def _settings_list(name: str) -> list[str]:
    from django.conf import settings

    return list(getattr(settings, name, ()) or ())


def key_env_allowed(name: str) -> bool:
    return bool(name) and name in _settings_list("PROVIDER_KEY_ENV_ALLOWED")


# --- api_base ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Endpoint:
    scheme: str
    host: str
    port: int
    path: str  # without a trailing slash; "" for the root


DEFAULT_PORTS = {"http": 80, "https": 443}
_UNSAFE_CHARACTERS = re.compile(r"[\x00-\x20\x7f\\]")


def endpoint_parse(url: str) -> Endpoint | None:
    """An http(s) URL reduced to what decides where a request goes; ``None`` when it is not a
    plain http(s) URL with a host (userinfo, query, fragment, dot segments and encoded dots are
    refused too: they make a listed prefix mean something else)."""
    if not isinstance(url, str) or not url or _UNSAFE_CHARACTERS.search(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        return None
    if "@" in parts.netloc or parts.query or parts.fragment or "?" in url or "#" in url:
        return None
    path = parts.path.rstrip("/")
    segments = path.split("/")
    if any(s in (".", "..") for s in segments) or "%2e" in path.lower() or "%2f" in path.lower():
        return None
    return Endpoint(scheme, parts.hostname.lower(), port or DEFAULT_PORTS[scheme], path)


def api_base_is_http(url: str) -> bool:
    return endpoint_parse(url) is not None


def same_origin(old: str, new: str) -> bool:
    """Whether two URLs reach the same server (scheme, host and port): a stored secret (a
    connection's key, a tool server's headers) is sent only to the origin it was given for."""
    a, b = endpoint_parse(old), endpoint_parse(new)
    if a is None or b is None:
        return old == new
    return (a.scheme, a.host, a.port) == (b.scheme, b.host, b.port)


def api_base_listed(url: str, *, listed: Iterable[str] | None = None) -> bool:
    """``url`` lies under an entry of ``PROVIDER_API_BASES`` (or of ``listed``): same scheme,
    host and port, and a path equal to the entry's or below it. Trailing slashes don't matter."""
    candidate = endpoint_parse(url)
    if candidate is None:
        return False
    entries = _settings_list("PROVIDER_API_BASES") if listed is None else list(listed)
    for entry in entries:
        allowed = endpoint_parse(entry)
        if allowed is None:
            continue
        if (candidate.scheme, candidate.host, candidate.port) != (
            allowed.scheme,
            allowed.host,
            allowed.port,
        ):
            continue
        if candidate.path == allowed.path or candidate.path.startswith(allowed.path + "/"):
            return True
    return False


def model_provider(model: str) -> str:
    """The litellm provider prefix of ``model`` (``openai/gpt-4o`` -> ``openai``); "" when the
    model names none (litellm would guess one from the name)."""
    prefix, slash, _ = model.partition("/")
    return prefix.strip().lower() if slash else ""


def provider_refusal(*, model: str, api_base: str) -> str | None:
    """Why a bot that staff did not approve may not call ``model`` at ``api_base`` (already
    checked against ``PROVIDER_API_BASES`` when set), or None."""
    provider = model_provider(model)
    if provider == BUILTIN_PROVIDER:
        return None
    if provider not in USER_PROVIDERS:
        return PROVIDER_NOT_ALLOWED
    if api_base:
        return None
    default = USER_PROVIDERS[provider]
    if default is None or not api_base_listed(default):
        return API_BASE_NOT_ALLOWED
    return None


def call_api_base(*, model: str, api_base: str, model_trusted: bool) -> str:
    """The api_base a call must be sent to: the bot's own, else (for a bot staff did not
    approve) the provider's listed default, passed explicitly so that no environment variable
    of the server can choose the endpoint. "" leaves it to litellm (built-in models, staff)."""
    if api_base or model_trusted:
        return api_base
    provider = model_provider(model)
    if provider == BUILTIN_PROVIDER:
        return ""
    return USER_PROVIDERS.get(provider) or ""


def call_refusal(
    *,
    api_key_env: str,
    api_base: str,
    api_base_trusted: bool,
    model: str = "",
    model_trusted: bool = True,
) -> str | None:
    """Why a model call with these settings must not be made (a user-safe reason), or None.

    ``api_base_trusted``: staff set or approved this api_base; ``model_trusted``: staff approved
    this model (with the bot's api_base). Anything else must pass the non-staff rules again."""
    if api_key_env and not key_env_allowed(api_key_env):
        return KEY_ENV_NOT_ALLOWED
    if api_base and not (
        api_base_is_http(api_base) and (api_base_trusted or api_base_listed(api_base))
    ):
        return API_BASE_NOT_ALLOWED
    if not (model_trusted and (api_base_trusted or not api_base)) and model:
        return provider_refusal(model=model, api_base=api_base)
    return None
