"""A bot's model names that are not a provider's: the built-in models' names for each job
(docs/models.md), and an embedding model's shape. Part of ``turns.bot_validation``'s checks."""

from bots.models import DEFAULT_EMBEDDING_MODEL, Bot
from chat_platform import provider_policy
from chat_platform.errors import ValidationFailed
from chat_platform.llm import builtin

_BUILTIN_CHAT = tuple(builtin.MODELS.values())  # builtin/recall, builtin/extractive
_BUILTIN_REFUSED = {
    "model": "Not a built-in chat model: the built-in ones are {chat}.",
    "allowed_models": "{model}: not a built-in chat model: the built-in ones are {chat}.",
    "compaction_model": "Not a built-in summariser: the built-in ones are {chat}.",
    "embedding_model": (
        f"The only built-in embedding model is {DEFAULT_EMBEDDING_MODEL}: "
        "name it or a provider's model."
    ),
}


def check_bot_builtin_models(*, bot: Bot) -> None:
    """A model name of the ``builtin`` provider names a built-in model that does that job: a
    chat model (or summariser) is ``builtin/recall`` or ``builtin/extractive``, an embedding
    model ``builtin/embed``. Written in other letters (``Builtin/Recall``) it is that model;
    any other ``builtin/…`` name would fail every call, so it is refused here."""
    errors: dict[str, list[str]] = {}
    chat = " and ".join(_BUILTIN_CHAT)

    def known(field: str, model: object) -> object:
        if not isinstance(model, str) or provider_policy.model_provider(model) != builtin.PROVIDER:
            return model  # a provider's, or not a name at all (the shape checks say so)
        wanted = (DEFAULT_EMBEDDING_MODEL,) if field == "embedding_model" else _BUILTIN_CHAT
        name = f"{builtin.PROVIDER}/{model.partition('/')[2].strip().lower()}"
        if name in wanted:
            return name
        errors.setdefault(field, []).append(_BUILTIN_REFUSED[field].format(model=model, chat=chat))
        return model

    for field in ("model", "compaction_model", "embedding_model"):
        setattr(bot, field, known(field, getattr(bot, field)))
    if isinstance(bot.allowed_models, list):
        bot.allowed_models = [known("allowed_models", m) for m in bot.allowed_models]
    if errors:
        raise ValidationFailed(details=errors)


def check_bot_embedding_model(*, bot: Bot) -> None:
    """An embedding model is the built-in one or a provider's, and one line of text."""
    model = bot.embedding_model
    if not model:
        return
    if model.strip() != model or any(ch.isspace() for ch in model):
        raise ValidationFailed(details={"embedding_model": ["A model name has no spaces."]})
