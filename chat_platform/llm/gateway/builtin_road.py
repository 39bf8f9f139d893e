"""The built-in road: a ``builtin/`` model (``chat_platform.llm.builtin``) called in-process,
without litellm. The answer is what litellm's custom provider (``builtin.provider``) gives, in
OpenAI's shape: a completion for ``complete``, the chunks of a stream for ``stream``. litellm's
per-call work was ~4 ms of CPU a call (a summary of a tool step, each reply of a built-in bot),
and a process that only ever calls built-in models no longer imports it to do so."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from chat_platform.llm.gateway.config import BUILTIN_PREFIX


class BuiltinModelNotFound(Exception):
    """A ``builtin/`` model that does not exist (or does not do what was asked of it):
    classified as a provider's 404 would be (``errors.classify``)."""

    status_code = 404


def is_builtin(model: str) -> bool:
    return model.startswith(BUILTIN_PREFIX)


def _result(kwargs: dict[str, Any]) -> Any:
    from chat_platform.llm import builtin

    max_tokens = kwargs.get("max_tokens")
    try:
        result = builtin.generate(
            kwargs["model"],
            kwargs["messages"],
            tools=kwargs.get("tools"),
            tool_choice=kwargs.get("tool_choice"),
            max_tokens=int(max_tokens) if max_tokens else None,
            stop=kwargs.get("stop"),
        )
    except builtin.UnknownBuiltinModel as exc:
        raise BuiltinModelNotFound(str(exc)) from exc
    return result


def complete(kwargs: dict[str, Any]) -> dict[str, Any]:
    """A non-streamed answer, as ``litellm.completion`` gives it (as a dict)."""
    result = _result(kwargs)
    tool_calls = [
        {"id": call["id"], "type": "function", "function": dict(call["function"])}
        for call in result.tool_calls
    ]
    message: dict[str, Any] = {
        "role": "assistant",
        "content": result.text if result.text or not tool_calls else None,
    }
    if tool_calls:
        message["tool_calls"] = tool_calls
    return {
        "model": kwargs["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": result.finish_reason}],
        "usage": result.usage(),
    }


class BuiltinStream:
    """The chunks of a streamed answer: word-sized text pieces, then the tool calls, then the
    finish and the usage (the order an OpenAI-compatible server sends them in). The answer is
    made when the stream opens, as litellm's custom provider made it: a failure is the opening's
    failure, never a half-read stream's."""

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self._result = _result(kwargs)
        self._closed = False

    def __iter__(self) -> Iterator[dict[str, Any]]:
        from chat_platform.llm.builtin.text import stream_pieces

        result = self._result
        for piece in stream_pieces(result.text):
            if self._closed:
                return
            yield {"choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
        if result.tool_calls:
            calls = [
                {"index": i, "id": c["id"], "type": "function", "function": dict(c["function"])}
                for i, c in enumerate(result.tool_calls)
            ]
            yield {"choices": [{"index": 0, "delta": {"tool_calls": calls}, "finish_reason": None}]}
        yield {"choices": [{"index": 0, "delta": {}, "finish_reason": result.finish_reason}]}
        yield {"choices": [], "usage": result.usage()}

    def close(self) -> None:
        self._closed = True
