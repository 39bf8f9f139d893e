"""What a model call is given and what it gives back: ``ModelConfig``, ``Completion``, and the
one failure, ``ModelCallFailed`` (see the package doc)."""

from __future__ import annotations

from dataclasses import dataclass, field

BUILTIN_PREFIX = "builtin/"

# OpenAI-compatible local servers (llama.cpp, vLLM, LM Studio…) need no key, but the OpenAI SDK
# refuses to send a request without one; this placeholder is sent only to an explicit api_base
# when neither the bot nor the environment supplies a key.
NO_KEY_PLACEHOLDER = "no-key-required"

# The one answer for a key that is missing, unset or refused by the provider (see module doc).
KEY_FAILED = "authentication failed: the provider key is missing or was refused"


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
        context_window: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status_code = status_code
        self.transient = transient
        self.attempts = attempts
        # The provider refused the request as longer than its model's window.
        self.context_window = context_window
