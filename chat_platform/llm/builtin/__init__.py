"""The built-in models, ``builtin/recall``, ``builtin/extractive`` and ``builtin/embed``
(docs/models.md).

Plain functions over OpenAI-shaped messages (``generate``) and over texts (``embed``), wrapped as
a litellm custom provider in ``provider`` so that they travel the same ``litellm.completion`` and
``litellm.embedding`` roads as any other model. Nothing here imports litellm (or the embedding
model's runtime) at module level.
"""

from dataclasses import replace

from chat_platform.llm.builtin import embedding as embed_model
from chat_platform.llm.builtin import extractive, recall
from chat_platform.llm.builtin.result import BuiltinResult
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens

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
    stop: object = None,
) -> BuiltinResult:
    """Run built-in model ``name`` (``"recall"`` / ``"extractive"``, with or without the
    ``builtin/`` prefix); its text keeps to ``stop`` and ``max_tokens`` (``_within_limits``)."""
    name = name.removeprefix(f"{PROVIDER}/")
    if name == "recall":
        result = recall.respond(
            messages, tools=tools, tool_choice=tool_choice, max_tokens=max_tokens
        )
    elif name == "extractive":
        result = extractive.respond(messages, max_tokens=max_tokens)
    else:
        raise UnknownBuiltinModel(
            f"unknown built-in model {PROVIDER}/{name} (known: {', '.join(MODELS.values())})"
        )
    return _within_limits(result, stop=stop, max_tokens=max_tokens)


def _within_limits(result: BuiltinResult, *, stop: object, max_tokens: int | None) -> BuiltinResult:
    """The text held to the call's ``stop`` and ``max_tokens`` as a provider holds its own:
    cut before the first stop sequence (``stop``), or at the token cap (``length``). The
    fixed answers ignored both (a ``max_tokens`` of 3 gave 34 tokens)."""
    if result.tool_calls or not result.text:
        return result
    text, finish = result.text, result.finish_reason
    stops = (
        [stop] if isinstance(stop, str) else list(stop) if isinstance(stop, list | tuple) else []
    )
    cuts = [text.find(s) for s in stops if isinstance(s, str) and s and s in text]
    if cuts:
        text, finish = text[: min(cuts)], "stop"
    if max_tokens and count_tokens(text, model=recall.MODEL) > max_tokens:
        text, finish = truncate_to_tokens(text, max_tokens, model=recall.MODEL), "length"
    if (text, finish) == (result.text, result.finish_reason):
        return result
    return replace(
        result,
        text=text,
        finish_reason=finish,
        completion_tokens=count_tokens(text, model=recall.MODEL),
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
