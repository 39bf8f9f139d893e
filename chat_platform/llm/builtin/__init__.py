"""The built-in models, ``builtin/recall`` and ``builtin/extractive`` (docs/models.md).

Plain functions over OpenAI-shaped messages (``generate``), wrapped as a litellm custom provider in
``provider`` so that they travel the same ``litellm.completion`` road as any other model. Nothing
here imports litellm at module level.
"""

from chat_platform.llm.builtin import extractive, recall
from chat_platform.llm.builtin.result import BuiltinResult

PROVIDER = "builtin"
MODELS = {"recall": recall.MODEL, "extractive": extractive.MODEL}


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


__all__ = ["MODELS", "PROVIDER", "BuiltinResult", "UnknownBuiltinModel", "generate"]
