"""The built-in models, ``builtin/recall``, ``builtin/extractive`` and ``builtin/embed``
(docs/models.md).

Plain functions over OpenAI-shaped messages (``generate``) and over texts (``embed``), wrapped as
a litellm custom provider in ``provider`` so that they travel the same ``litellm.completion`` and
``litellm.embedding`` roads as any other model. Nothing here imports litellm (or the embedding
model's runtime) at module level.
"""

from chat_platform.llm.builtin import embedding as embed_model
from chat_platform.llm.builtin import extractive, recall
from chat_platform.llm.builtin.result import BuiltinResult

PROVIDER = "builtin"
MODELS = {"recall": recall.MODEL, "extractive": extractive.MODEL}
# Models that embed (``litellm.embedding``), not chat.
EMBEDDING_MODELS = {"embed": embed_model.MODEL}


class UnknownBuiltinModel(ValueError):
    pass


def generate(
    name: str,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    tool_choice: object = None,
    max_tokens: int | None = None,
) -> BuiltinResult:
    """Run built-in model ``name`` (``"recall"`` / ``"extractive"``, with or without the
    ``builtin/`` prefix)."""
    name = name.removeprefix(f"{PROVIDER}/")
    if name == "recall":
        return recall.respond(messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens)
    if name == "extractive":
        return extractive.respond(messages, max_tokens=max_tokens)
    raise UnknownBuiltinModel(
        f"unknown built-in model {PROVIDER}/{name} (known: {', '.join(MODELS.values())})"
    )


def embed(name: str, texts: list[str]) -> tuple[list[list[float]], int]:
    """Built-in embedding model ``name`` (``"embed"``, with or without the ``builtin/``
    prefix) over ``texts``: one vector per text, in order, and the tokens it read."""
    name = name.removeprefix(f"{PROVIDER}/")
    if name != "embed":
        known = ", ".join(EMBEDDING_MODELS.values())
        raise UnknownBuiltinModel(f"{PROVIDER}/{name} does not embed (known: {known})")
    return embed_model.embed(texts)


__all__ = [
    "EMBEDDING_MODELS",
    "MODELS",
    "PROVIDER",
    "BuiltinResult",
    "UnknownBuiltinModel",
    "embed",
    "generate",
]
