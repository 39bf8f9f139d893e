"""``POST /v1/chat/completions`` as a service: check the request (``openai_api.request_check``),
find its conversation, send its message through the one send path (``turns.services.send``), and
read the reply back; errors in OpenAI's shape are ``openai_api.openai_errors``.

The request's messages map onto the transcript like this: client ``system``/``developer``
messages are call parameters (not stored, not in the chain); every other message before the
last is history (``openai_api.identity`` stores what the session lacks); the last one must be
the user's new message, sent exactly as the chat page sends one. The turn that answers it is
the chat's own turn (admission, compaction, memory, recall), with the call's ``temperature``,
``max_tokens`` and ``stop`` given to it through ``turns.hooks``.
"""

import uuid
from dataclasses import dataclass

from django.db import transaction

from bots import bulk
from bots.models import Bot, ChatSession, Message
from chat_platform import errors
from openai_api import identity, keys
from openai_api.identity import ClientMessage, Conversation
from openai_api.models import ApiKey, ApiTurn, ChainLink
from openai_api.openai_errors import OpenAIError, invalid
from openai_api.request_check import ChatRequest
from turns.services.send import reply_again_open, session_message_send


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
                key=key,
                bot=bot,
                history=request.history,
                explicit_session_id=request.session_id,
                content=request.content if not request.tool_results else "",
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
        turn = {
            "session": conversation.session,
            "key": key,
            "options": {**request.options, **_streamed(request, reply)},
            "base_position": conversation.base_position,
            "base_hash": conversation.base_hash,
            "pending": [[result.user_message.pk, user_message.fingerprint]],
        }
        if result.created:
            ApiTurn.objects.create(reply=reply, **turn)
        else:
            # A retry of a failed call re-runs its reply (``turns.services.retry``): its turn
            # is this call's now.
            ApiTurn.objects.update_or_create(reply=reply, defaults=turn)
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


def _streamed(request: ChatRequest, reply: Message) -> dict[str, int]:
    """A streamed call's turn notes the seq before its pending ``reply``: the rounds this run
    stores take the reply's seq and after (``bots.exchanges``), and the reply's links cover what
    the stream sent before the reply's text (``identity._said_before``). A retried reply's
    earlier run's rounds stand before it and were not streamed by this call."""
    return {"streamed_after_seq": reply.seq - 1} if request.stream else {}


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
            options={
                **request.options,
                "exchange": [call.pk, *(m.pk for m in stored[:-1])],
                **_streamed(request, reply),
            },
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
