"""``POST /v1/chat/completions`` as a service: check the request, find its conversation, send
its message through the one send path (``bots.services.send``), and read the reply back.

The request's messages map onto the transcript like this: client ``system``/``developer``
messages are call parameters (not stored, not in the chain); every other message before the
last is history (``openai_api.identity`` stores what the session lacks); the last one must be
the user's new message, sent exactly as the chat page sends one. The turn that answers it is
the chat's own turn (admission, compaction, memory, recall), with the call's ``temperature``,
``max_tokens`` and ``stop`` given to it through ``bots.turn_hooks``.
"""

import math
import uuid
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings
from django.db import transaction

from bots.models import Bot, ChatSession, Message
from bots.services.send import COMPACT_COMMAND, session_message_send
from chat_platform import errors
from chat_platform.textcheck import text_is_storable
from openai_api import identity, keys
from openai_api.identity import ClientMessage, Conversation
from openai_api.models import ApiKey, ApiTurn

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
        return OpenAIError(message, status=429, type_="tokens", code=code)
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
    if len(text.encode("utf-8")) > settings.MESSAGE_MAX_BYTES:
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
    if body.get("tools") or body.get("functions"):
        raise invalid("Client tools are not supported yet.", "tools")
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

    transcript: list[ClientMessage] = []
    systems: list[str] = []
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
        if role not in ("user", "assistant"):
            raise invalid(
                "role must be one of system, developer, user or assistant.", f"{param}.role"
            )
        if message.get("tool_calls"):
            raise invalid("Client tools are not supported yet.", f"{param}.tool_calls")
        text = _text_of(message.get("content"), f"{param}.content")
        transcript.append(ClientMessage(role=role, content=text))
    if not transcript or transcript[-1].role != "user":
        raise invalid("The last message (after system messages) must be the user's.", "messages")
    last = transcript[-1]
    if not last.content.strip():
        raise invalid("The last user message is empty.", f"messages[{len(messages) - 1}].content")
    if COMPACT_COMMAND.match(last.content.strip()):
        raise invalid(
            "A message starting with /compact is a chat command, not available here.", "messages"
        )
    if systems:
        options["system"] = "\n\n".join(systems)
    return ChatRequest(
        model=model,
        history=transcript[:-1],
        content=last.content,
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


def reply_read(*, reply_id: int) -> Message:
    return Message.objects.get(pk=reply_id)


def reply_links_write(*, reply: Message) -> None:
    turn = ApiTurn.objects.filter(reply_id=reply.pk).first()
    if turn is not None:
        identity.links_write(turn=turn, reply=reply)
