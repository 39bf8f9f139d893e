"""``POST /v1/chat/completions`` as a service: check the request, find its conversation, send
its message through the one send path (``turns.services.send``), and read the reply back.

The request's messages map onto the transcript like this: client ``system``/``developer``
messages are call parameters (not stored, not in the chain); every other message before the
last is history (``openai_api.identity`` stores what the session lacks); the last one must be
the user's new message, sent exactly as the chat page sends one. The turn that answers it is
the chat's own turn (admission, compaction, memory, recall), with the call's ``temperature``,
``max_tokens`` and ``stop`` given to it through ``turns.hooks``.
"""

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from bots import bulk
from bots.models import Bot, ChatSession, Message
from chat_platform import errors
from chat_platform.textcheck import text_is_storable
from openai_api import client_tools, identity, keys
from openai_api.identity import ClientMessage, Conversation
from openai_api.models import ApiKey, ApiTurn, ChainLink
from turns.services.send import COMPACT_COMMAND, reply_again_open, session_message_send

MAX_MESSAGES = 10_000
MAX_STOP = 4
MAX_STOP_CHARS = 200
SESSION_ID_MAX_CHARS = 20


class OpenAIError(Exception):
    """An answer in OpenAI's error shape."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type_: str = "invalid_request_error",
        code: str | None = None,
        param: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.status, self.type_, self.code, self.param = (
            message,
            status,
            type_,
            code,
            param,
        )


def invalid(message: str, param: str | None, code: str | None = None) -> OpenAIError:
    return OpenAIError(message, param=param, code=code)


def from_platform(exc: errors.PlatformError) -> OpenAIError:
    """The platform's errors, said the OpenAI way."""
    if isinstance(exc, errors.ContextTooLarge):
        return OpenAIError(exc.message, code="context_length_exceeded", param="messages")
    if isinstance(exc, errors.NotFound):
        return OpenAIError(exc.message, status=404, code="not_found")
    if isinstance(exc, errors.PermissionDenied):
        return OpenAIError(exc.message, status=403, code="permission_denied")
    if isinstance(exc, errors.PayloadTooLarge):
        return OpenAIError(exc.message, status=413, code="payload_too_large", param="messages")
    if isinstance(exc, errors.ValidationFailed):
        param = exc.details.get("param") if isinstance(exc.details, dict) else None
        return OpenAIError(exc.message, param=param if isinstance(param, str) else None)
    if isinstance(exc, errors.ServiceUnavailable):
        return OpenAIError(
            exc.message, status=503, type_="server_error", code="service_unavailable"
        )
    if isinstance(exc, errors.ModelUnavailable):
        return OpenAIError(exc.message, status=502, type_="server_error", code="model_unavailable")
    return OpenAIError(exc.message, status=500, type_="server_error", code=exc.code)


def quota_error(message: str) -> OpenAIError:
    """A spent daily token limit (the key's or its user's), as OpenAI says a spent token rate
    limit (docs/openai-api.md: ``rate_limit_exceeded``, 429); the message says when it resets."""
    return OpenAIError(message, status=429, type_="tokens", code="rate_limit_exceeded")


def reply_error(reply: Message) -> OpenAIError:
    """A reply that ended without completing, as the call's error."""
    code = reply.error_code or "internal_error"
    message = reply.error_message or "The reply did not complete."
    if code == errors.ContextTooLarge.code:
        return OpenAIError(message, code="context_length_exceeded", param="messages")
    if code == errors.ModelUnavailable.code:
        return OpenAIError(message, status=502, type_="server_error", code="model_unavailable")
    if code in (errors.ServiceUnavailable.code, "interrupted"):
        return OpenAIError(message, status=503, type_="server_error", code=code)
    if code == errors.NotFound.code:
        return OpenAIError(message, status=404, code="model_not_found", param="model")
    if code == errors.QuotaExceeded.code:
        return quota_error(message)
    return OpenAIError(message, status=500, type_="server_error", code=code)


# --- the request --------------------------------------------------------------------------------


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
    options = _options(body)

    session_id = None
    metadata = body.get("metadata")
    if metadata is not None and not isinstance(metadata, dict):
        raise invalid("metadata must be an object.", "metadata")
    if header_session_id is not None:
        session_id = _session_id(header_session_id, "X-Session-Id")
    elif metadata and metadata.get("session_id") is not None:
        session_id = _session_id(metadata["session_id"], "metadata.session_id")

    transcript, systems = _transcript(messages)
    results: list[ClientMessage] = []
    while transcript and transcript[-1].role == "tool":
        results.insert(0, transcript.pop())
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
    if results and not results[0].tool_name and session_id is None:
        raise invalid(
            "Tool results need the call they answer: resend the conversation, or name its "
            "session (X-Session-Id).",
            "messages",
        )
    if tools and offered:
        options["tools"] = tools
    if systems:
        options["system"] = "\n\n".join(systems)
    return ChatRequest(
        model=model,
        history=transcript,
        content="" if results else last.content,
        tool_results=results,
        stream=bool(stream),
        include_usage=include_usage,
        options=options,
        session_id=session_id,
    )


# --- running it -------------------------------------------------------------------------------


@dataclass
class Started:
    session: ChatSession
    user_message: Message
    reply: Message
    model_id: str
    conversation: Conversation
    dispatched: bool | None


def completion_bot(*, key: ApiKey, request: ChatRequest) -> Bot:
    try:
        return keys.key_bot_for_model(key=key, model=request.model)
    except errors.NotFound as exc:
        raise OpenAIError(exc.message, status=404, code="model_not_found", param="model") from None


def completion_resolve(*, key: ApiKey, bot: Bot, request: ChatRequest) -> Conversation:
    """Find or make the session and store the history it lacks (committed on return)."""
    try:
        with transaction.atomic():
            return identity.conversation_resolve(
                key=key, bot=bot, history=request.history, explicit_session_id=request.session_id
            )
    except errors.NotFound as exc:
        raise OpenAIError(
            exc.message,
            status=404,
            code="session_not_found",
            param="X-Session-Id" if request.session_id else None,
        ) from None


def completion_send(
    *, key: ApiKey, bot: Bot, request: ChatRequest, conversation: Conversation
) -> Started:
    """Send the request's message through the one send path; the turn is handed to a worker
    when this commits, with its ``ApiTurn`` (options, pending links) already in place."""
    if request.tool_results:
        return _tool_results_send(key=key, request=request, conversation=conversation)
    user_message = identity.ClientMessage(role="user", content=request.content)
    with transaction.atomic():
        result = session_message_send(
            user=key.user,
            session_id=conversation.session.pk,
            content=request.content,
            client_id=f"{identity.API_CLIENT_ID_PREFIX}{uuid.uuid4().hex}",
        )
        reply = result.assistant_message
        assert reply is not None  # commands were refused in check_request
        ApiTurn.objects.create(
            reply=reply,
            session=conversation.session,
            key=key,
            options=request.options,
            base_position=conversation.base_position,
            base_hash=conversation.base_hash,
            pending=[[result.user_message.pk, user_message.fingerprint]],
        )
        started = Started(
            session=conversation.session,
            user_message=result.user_message,
            reply=reply,
            model_id=request.model,
            conversation=conversation,
            dispatched=None,
        )
        transaction.on_commit(lambda: setattr(started, "dispatched", result.dispatched))
    return started


def _answered_call(*, conversation: Conversation, request: ChatRequest) -> Message:
    """The stored assistant message whose calls the request's results answer: the newest of
    the conversation as the client holds it. Each of its calls gets exactly one result."""
    link = (
        ChainLink.objects.filter(session=conversation.session, position=conversation.base_position)
        .select_related("message")
        .first()
        if conversation.base_position
        else None
    )
    call = link.message if link is not None else None
    calls = {c["id"]: c["function"]["name"] for c in (call.tool_calls if call else [])}
    sent = [r.tool_call_id for r in request.tool_results]
    unknown = [i for i in sent if i not in calls]
    if call is None or unknown:
        raise invalid(
            f"No call {', '.join(unknown or sent)!s} is waiting for a result in this conversation.",
            "messages",
            code="unknown_tool_call",
        )
    missing = sorted(set(calls) - set(sent))
    if missing:
        raise invalid(
            f"Each tool call needs one result; none for {', '.join(missing)}.", "messages"
        )
    if Message.objects.filter(
        session_id=call.session_id, seq__gt=call.seq, role=Message.Role.TOOL, tool_call_id__in=sent
    ).exists():
        raise invalid(
            "These tool calls were answered already.", "messages", code="unknown_tool_call"
        )
    return call


def _tool_results_send(*, key: ApiKey, request: ChatRequest, conversation: Conversation) -> Started:
    """Store the client's tool results after the call they answer and open the reply that
    continues the turn (``turns.services.send.reply_again_open``: the pending reply, its
    refusal if it can never fit, its hand-over after commit). The turn gets the exchange (the
    call and the results) through ``turns.hooks`` and sends it whole, like a recall
    exchange: a result never reaches the model without its call."""
    session = conversation.session
    with transaction.atomic():
        call = _answered_call(conversation=conversation, request=request)
        names = {c["id"]: c["function"]["name"] for c in call.tool_calls}
        model = session.chat_model
        last = len(request.tool_results) - 1
        rows = [
            identity.history_row(
                ClientMessage(
                    role="tool",
                    content=r.content,
                    tool_call_id=r.tool_call_id,
                    tool_name=names[r.tool_call_id],
                ),
                model=model,
                # The turn's hooks tell an API turn by its message's client_id.
                client_id=f"{identity.API_CLIENT_ID_PREFIX}{uuid.uuid4().hex}" if i == last else "",
            )
            for i, r in enumerate(request.tool_results)
        ]
        stored = bulk.history_append(session=session, messages=rows)
        result = reply_again_open(session=session, user_message=stored[-1])
        reply = result.assistant_message
        assert reply is not None
        ApiTurn.objects.create(
            reply=reply,
            session=session,
            key=key,
            options={**request.options, "exchange": [call.pk, *(m.pk for m in stored[:-1])]},
            base_position=conversation.base_position,
            base_hash=conversation.base_hash,
            pending=[
                [m.pk, r.fingerprint] for m, r in zip(stored, request.tool_results, strict=True)
            ],
        )
        started = Started(
            session=session,
            user_message=stored[-1],
            reply=reply,
            model_id=request.model,
            conversation=conversation,
            dispatched=None,
        )
        transaction.on_commit(lambda: setattr(started, "dispatched", result.dispatched))
    return started


def reply_read(*, reply_id: int) -> Message:
    return Message.objects.get(pk=reply_id)


def reply_links_write(*, reply: Message) -> None:
    turn = ApiTurn.objects.filter(reply_id=reply.pk).first()
    if turn is not None:
        identity.links_write(turn=turn, reply=reply)
