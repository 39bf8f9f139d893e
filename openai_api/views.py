"""``/v1/``: the OpenAI-compatible interface (docs/openai-api.md). Async views: a call waits for its
reply (or streams it) without holding the server's one thread for sync views; every database
step runs in a worker thread. Authentication is ``Authorization: Bearer <key>`` only (no
cookies, hence no CSRF). Every error is OpenAI's shape; every 500 is logged with its traceback,
and a key's text is never logged.
"""

import json
import time
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import structlog
from asgiref.sync import sync_to_async
from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.db import close_old_connections
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.csrf import csrf_exempt

from bots.models import Message
from chat_platform import errors, heavy
from chat_platform.jsontext import json_loads
from chat_platform.outage import OUTAGE_ERRORS
from openai_api import completions, keys, openai_errors, request_check, shapes
from openai_api.completions import Started
from openai_api.frame_listener import FrameListener
from openai_api.models import ApiKey
from openai_api.openai_errors import OpenAIError
from turns.services.message import message_wait_finished

log = structlog.get_logger(__name__)

SESSION_HEADER = "X-Session-Id"
# How often a stream without news looks at the reply in the database (frames are lossy).
STREAM_RECHECK_SECONDS = 1.0


def _error(exc: OpenAIError) -> JsonResponse:
    response = JsonResponse(
        shapes.error_body(exc.message, type_=exc.type_, code=exc.code, param=exc.param),
        status=exc.status,
    )
    if exc.status == 401:
        response["WWW-Authenticate"] = "Bearer"
    if exc.retry_after is not None:
        response["Retry-After"] = str(exc.retry_after)
    return response


# A non-streaming call's wait for its reply (up to CHAT_WAIT_TIMEOUT_SECONDS) runs on threads of
# its own. On the event loop's default pool (min(32, cores + 4) threads: 6 on two cores), six
# slow calls held every thread that websocket sends and the other /v1 steps run on, and other
# users waited as long as the slowest provider. The wait holds no database connection.
WAIT_THREADS = 64
_WAITS = ThreadPoolExecutor(max_workers=WAIT_THREADS, thread_name_prefix="v1-wait")


def _in_thread(
    func: Callable[..., Any], executor: ThreadPoolExecutor | None = None
) -> Callable[..., Any]:
    """Run a database step off the event loop, on a pooled connection given back afterwards."""

    def run(**kwargs: Any) -> Any:
        close_old_connections()
        try:
            return func(**kwargs)
        finally:
            close_old_connections()

    return sync_to_async(run, thread_sensitive=False, executor=executor)


def _authenticate(request: HttpRequest) -> ApiKey:
    header = request.headers.get("Authorization", "")
    scheme, _, raw = header.partition(" ")
    if scheme.lower() != "bearer" or not raw.strip():
        raise OpenAIError(
            "Send your API key as 'Authorization: Bearer <key>'.",
            status=401,
            code="invalid_api_key",
        )
    try:
        return keys.key_authenticate(raw=raw.strip())
    except keys.KeyRefused:
        raise OpenAIError(
            "Incorrect, revoked or expired API key.", status=401, code="invalid_api_key"
        ) from None


def _guarded(view: Callable[..., Any]) -> Callable[..., Any]:
    """Every failure of a /v1/ view, answered in OpenAI's shape."""

    async def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            return await view(request, *args, **kwargs)
        except OpenAIError as exc:
            return _error(exc)
        except errors.PlatformError as exc:
            return _error(openai_errors.from_platform(exc))
        except OUTAGE_ERRORS:
            log.exception("openai_api_service_unavailable", path=request.path)
            return _error(
                OpenAIError(
                    "A service the platform needs is unavailable. Try again in a moment.",
                    status=503,
                    type_="server_error",
                    code="service_unavailable",
                )
            )
        except Exception:
            log.exception("openai_api_internal_error", path=request.path)
            return _error(
                OpenAIError(
                    "Something went wrong on the server.",
                    status=500,
                    type_="server_error",
                    code="internal_error",
                )
            )

    return csrf_exempt(wrapped)


def _method(request: HttpRequest, allowed: str) -> None:
    if request.method != allowed:
        raise OpenAIError(
            f"Method {request.method} is not allowed here; use {allowed}.",
            status=405,
            code="method_not_allowed",
        )


# --- GET /v1/models -------------------------------------------------------------------------


def _model_list(*, request: HttpRequest) -> dict[str, Any]:
    key = _authenticate(request)
    return shapes.model_list(
        [
            (model_id, int(bot.created_at.timestamp()), bot.owner.get_username())
            for model_id, bot in keys.key_models(key=key).items()
        ]
    )


@_guarded
async def models_view(request: HttpRequest) -> HttpResponse:
    _method(request, "GET")
    return JsonResponse(await _in_thread(_model_list)(request=request))


def _model_one(*, request: HttpRequest, model_id: str) -> dict[str, Any]:
    """One entry of ``/v1/models`` (``client.models.retrieve``), or ``model_not_found``."""
    key = _authenticate(request)
    try:  # as a completion finds it: ``<owner>/<slug>`` names a shared bot listed by its slug
        bot = keys.key_bot_for_model(key=key, model=model_id)
    except errors.NotFound as exc:
        raise OpenAIError(exc.message, status=404, code="model_not_found", param="model") from None
    (entry,) = shapes.model_list(
        [(model_id, int(bot.created_at.timestamp()), bot.owner.get_username())]
    )["data"]
    return entry


@_guarded
async def model_view(request: HttpRequest, model_id: str) -> HttpResponse:
    _method(request, "GET")
    return JsonResponse(await _in_thread(_model_one)(request=request, model_id=model_id))


# --- POST /v1/chat/completions ----------------------------------------------------------------


def _body(request: HttpRequest) -> Any:
    try:
        raw = request.body
    except RequestDataTooBig:
        raise OpenAIError(
            "The request body is too large.", status=413, code="payload_too_large"
        ) from None
    try:
        return json_loads(raw)
    except ValueError as exc:
        raise openai_errors.invalid(f"The body is not valid JSON: {exc}", None) from None


def _prepare(*, request: HttpRequest) -> tuple[ApiKey, Any, Any, Any, str | None]:
    key = _authenticate(request)
    # A completion writes (the call's messages, a session): a read key is refused before the
    # body is read, and nothing is stored.
    keys.key_check_write(key=key)
    chat = request_check.check_request(
        _body(request), header_session_id=request.headers.get(SESSION_HEADER)
    )
    bot = completions.completion_bot(key=key, request=chat)
    try:
        keys.key_budget_check(key=key)
    except errors.QuotaExceeded as exc:
        raise openai_errors.quota_error(exc.message) from None
    # A call that waits for its reply holds a heavy-request slot, as a ``wait: true`` send does
    # (docs/security.md), taken before resolving may store the history. A stream holds no thread.
    slot = None if chat.stream else heavy.slot_take(user_id=key.user_id, kind="v1_wait")
    try:
        conversation = completions.completion_resolve(key=key, bot=bot, request=chat)
    except BaseException:
        if slot is not None:
            heavy.slot_give_back(user_id=key.user_id, token=slot)
        raise
    return key, bot, chat, conversation, slot


def _send(**kwargs: Any) -> Started:
    return completions.completion_send(**kwargs)


def _refused_at_send(started: Started) -> OpenAIError | None:
    reply = completions.reply_read(reply_id=started.reply.pk)
    started.reply = reply
    if reply.status == Message.Status.FAILED:
        return openai_errors.reply_error(reply)
    if started.dispatched is False and not reply.is_finished:
        return OpenAIError(
            "The message is saved, but the task queue is unavailable: the reply starts by itself "
            "when it is back.",
            status=503,
            type_="server_error",
            code="service_unavailable",
        )
    return None


def _wait(*, started: Started) -> Message:
    reply = message_wait_finished(
        message_id=started.reply.pk, timeout=settings.CHAT_WAIT_TIMEOUT_SECONDS
    )
    if reply.status == Message.Status.COMPLETE:
        completions.reply_links_write(reply=reply)
    return reply


def _completion_id(reply: Message) -> str:
    return f"chatcmpl-{reply.pk}"


def _with_session(response: HttpResponse, started: Started) -> HttpResponse:
    response[SESSION_HEADER] = str(started.session.pk)
    return response


@_guarded
async def chat_completions_view(request: HttpRequest) -> HttpResponse:
    _method(request, "POST")
    key, bot, chat, conversation, slot = await _in_thread(_prepare)(request=request)
    try:
        return await _completion(key, bot, chat, conversation)
    finally:
        if slot is not None:
            await _in_thread(heavy.slot_give_back)(user_id=key.user_id, token=slot)


async def _completion(key: ApiKey, bot: Any, chat: Any, conversation: Any) -> HttpResponse:
    listener = FrameListener() if chat.stream else None
    if listener is not None:
        # Joined before the send: no delta of the reply can go by unheard.
        await listener.open(conversation.session.pk)
    try:
        started: Started = await _in_thread(_send)(
            key=key, bot=bot, request=chat, conversation=conversation
        )
        refused = await _in_thread(_refused_at_send)(started=started)
        if refused is not None:
            answer = _error(refused)
            if refused.code == "service_unavailable":
                # Stored, and started by itself once the queue is back: the SDK's retry would
                # store the question again, in a new chat (its request matches none).
                answer["x-should-retry"] = "false"
            return _with_session(answer, started)
    except BaseException:
        if listener is not None:
            await listener.close()
        raise
    if listener is not None:
        try:
            first, ended = await _first_news(started, listener)
        except BaseException:
            await listener.close()
            raise
        if ended is not None and ended.status == Message.Status.FAILED and not ended.content:
            # Refused by its turn (too large for B, a day's limit): its status, as unstreamed.
            await listener.close()
            return _with_session(_error(openai_errors.reply_error(ended)), started)
        response = StreamingHttpResponse(
            _stream(started, listener, include_usage=chat.include_usage, first=first, ended=ended),
            content_type="text/event-stream",
        )
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"
        return _with_session(response, started)

    reply = await _in_thread(_wait, _WAITS)(started=started)
    if not reply.is_finished:
        # The reply goes on being written in its chat (X-Session-Id): a client reads it there.
        # The SDK retries a 5xx unless told not to, and its retry stored the question again.
        timeout = _error(
            OpenAIError(
                "The reply is taking too long; it is still being written.",
                status=504,
                type_="server_error",
                code="timeout",
            )
        )
        timeout["x-should-retry"] = "false"
        return _with_session(timeout, started)
    if reply.status != Message.Status.COMPLETE:
        return _with_session(_error(openai_errors.reply_error(reply)), started)
    body = shapes.completion(
        completion_id=_completion_id(reply),
        created=int(reply.created_at.timestamp()),
        model=started.model_id,
        content=reply.content,
        finish=shapes.finish_reason(reply.finish_reason),
        prompt_tokens=reply.prompt_tokens or 0,
        completion_tokens=reply.completion_tokens or 0,
        tool_calls=reply.tool_calls or None,
    )
    return _with_session(JsonResponse(body), started)


def _sse(data: Any) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False, separators=(',', ':'))}\n\n".encode()


def _frame_of(frame: dict[str, Any], reply_id: int) -> str | None:
    kind = frame.get("type")
    if kind == "message.delta" and frame.get("message_id") == reply_id:
        return "delta"
    if kind == "message.completed" and (frame.get("message") or {}).get("id") == reply_id:
        return "end"
    if kind == "message.failed" and frame.get("message_id") == reply_id:
        return "end"
    return None


def _finished_reply(*, reply_id: int) -> Message | None:
    reply = completions.reply_read(reply_id=reply_id)
    return reply if reply.is_finished else None


async def _first_news(
    started: Started, listener: FrameListener
) -> tuple[list[str], Message | None]:
    """Before the answer's headers: the reply's first text (the deltas heard so far), or the
    reply itself once it has ended without any. A reply its turn refused before any text
    (``context_length_exceeded``, a day's limit) then answers its own status rather than 200
    and an error event; the client waits for its first token either way. One that ended
    with no text (the client's tools) is streamed from it at once."""
    delta, _, reply = await _next_news(listener, started.reply.pk)
    return ([delta] if delta else []), reply


async def _next_news(
    listener: FrameListener, reply_id: int, *, have: int = 0
) -> tuple[str, int | None, Message | None]:
    """The reply's next text with its offset (``(delta, offset, None)``), or the reply once it
    has ended (``("", None, reply)``). ``have``: the length of the model call's text relayed so
    far, in UTF-16 units as a frame's ``offset`` counts. A delta that starts past it follows a
    frame lost on the way: it is not relayed, nor is any after it in that call, and the rest
    comes from the stored reply at its end."""
    while True:
        frame = await listener.next(STREAM_RECHECK_SECONDS)
        what = _frame_of(frame, reply_id) if frame is not None else None
        if what == "delta":
            assert frame is not None
            delta, offset = str(frame.get("delta") or ""), frame.get("offset")
            offset = offset if isinstance(offset, int) else None
            if delta and not (offset is not None and offset > have):
                return delta, offset, None
            continue
        if frame is None or what == "end":
            # The database is the truth (frames are lossy): the finished reply, or wait on.
            reply = await _in_thread(_finished_reply)(reply_id=reply_id)
            if reply is not None:
                return "", None, reply


async def _stream(
    started: Started,
    listener: FrameListener,
    *,
    include_usage: bool,
    first: Sequence[str] = (),
    ended: Message | None = None,
) -> AsyncIterator[bytes]:
    """OpenAI's chunk stream: the role first, the content as it comes (``first``: what
    ``_first_news`` heard; ``ended``: the reply, when it had ended then), the finish reason,
    the usage when asked, then ``[DONE]``. A reply that fails mid-way ends with an error
    event."""
    reply_id = started.reply.pk
    meta = {
        "completion_id": _completion_id(started.reply),
        "created": int(time.time()),
        "model": started.model_id,
        "with_usage_field": include_usage,
    }
    sent: list[str] = list(first)
    try:
        yield _sse(shapes.chunk(delta={"role": "assistant", "content": ""}, **meta))
        for delta in sent:
            yield _sse(shapes.chunk(delta={"content": delta}, **meta))
        reply: Message | None = ended
        call = 0  # where the current model call's text begins in ``sent``
        while reply is None:
            have = len("".join(sent[call:]).encode("utf-16-le")) // 2
            delta, offset, reply = await _next_news(listener, reply_id, have=have)
            if delta:
                if offset == 0 and have:
                    # The reply's next model call (after a round of its tools): its offsets
                    # count from 0, and its text is what the reply stores (docs/api.md).
                    call = len(sent)
                sent.append(delta)
                yield _sse(shapes.chunk(delta={"content": delta}, **meta))
        if reply.status != Message.Status.COMPLETE:
            exc = openai_errors.reply_error(reply)
            yield _sse(shapes.error_body(exc.message, type_=exc.type_, code=exc.code))
            yield b"data: [DONE]\n\n"
            return
        text = "".join(sent[call:])
        if reply.content != text:
            if reply.content.startswith(text):
                rest = reply.content[len(text) :]
                yield _sse(shapes.chunk(delta={"content": rest}, **meta))
            else:
                log.warning("openai_stream_diverged", message_id=reply_id)
        for delta in shapes.tool_call_deltas(reply.tool_calls or []):
            yield _sse(shapes.chunk(delta=delta, **meta))
        yield _sse(shapes.chunk(delta={}, finish=shapes.finish_reason(reply.finish_reason), **meta))
        if include_usage:
            yield _sse(
                shapes.chunk(
                    delta=None,
                    usage_value=shapes.usage(
                        reply.prompt_tokens or 0, reply.completion_tokens or 0
                    ),
                    **meta,
                )
            )
        await _in_thread(completions.reply_links_write)(reply=reply)
        yield b"data: [DONE]\n\n"
    except Exception:
        # The answer has begun (200): the failure can only be told in the stream.
        log.exception("openai_stream_failed", message_id=reply_id)
        yield _sse(
            shapes.error_body(
                "Something went wrong on the server.", type_="server_error", code="internal_error"
            )
        )
        yield b"data: [DONE]\n\n"
    finally:
        await listener.close()


# --- anything else under /v1/ -----------------------------------------------------------------


@_guarded
async def not_found_view(request: HttpRequest, rest: str = "") -> HttpResponse:
    raise OpenAIError(f"Unknown path {request.path}.", status=404, code="not_found")
