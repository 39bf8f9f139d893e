"""Which models a provider connection offers: ``models_list`` (docs/connections.md, "Refresh
models").

Two sources, one answer (``[DiscoveredModel(id, context_window)]``, sorted by id):

* an OpenAI-compatible server (vLLM, llama.cpp, LM Studio, Ollama's OpenAI endpoint, OpenAI
  itself): ``GET <base_url>/models`` with the connection's key as a Bearer token;
* a hosted provider litellm knows (``anthropic``, ``groq``…) without an explicit base URL:
  litellm's own model list for that provider (offline, from the model map it ships).

The request obeys the same outbound policy as a model call (``chat_platform.outbound``): the
base URL staff approved may be any address, nothing else is reached, and no redirect is
followed. Context windows come from the server's answer where it gives one (``context_length``,
``max_model_len``, ``context_window``…), else from litellm's map. Every failure is a
``DiscoveryFailed`` with a short reason fit to show (timed out, not JSON, not a model list…);
no text of it carries a key (it passes ``redaction``).
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from chat_platform import outbound, provider_policy, redaction

DISCOVERY_TIMEOUT_SECONDS = 10.0
# A list longer than this is cut (OpenRouter lists a few hundred; nothing needs thousands).
MAX_MODELS = 2000
MAX_ID_CHARS = 200
MAX_BODY_BYTES = 8 * 1024 * 1024
# Where OpenAI-compatible servers put a model's context length (vLLM, llama.cpp, OpenRouter,
# LM Studio, Together…), first match wins.
_WINDOW_FIELDS = ("context_window", "context_length", "max_model_len", "max_context_length")


class DiscoveryFailed(Exception):
    """The model list could not be read; ``str()`` is a short reason without a key."""


@dataclass(frozen=True)
class DiscoveredModel:
    id: str
    context_window: int | None = None

    def as_dict(self) -> dict[str, object]:
        data: dict[str, object] = {"id": self.id}
        if self.context_window:
            data["context_window"] = self.context_window
        return data


def _window(entry: dict) -> int | None:
    for name in _WINDOW_FIELDS:
        value = entry.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 100_000_000:
            return value
    meta = entry.get("meta")
    if isinstance(meta, dict):  # llama.cpp: {"meta": {"n_ctx_train": …}}
        value = meta.get("n_ctx_train")
        if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 100_000_000:
            return value
    return None


def _litellm_window(model: str) -> int | None:
    from chat_platform.llm.gateway import model_max_input_tokens

    return model_max_input_tokens(model)


def models_from_openai_list(
    body: object, *, litellm_prefix: str = "openai"
) -> list[DiscoveredModel]:
    """``{"data": [{"id": …}, …]}`` (Ollama and a few others also answer ``{"models": […]}``)
    as discovered models; raises ``DiscoveryFailed`` for anything else."""
    entries = None
    if isinstance(body, dict):
        entries = body.get("data")
        if entries is None:
            entries = body.get("models")
    if not isinstance(entries, list):
        raise DiscoveryFailed('the server\'s answer is not a model list (no "data" array)')
    found: dict[str, DiscoveredModel] = {}
    for entry in entries[:MAX_MODELS]:
        if not isinstance(entry, dict):
            continue
        model_id = entry.get("id") or entry.get("name") or entry.get("model")
        if not isinstance(model_id, str) or not model_id.strip() or len(model_id) > MAX_ID_CHARS:
            continue
        if "\x00" in model_id or not model_id.isprintable():
            continue
        model_id = model_id.strip()
        window = _window(entry) or _litellm_window(f"{litellm_prefix}/{model_id}")
        found[model_id] = DiscoveredModel(model_id, window)
    if entries and not found:
        raise DiscoveryFailed("the server's model list names no usable model id")
    return [found[k] for k in sorted(found)]


def models_list_openai_compatible(
    *, base_url: str, api_key: str = "", timeout: float | None = None
) -> list[DiscoveredModel]:
    """``GET <base_url>/models`` of an OpenAI-compatible server."""
    timeout = DISCOVERY_TIMEOUT_SECONDS if timeout is None else timeout
    if not provider_policy.api_base_is_http(base_url):
        raise DiscoveryFailed("the base URL is not a plain http(s) URL")
    url = base_url.rstrip("/") + "/models"
    headers = {"Accept": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    try:
        with (
            outbound.scope(outbound.policy_for(approved_bases=[base_url])),
            httpx.Client(timeout=timeout, follow_redirects=False) as client,
        ):
            response = client.get(url, headers=headers)
            raw = response.content[: MAX_BODY_BYTES + 1]
    except outbound.OutboundRefused as exc:
        raise DiscoveryFailed(redaction.redact(str(exc))) from None
    except httpx.TimeoutException:
        raise DiscoveryFailed(f"the server did not answer within {timeout:g} s") from None
    except httpx.HTTPError as exc:
        refused = outbound.refusal_in(exc)
        if refused is not None:
            raise DiscoveryFailed(redaction.redact(str(refused))) from None
        raise DiscoveryFailed("could not reach the server") from None
    if response.status_code in (401, 403):
        raise DiscoveryFailed(
            f"the server refused the key (HTTP {response.status_code}): check the connection's key"
        )
    if response.status_code != 200:
        raise DiscoveryFailed(f"the server answered HTTP {response.status_code} to GET /models")
    if len(raw) > MAX_BODY_BYTES:
        raise DiscoveryFailed("the server's model list is too large")
    try:
        body = response.json()
    except ValueError:
        raise DiscoveryFailed("the server's answer to GET /models is not JSON") from None
    return models_from_openai_list(body)


def models_list_litellm(*, provider: str) -> list[DiscoveredModel]:
    """The models litellm's bundled map lists for ``provider`` (no network)."""
    from chat_platform.llm.gateway import lazy_litellm

    litellm = lazy_litellm.get()
    names = sorted(set(getattr(litellm, "models_by_provider", {}).get(provider, ()) or ()))
    if not names:
        raise DiscoveryFailed(f"litellm lists no models for the provider {provider!r}")
    models = []
    for name in names[:MAX_MODELS]:
        model_id = name.removeprefix(f"{provider}/")
        models.append(DiscoveredModel(model_id, _litellm_window(f"{provider}/{model_id}")))
    return models
