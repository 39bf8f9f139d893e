"""Checking a ``POST /v1/chat/completions`` body: the model, the messages as transcript (the
tool protocol as OpenAI states it), the call's options, its session; a bad request gets
OpenAI's ``invalid_request_error`` naming the parameter."""

import math
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings

from chat_platform.textcheck import text_is_storable
from openai_api import client_tools
from openai_api.identity import ClientMessage
from openai_api.openai_errors import OpenAIError, invalid
from turns.services.content import COMPACT_COMMAND

MAX_MESSAGES = 10_000


MAX_STOP = 4


MAX_STOP_CHARS = 200


SESSION_ID_MAX_CHARS = 20


@dataclass
class ChatRequest:
    model: str
    history: list[ClientMessage]
    content: str
    stream: bool = False
    include_usage: bool = False
    options: dict[str, Any] = field(default_factory=dict)
    session_id: str | None = None
    # The request ends with results of the client's tools (``content`` is then ""): they
    # continue the turn whose reply called those tools.
    tool_results: list[ClientMessage] = field(default_factory=list)


def _text_of(content: object, param: str) -> str:
    """A message's text: a string, or a list of ``{"type": "text", "text"}`` parts."""
    if isinstance(content, str):
        text = content
    elif isinstance(content, list):
        parts = []
        for i, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "text":
                raise invalid("Only text content parts are supported.", f"{param}[{i}]")
            if not isinstance(part.get("text"), str):
                raise invalid("A text part needs a string 'text'.", f"{param}[{i}].text")
            parts.append(part["text"])
        text = "".join(parts)
    else:
        raise invalid("A message's content must be a string or a list of text parts.", param)
    if not text_is_storable(text):
        raise invalid("The text contains NUL characters or unpaired surrogates.", param)
    # UTF-8 takes at most 4 bytes a character: most texts need no encoding to be measured.
    if len(text) * 4 > settings.MESSAGE_MAX_BYTES and (
        len(text.encode("utf-8")) > settings.MESSAGE_MAX_BYTES
    ):
        raise OpenAIError(
            f"A message may hold at most {settings.MESSAGE_MAX_BYTES} bytes.",
            status=413,
            code="payload_too_large",
            param=param,
        )
    return text


def _session_id(value: object, param: str) -> str:
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    if not isinstance(value, str) or not value.isdigit() or len(value) > SESSION_ID_MAX_CHARS:
        raise invalid("A session id is a positive whole number.", param)
    return value


def _options(body: dict[str, Any]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n != 1):
        raise invalid("Only n=1 is supported.", "n")
    temperature = body.get("temperature")
    if temperature is not None:
        if (
            not isinstance(temperature, int | float)
            or isinstance(temperature, bool)
            or not math.isfinite(temperature)
            or not 0 <= temperature <= 2
        ):
            raise invalid("temperature must be a number from 0 to 2.", "temperature")
        options["temperature"] = float(temperature)
    for name in ("max_completion_tokens", "max_tokens"):
        value = body.get(name)
        if value is None:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10_000_000:
            raise invalid(f"{name} must be a positive whole number.", name)
        options.setdefault("max_tokens", value)
    stop = body.get("stop")
    if stop is not None:
        stops = [stop] if isinstance(stop, str) else stop
        if (
            not isinstance(stops, list)
            or len(stops) > MAX_STOP
            or not all(isinstance(s, str) and 0 < len(s) <= MAX_STOP_CHARS for s in stops)
            or not all(text_is_storable(s) for s in stops)
        ):
            raise invalid(
                f"stop must be a string or a list of at most {MAX_STOP} non-empty strings.",
                "stop",
            )
        if stops:
            options["stop"] = stops
    return options


def _transcript(messages: list[Any]) -> tuple[list[ClientMessage], list[str]]:
    """The request's messages as transcript (user, assistant, tool) and its system parts.
    The tool protocol holds as OpenAI states it: an assistant message's ``tool_calls`` are each
    answered by one ``tool`` message right after it, and a result answers a call before it. A
    request made only of tool results (an explicit session that holds the call) is checked
    against the stored call instead (``completion_send``)."""
    transcript: list[ClientMessage] = []
    systems: list[str] = []
    # The unanswered calls of the last assistant message (id -> function name).
    open_calls: dict[str, str] = {}
    # Results at the very start, answering calls the request does not hold.
    unmatched: set[str] = set()
    for i, message in enumerate(messages):
        param = f"messages[{i}]"
        if not isinstance(message, dict):
            raise invalid("Each message must be an object.", param)
        role = message.get("role")
        if role in ("system", "developer"):
            # A call parameter, not transcript: sent after the bot's prompt on this call only
            # (kept with the call's options, never as a message).
            text = _text_of(message.get("content"), f"{param}.content")
            if text.strip():
                systems.append(text)
            continue
        if role not in ("user", "assistant", "tool"):
            raise invalid(
                "role must be one of system, developer, user, assistant or tool.", f"{param}.role"
            )
        if open_calls and role != "tool":
            raise invalid(
                "An assistant message with tool_calls must be followed by one tool message "
                f"per call; no result for {', '.join(sorted(open_calls))}.",
                param,
            )
        if role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str) or not client_tools.call_id_ok(call_id):
                raise invalid("A tool message needs the tool_call_id it answers.", f"{param}")
            if call_id in open_calls:
                name = open_calls.pop(call_id)
            elif len(unmatched) == len(transcript) and call_id not in unmatched:
                name = ""  # answers a call stored in the session: checked at send
                unmatched.add(call_id)
            else:
                raise invalid(
                    f"The tool message answers {call_id!r}, which no assistant message before "
                    "it called (or which is answered already).",
                    f"{param}.tool_call_id",
                )
            text = _text_of(message.get("content"), f"{param}.content")
            transcript.append(
                ClientMessage(role="tool", content=text, tool_call_id=call_id, tool_name=name)
            )
            continue
        if unmatched:
            raise invalid(
                "Tool results without their call in the request may only make up the whole "
                "request (with X-Session-Id).",
                param,
            )
        calls: list[dict[str, Any]] = []
        if role == "assistant" and message.get("tool_calls") is not None:
            try:
                calls = client_tools.check_tool_calls(message["tool_calls"], f"{param}.tool_calls")
            except client_tools.BadToolPayload as exc:
                raise invalid(exc.message, exc.param) from None
            open_calls = {c["id"]: c["function"]["name"] for c in calls}
        content = message.get("content")
        text = "" if content is None and calls else _text_of(content, f"{param}.content")
        transcript.append(ClientMessage(role=role, content=text, tool_calls=calls))
    if open_calls and transcript and transcript[-1].role != "assistant":
        raise invalid(
            "An assistant message with tool_calls must be followed by one tool message per "
            f"call; no result for {', '.join(sorted(open_calls))}.",
            "messages",
        )
    return transcript, systems


def check_request(body: object, *, header_session_id: str | None) -> ChatRequest:
    if not isinstance(body, dict):
        raise invalid("The request body must be a JSON object.", None)
    model = body.get("model")
    if not isinstance(model, str) or not model or len(model) > 200:
        raise invalid("model must be the id of one of your bots (see /v1/models).", "model")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("messages must be a non-empty list.", "messages")
    if len(messages) > MAX_MESSAGES:
        raise invalid(f"At most {MAX_MESSAGES} messages per request.", "messages")
    try:
        tools = client_tools.check_tools(body["tools"]) if body.get("tools") is not None else []
        offered = client_tools.check_tool_choice(body.get("tool_choice"))
    except client_tools.BadToolPayload as exc:
        raise invalid(exc.message, exc.param) from None
    if body.get("functions") is not None or body.get("function_call") is not None:
        raise invalid("The legacy functions API is not supported: send tools.", "functions")
    if body.get("parallel_tool_calls") is not None and not isinstance(
        body["parallel_tool_calls"], bool
    ):
        raise invalid("parallel_tool_calls must be true or false.", "parallel_tool_calls")
    stream, include_usage = _stream_flags(body)
    options = _options(body)
    session_id = _request_session_id(body, header_session_id)
    transcript, systems = _transcript(messages)
    results, content = _new_turn(transcript, messages, session_id=session_id)
    if tools and offered:
        options["tools"] = tools
    if systems:
        options["system"] = "\n\n".join(systems)
    return ChatRequest(
        model=model,
        history=transcript,
        content=content,
        tool_results=results,
        stream=stream,
        include_usage=include_usage,
        options=options,
        session_id=session_id,
    )


def _stream_flags(body: dict[str, Any]) -> tuple[bool, bool]:
    """``stream`` and ``stream_options.include_usage``."""
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise invalid("stream must be true or false.", "stream")
    include_usage = False
    stream_options = body.get("stream_options")
    if stream_options is not None:
        if not isinstance(stream_options, dict) or not isinstance(
            stream_options.get("include_usage", False), bool
        ):
            raise invalid("stream_options.include_usage must be true or false.", "stream_options")
        include_usage = bool(stream_options.get("include_usage", False))
    return bool(stream), include_usage


def _request_session_id(body: dict[str, Any], header_session_id: str | None) -> str | None:
    """The session the request names: the ``X-Session-Id`` header, else
    ``metadata.session_id``; None when it names none."""
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise invalid("metadata must be an object.", "metadata")
    if header_session_id is not None:
        return _session_id(header_session_id, "X-Session-Id")
    if metadata and metadata.get("session_id") is not None:
        return _session_id(metadata["session_id"], "metadata.session_id")
    return None


def _new_turn(
    transcript: list[ClientMessage], messages: list[Any], *, session_id: str | None
) -> tuple[list[ClientMessage], str]:
    """What the request adds, taken off the end of ``transcript``: the results of the client's
    tools (content ""), else the user's new message (its content)."""
    results: list[ClientMessage] = []
    while transcript and transcript[-1].role == "tool":
        results.insert(0, transcript.pop())
    content = ""
    if not results:
        if not transcript or transcript[-1].role != "user":
            raise invalid(
                "The last message (after system messages) must be the user's, or tool results.",
                "messages",
            )
        last = transcript.pop()
        if not last.content.strip():
            raise invalid(
                "The last user message is empty.", f"messages[{len(messages) - 1}].content"
            )
        if COMPACT_COMMAND.match(last.content.strip()):
            raise invalid(
                "A message starting with /compact is a chat command, not available here.",
                "messages",
            )
        content = last.content
    if results and not results[0].tool_name and session_id is None:
        raise invalid(
            "Tool results need the call they answer: resend the conversation, or name its "
            "session (X-Session-Id).",
            "messages",
        )
    return results, content
