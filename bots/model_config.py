"""A bot's model as the gateway is given it: the one Bot -> ``ModelConfig`` (docs/compaction.md).

The chat turn, the model check and the compaction engine all start from here, so what a bot's
settings mean to a call (its connection or its api_base and key variable, the staff approvals
the provider policy reads) is said once. Callers that need a variation (the check's short
timeout, the summariser's temperature) derive it with ``dataclasses.replace``.

A bot with a provider connection (``connections``) calls the connection's base URL with its
key (decrypted here, for this call only, and registered with ``redaction``); staff set both, so
the endpoint and the model's provider are approved. The connection is re-checked on every call:
an owner who may no longer use it gets a refusal, not a call. A model of another provider than
the connection's (the ``builtin/extractive`` summariser of an OpenAI bot) is called as before.
"""

from bots.models import Bot
from chat_platform.llm.gateway import ModelConfig
from connections import crypto
from connections.models import Connection
from connections.queries import connection_call_base, connection_prefix, connection_usable_by
from connections.services import connection_api_key

CONNECTION_NOT_USABLE = "this bot's owner may no longer use its provider connection"


def connection_serves(connection: Connection, model: str) -> bool:
    prefix = connection_prefix(connection)
    if not prefix:  # a "litellm" connection made from mixed bots: any model but the built-ins
        return not model.startswith("builtin/")
    return model.startswith(prefix + "/")


def bot_model_config(bot: Bot, *, model: str | None = None) -> ModelConfig:
    """``model`` (default: the bot's chat model) called with the bot's provider settings."""
    chosen = model or bot.model
    connection = bot.connection if bot.connection_id else None
    if connection is not None and connection_serves(connection, chosen):
        refusal = ""
        api_key = ""
        if not connection_usable_by(connection=connection, user=bot.owner):
            refusal = CONNECTION_NOT_USABLE
        else:
            try:
                api_key = connection_api_key(connection)
            except crypto.KeyUnavailable as exc:
                refusal = str(exc)
        return ModelConfig(
            model=chosen,
            api_base=connection_call_base(connection),
            api_key=api_key,
            api_key_env="" if api_key else connection.api_key_env,
            api_base_trusted=True,
            model_trusted=True,
            refusal=refusal,
            temperature=bot.temperature,
            max_output_tokens=bot.max_output_tokens,
        )
    return ModelConfig(
        model=chosen,
        api_base=bot.api_base,
        api_key_env=bot.api_key_env,
        api_base_trusted=bot.api_base_trusted,
        model_trusted=bot.model_trusted(chosen),
        temperature=bot.temperature,
        max_output_tokens=bot.max_output_tokens,
    )
