"""A bot's model as the gateway is given it: the one Bot -> ``ModelConfig`` (CONTRACT §5).

The chat turn, the model check and the compaction engine all start from here, so what a bot's
settings mean to a call (its api_base, key variable, the staff approvals the provider policy
reads) is said once. Callers that need a variation (the check's short timeout, the summariser's
temperature) derive it with ``dataclasses.replace``.
"""

from bots.models import Bot
from chat_platform.llm.gateway import ModelConfig


def bot_model_config(bot: Bot, *, model: str | None = None) -> ModelConfig:
    """``model`` (default: the bot's chat model) called with the bot's provider settings."""
    chosen = model or bot.model
    return ModelConfig(
        model=chosen,
        api_base=bot.api_base,
        api_key_env=bot.api_key_env,
        api_base_trusted=bot.api_base_trusted,
        model_trusted=bot.model_trusted(chosen),
        temperature=bot.temperature,
        max_output_tokens=bot.max_output_tokens,
    )
