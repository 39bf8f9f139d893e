"""The built-in models as a litellm custom provider (``litellm.custom_provider_map``).

``build_handler()`` is called once, from the gateway's lazy litellm import; litellm is imported
inside it so that importing this module stays cheap. litellm calls the handler with keyword
arguments only (see ``litellm.main._complete_custom_providers``), which is why the methods take
``**kwargs`` instead of repeating litellm's long signatures.
"""

from collections.abc import AsyncIterator, Iterator
from typing import Any

from chat_platform.llm.builtin import (
    PROVIDER,
    BuiltinResult,
    UnknownBuiltinModel,
    embed,
    generate,
)
from chat_platform.llm.builtin.text import stream_pieces


def _run(kwargs: dict[str, Any]) -> BuiltinResult:
    from litellm.llms.custom_llm import CustomLLMError

    params = kwargs.get("optional_params") or {}
    max_tokens = params.get("max_tokens") or params.get("max_completion_tokens")
    try:
        return generate(
            kwargs["model"],
            kwargs["messages"],
            tools=params.get("tools"),
            tool_choice=params.get("tool_choice"),
            max_tokens=int(max_tokens) if max_tokens else None,
            stop=params.get("stop"),
        )
    except UnknownBuiltinModel as exc:
        raise CustomLLMError(status_code=404, message=str(exc)) from exc


def _fill(model_response: Any, result: BuiltinResult, model: str) -> Any:
    from litellm.types.utils import (
        ChatCompletionMessageToolCall,
        Choices,
        Function,
        Message,
        Usage,
    )

    tool_calls = [
        ChatCompletionMessageToolCall(
            id=call["id"],
            type="function",
            function=Function(
                name=call["function"]["name"], arguments=call["function"]["arguments"]
            ),
        )
        for call in result.tool_calls
    ]
    message = Message(
        content=result.text if result.text or not tool_calls else None,
        role="assistant",
        tool_calls=tool_calls or None,
    )
    model_response.choices = [Choices(finish_reason=result.finish_reason, index=0, message=message)]
    model_response.model = f"{PROVIDER}/{model}"
    model_response.usage = Usage(**result.usage())
    return model_response


def _chunks(result: BuiltinResult) -> Iterator[dict]:
    """GenericStreamingChunk dicts: word-sized text pieces, then tool calls, then the finish."""
    for piece in stream_pieces(result.text):
        yield {
            "text": piece,
            "tool_use": None,
            "is_finished": False,
            "finish_reason": "",
            "usage": None,
            "index": 0,
        }
    for index, call in enumerate(result.tool_calls):
        yield {
            "text": "",
            "tool_use": {
                "id": call["id"],
                "type": "function",
                "function": dict(call["function"]),
                "index": index,
            },
            "is_finished": False,
            "finish_reason": "",
            "usage": None,
            "index": 0,
        }
    yield {
        "text": "",
        "tool_use": None,
        "is_finished": True,
        "finish_reason": result.finish_reason,
        "usage": result.usage(),
        "index": 0,
    }


def _embedding(kwargs: dict[str, Any]) -> Any:
    """``litellm.embedding`` of a built-in model: the vectors in OpenAI's shape, with usage."""
    from litellm.llms.custom_llm import CustomLLMError
    from litellm.types.utils import Usage

    inputs = kwargs["input"]
    texts = [inputs] if isinstance(inputs, str) else list(inputs)
    try:
        vectors, tokens = embed(kwargs["model"], texts)
    except UnknownBuiltinModel as exc:
        raise CustomLLMError(status_code=404, message=str(exc)) from exc
    response = kwargs["model_response"]
    response.object = "list"
    response.data = [
        {"object": "embedding", "index": index, "embedding": vector}
        for index, vector in enumerate(vectors)
    ]
    response.model = f"{PROVIDER}/{kwargs['model'].removeprefix(f'{PROVIDER}/')}"
    response.usage = Usage(prompt_tokens=tokens, completion_tokens=0, total_tokens=tokens)
    return response


def build_handler() -> Any:
    from litellm import CustomLLM

    class BuiltinLLM(CustomLLM):
        """``builtin/recall``, ``builtin/extractive`` and ``builtin/embed``: offline,
        deterministic, in-process."""

        def completion(self, *args: Any, **kwargs: Any) -> Any:
            return _fill(kwargs["model_response"], _run(kwargs), kwargs["model"])

        # litellm passes keyword arguments only; the wide signatures are not repeated here.
        def streaming(self, *args: Any, **kwargs: Any) -> Iterator[dict]:
            return _chunks(_run(kwargs))

        async def acompletion(self, *args: Any, **kwargs: Any) -> Any:
            return self.completion(**kwargs)

        async def astreaming(self, *args: Any, **kwargs: Any) -> AsyncIterator[dict]:
            for chunk in _chunks(_run(kwargs)):
                yield chunk

        def embedding(self, *args: Any, **kwargs: Any) -> Any:
            return _embedding(kwargs)

        async def aembedding(self, *args: Any, **kwargs: Any) -> Any:
            return _embedding(kwargs)

    return BuiltinLLM()
