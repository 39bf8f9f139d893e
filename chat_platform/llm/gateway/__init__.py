"""The one road to every model: ``complete`` / ``stream`` over ``litellm.completion``.

Everything that talks to a model — chat turns, recall re-invocations, compaction — comes through
here, built-in models included, so timeouts, bounded retries, usage, ``finish_reason`` and
streaming behave the same for all of them. Two shortcuts inside it: a streamed call to an
OpenAI-compatible server (``openai/<model>`` with its own ``api_base``) is read directly by
``openai_compat`` instead of litellm's stream wrapper (a sixth of the CPU), and a built-in model
is called in-process (``builtin_road``; litellm's custom provider, ``builtin.provider``, answers
the same for whoever calls litellm itself); the same policy check, retries, errors and stop apply
on every road.

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

Its modules, by subject: ``config`` (what a call is given and gives back), ``lazy_litellm``
(litellm, imported once), ``request`` (building a call: policy, key, timeout), ``errors`` (the one
failure classifier and retry policy), ``results`` (output cap, tool calls, usage, log lines),
``call`` (``complete``), ``stop`` (a caller's Stop for unstreamed calls), ``streaming``
(``stream`` / ``ChatStream``), ``direct`` (the direct
road), ``embeddings`` (``embed``) and ``model_info`` (a model's window, whether it takes images).
Callers import the names below from ``chat_platform.llm.gateway``.
"""

from chat_platform.llm.gateway.call import complete
from chat_platform.llm.gateway.config import (
    BUILTIN_PREFIX,
    Completion,
    ModelCallFailed,
    ModelConfig,
)
from chat_platform.llm.gateway.embeddings import EmbeddingUnreadable, embed, embedding_tokens
from chat_platform.llm.gateway.errors import MODEL_CALL_RETRY
from chat_platform.llm.gateway.lazy_litellm import warm_up
from chat_platform.llm.gateway.model_info import (
    model_info_load,
    model_max_input_tokens,
    model_supports_images,
)
from chat_platform.llm.gateway.stop import stop_on, stop_requested
from chat_platform.llm.gateway.streaming import ChatStream, stream

__all__ = [
    "BUILTIN_PREFIX",
    "MODEL_CALL_RETRY",
    "ChatStream",
    "Completion",
    "EmbeddingUnreadable",
    "ModelCallFailed",
    "ModelConfig",
    "complete",
    "embed",
    "embedding_tokens",
    "model_info_load",
    "model_max_input_tokens",
    "model_supports_images",
    "stop_on",
    "stop_requested",
    "stream",
    "warm_up",
]
