"""OpenAI's wire formats, as its Python SDK reads them: errors, a chat completion, its stream
chunks, the model list. Pure functions of plain values."""

from typing import Any

# Our finish reasons -> OpenAI's. A reply the user stopped ended normally from the client's side.
_FINISH = {"stop": "stop", "length": "length", "tool_calls": "tool_calls", "stopped": "stop"}
_FINISH.update(content_filter="content_filter")


def finish_reason(ours: str) -> str:
    return _FINISH.get(ours, "stop")


def error_body(
    message: str, *, type_: str, code: str | None, param: str | None = None
) -> dict[str, Any]:
    return {"error": {"message": message, "type": type_, "code": code, "param": param}}


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion(
    *,
    completion_id: str,
    created: int,
    model: str,
    content: str,
    finish: str,
    prompt_tokens: int,
    completion_tokens: int,
    tool_calls: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A chat completion; with ``tool_calls`` (calls to the client's tools) its message
    carries them, and ``content`` is null when the model said nothing beside them."""
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content if content or not tool_calls else None,
        "refusal": None,
    }
    if tool_calls:
        message["tool_calls"] = [_call(c) for c in tool_calls]
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": finish,
            }
        ],
        "usage": usage(prompt_tokens, completion_tokens),
        "system_fingerprint": None,
    }


def chunk(
    *,
    completion_id: str,
    created: int,
    model: str,
    delta: dict[str, Any] | None,
    finish: str | None = None,
    with_usage_field: bool = False,
    usage_value: dict[str, int] | None = None,
) -> dict[str, Any]:
    """One ``chat.completion.chunk``; ``delta=None`` is the usage chunk (no choices)."""
    body: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": []
        if delta is None
        else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
    }
    if with_usage_field:
        body["usage"] = usage_value
    return body


def model_list(models: list[tuple[str, int, str]]) -> dict[str, Any]:
    """``(id, created, owned_by)`` each."""
    return {
        "object": "list",
        "data": [
            {"id": mid, "object": "model", "created": created, "owned_by": owner}
            for mid, created, owner in models
        ],
    }


def _call(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": function["name"], "arguments": function.get("arguments") or ""},
    }


def tool_call_deltas(tool_calls: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``delta``s that stream ``tool_calls`` as OpenAI does: per call, one opening it
    (index, id, type, name, empty arguments), then one with its arguments."""
    deltas: list[dict[str, Any]] = []
    for index, call in enumerate(tool_calls):
        whole = _call(call)
        opening = {**whole, "index": index, "function": {**whole["function"], "arguments": ""}}
        deltas.append({"tool_calls": [opening]})
        if whole["function"]["arguments"]:
            arguments = {"arguments": whole["function"]["arguments"]}
            deltas.append({"tool_calls": [{"index": index, "function": arguments}]})
    return deltas
