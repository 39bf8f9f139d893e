"""The chat turn: context -> model -> stream -> persist. Runs inside the ``chat`` Celery task.

Safe to run twice: the reply is claimed with a conditional ``pending -> streaming`` update, and the
final text is written with a conditional ``streaming -> complete|failed`` update, so a redelivered
task or a racing sweep never overwrites a finished reply.

The core: the claim, the turn's limits, the final write and how a turn ends, however it ends.
Its model calls are the recall loop's (``turns.recall_loop``, each call ``turns.stream``); what
it does once the reply has ended is the "turn finished" notifier's (``turns.finished``).
"""

import contextlib
import json
import time
from functools import partial
from typing import Any

import structlog
from django.db import DatabaseError, connection, transaction
from django.utils import timezone

from bots import realtime
from bots.model_config import bot_model_config
from bots.models import Bot, ChatSession, Message
from bots.queries import participant_seat, participants_of, room_snapshot_take, session_seat
from bots.transitions import message_finish, reply_claim
from chat_platform.account_gate import account_refusal
from chat_platform.errors import (
    InternalError,
    NotAuthenticated,
    NotFound,
    PlatformError,
    ServiceUnavailable,
)
from chat_platform.foreground import foreground
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens
from compaction.seats import seat_read
from connections import usage
from turns import hooks as turn_hooks
from turns import liveness
from turns.finished import TurnFinished, chat_deleted, search_index
from turns.liveness import TurnHandle
from turns.recall_loop import Answered, calls_until_answer, check_bot_usable
from turns.stream import TurnState

log = structlog.get_logger(__name__)


def _finish(
    reply: Message,
    *,
    counted: bool,
    completed: bool = False,
    **fields: Any,
) -> Message | None:
    """Conditional ``streaming -> final`` write (with the context totals when ``counted``);
    returns the fresh row, or None if we lost it. ``completed``: send its ``message.completed``
    frame, without waiting for Redis, before waking the REST waiters, so that both go out at
    once (frames of a session still leave in order, see ``chat_platform.realtime.send_frames``)."""
    message = message_finish(
        message_id=reply.pk,
        from_status=Message.Status.STREAMING,
        counted=counted,
        updated_at=timezone.now(),
        **fields,
    )
    if message is None:
        log.warning("turn_finish_lost", message_id=reply.pk)
        return None
    speaker = reply.session.bot  # the turn's bot, loaded with the claim (a room: its seat's)
    if message.bot_id == speaker.pk:
        message.bot = speaker  # its frames name it without reading it again
    if completed:
        realtime.notify_message_completed(message, wait=False)
    transaction.on_commit(partial(realtime.publish_reply_finished, reply.pk))
    search_index(message)
    return message


def _end_unfinished(
    reply: Message, error: PlatformError, *, status: str, partial_text: str = ""
) -> None:
    """End a claimed reply that did not complete: ``failed`` (or ``interrupted``), keeping any
    partial text (it counts toward the context like any finished text), with its frame."""
    tokens = count_message_tokens(partial_text, model=reply.model) if partial_text else 0
    message = _finish(
        reply,
        # An interrupted reply's partial text stays in the context; a failed one's does not.
        counted=status == Message.Status.INTERRUPTED,
        status=status,
        content=partial_text,
        token_count=tokens,
        error_code=error.code,
        error_message=error.message,
        finish_reason="error",
    )
    log.warning(
        "turn_failed",
        message_id=reply.pk,
        session_id=reply.session_id,
        code=error.code,
        status=status,
    )
    if message is not None:
        realtime.notify_message_failed(message)


def _fail(reply: Message, error: PlatformError, *, state: TurnState) -> None:
    _end_unfinished(reply, error, status=Message.Status.FAILED, partial_text=state.text)
    # the failure is stored and sent; the meter can wait for the next turn
    state.finished.gauge(reply.session_id, bot_id=reply.bot_id)


def turn_run(*, message_id: int) -> None:
    """Run one turn. After the claim, whatever happens ends the reply visibly: ``complete``,
    or ``failed``/``interrupted`` with a ``message.failed`` frame and a logged traceback.
    Foreground work of its process while it runs: work that can wait (the written messages'
    embedding) waits for it (``chat_platform.foreground``, docs/performance.md "Turns first")."""
    with foreground():
        _turn_run(message_id)


def _turn_run(message_id: int) -> None:
    reply = reply_claim(message_id=message_id)
    if reply is None:
        # Queued behind an earlier reply of its session (whose end hands this one over), a
        # duplicate delivery, or a reply already ended by a stop or the watchdog.
        status = Message.objects.filter(pk=message_id).values_list("status", flat=True).first()
        log.info("turn_skipped", message_id=message_id, status=status)
        return
    state = TurnState(finished=TurnFinished(reply))
    handle = liveness.watcher.register(reply.pk)
    try:
        # A Stop also ends the wait on an unstreamed call made for the reply (its blocking
        # compaction's summariser): docs/chat-turn.md.
        with gateway.stop_on(handle.stopped):
            _turn_body(reply, handle, state)
    except PlatformError as exc:  # an expected refusal (context_too_large, model_unavailable…)
        state.finished.context_record()
        _safe_fail(reply, exc, state)
    except Exception as exc:
        if chat_deleted(message_id=reply.pk):  # with its chat, while it ran: nothing to end
            log.info("turn_chat_deleted", message_id=reply.pk, session_id=reply.session_id)
            return
        _crashed(reply, exc, state)
    except BaseException:  # the worker is shutting down under us: keep what we have, then go
        log.exception("turn_interrupted", message_id=reply.pk, session_id=reply.session_id)
        state.finished.context_record()
        with contextlib.suppress(Exception):
            _end_unfinished(
                reply,
                PlatformError("The reply was interrupted before it finished."),
                status=Message.Status.INTERRUPTED,
                partial_text=state.text,
            )
        raise
    finally:
        liveness.watcher.unregister(handle)
    state.finished.hand_over(reply.session_id)


def _crashed(reply: Message, exc: Exception, state: TurnState) -> None:
    """An unexpected error: logged with its traceback, and the reply fails visibly."""
    if isinstance(exc, DatabaseError):
        # Saturated or unreachable database (e.g. no pooled connection within its timeout):
        # fail fast with a clear error rather than leave the reply waiting.
        log.exception("turn_database_error", message_id=reply.pk, session_id=reply.session_id)
        # A connection the server ended (a restart, a failover) is unusable: the failure is
        # written on a fresh one (the pool checks what it lends; docs/operations.md).
        connection.close_if_unusable_or_obsolete()
        error: PlatformError = ServiceUnavailable(
            "The database is overloaded or unreachable, so this reply could not be written. "
            "Please try again in a moment."
        )
    else:
        log.exception("turn_crashed", message_id=reply.pk, session_id=reply.session_id)
        error = InternalError("The reply failed because of an internal error.")
    state.finished.context_record()
    _safe_fail(reply, error, state)


def _safe_fail(reply: Message, error: PlatformError, state: TurnState) -> None:
    """Fail the reply; if even that cannot be written (database down), the heartbeat stops and
    the watchdog marks it interrupted once the database answers."""
    try:
        _fail(reply, error, state=state)
    except Exception:
        log.exception("turn_fail_write_failed", message_id=reply.pk)


def _speaker_seat(reply: Message) -> ChatSession:
    """The session as the reply's bot sits in it (``bots.queries.session_seat``): in a room a
    reply may be another participant's than the default bot the claim loaded. A room's
    participants (with their bots) and user name are read once, for the whole turn
    (``room_snapshot_take``): its context builds, its hand-over and its meter reuse them."""
    session = room_snapshot_take(reply.session)
    if session.is_room:
        # A bot taken out of the room answers no more: a reply queued for it before then ends
        # failed, saying so, instead of running (read from the snapshot: no statement).
        seat = participant_seat(session=session, bot_id=reply.bot_id or session.bot_id)
        if seat is not None and seat.removed_at is not None:
            raise NotFound(f"{seat.bot.name} left this chat before it could answer.")
    if reply.bot_id is None or reply.bot_id == session.bot_id:
        return session
    seats = participants_of(session=session, include_removed=True)
    speaker = next((p.bot for p in seats if p.bot_id == reply.bot_id), None)
    if speaker is None:  # not a participant (e.g. a reply written by a fixture)
        speaker = Bot.objects.get(pk=reply.bot_id)
    seat = session_seat(session, speaker)
    reply.session = seat
    return seat


def _check_account(session: ChatSession) -> None:
    """The session's user may still sign in (``account_refusal``: active, approved, and verified
    where verification is mandatory): a reply queued before the account was deactivated ends
    failed instead of running (docs/chat-turn.md). The user came with the claim: no statement,
    but one under mandatory verification (its email check)."""
    refusal = account_refusal(session.user)
    if refusal is not None:
        raise NotAuthenticated(f"{refusal} The reply was not written.")


def _turn_body(reply: Message, handle: TurnHandle, state: TurnState) -> None:
    _check_account(reply.session)
    session = _speaker_seat(reply)
    bot = session.bot
    started = time.monotonic()

    if reply.stop_requested or handle.stopped.is_set():
        _finish(
            reply,
            counted=False,
            completed=True,
            status=Message.Status.COMPLETE,
            finish_reason="stopped",
            content="",
        )
        return

    check_bot_usable(session)
    state.finished.bot_id, state.finished.prompt = bot.pk, bot.system_prompt
    # Per-call overrides an interface registered for this reply (the OpenAI-compatible API's
    # temperature / max_tokens / stop); a reply nobody registered runs on the bot's settings.
    options = turn_hooks.options_for(reply)
    state.finished.quota, state.finished.bots = options.quota, options.bots
    # The chat's model (its per-chat override, among the bot's chat_models, else the bot's).
    model = session.chat_model
    config = turn_hooks.config_with(bot_model_config(bot, model=model), options)
    # The daily token limits of the session's user (and of the API key that asked for this
    # reply): what the turn sends is held before the first call, the spent tokens counted when
    # it ends, however it ends (docs/connections.md "Daily token limits"). The calls the turn
    # causes on the way (a hard compaction, a question's embedding) are charged to the same
    # limits and fit in the turn's own hold.
    limits = [*usage.user_limits(session.user_id), *options.quota]
    # What the chat holds in context, less what the seat's summaries stand in for.
    sends = session.context_tokens - seat_read(session).covered_tokens if limits else 0
    reservation = usage.quota_reserve(
        limits,
        tokens=sends + config.max_output_tokens,
        may_exceed=config.max_output_tokens,
    )
    spent = usage.Meter(reservation)
    try:
        with usage.quota_scope(extra=options.quota, within=reservation):
            answered = calls_until_answer(
                reply, handle, state, session, bot, model, config, options, spent
            )
            _complete(reply, handle, state, session, bot, model, answered, started, spent)
    finally:
        spent.settle()  # once: a turn that finished settled before its reply was shown


def _complete(
    reply: Message,
    handle: TurnHandle,
    state: TurnState,
    session: ChatSession,
    bot: Bot,
    model: str,
    answered: Answered,
    started: float,
    spent: usage.Meter,
) -> None:
    """The model answered (or was stopped, or asked the client's tools): the final write, its
    frame, then the notifier's steps (``turns.finished``)."""
    stream, context, asked = answered.stream, answered.context, answered.asked
    completion = stream.completion
    stopped = handle.stopped.is_set() and (completion is None or answered.stopped_in_tools)
    text = state.text
    fields: dict[str, Any] = {
        "status": Message.Status.COMPLETE,
        "content": text,
        # An empty reply (stopped before the first token) takes no part in the context.
        "token_count": count_message_tokens(text, model=model) if text else 0,
        "finish_reason": "stopped" if stopped else (completion.finish_reason if completion else ""),
        "model": model,
    }
    if asked:
        # The reply is the model's call to the client's tools, returned to the client, which
        # continues the turn with the results; recall calls beside them are not run.
        fields["tool_calls"] = asked
        fields["finish_reason"] = "tool_calls"
        fields["token_count"] = count_message_tokens(text + json.dumps(asked), model=model)
    if completion is not None:
        fields["prompt_tokens"] = state.prompt_tokens
        fields["completion_tokens"] = state.completion_tokens
    # Counted before the reply is shown: a client that sends again at once sees them spent.
    spent.settle()
    finished = _finish(reply, counted=True, completed=True, **fields)
    # After the finish (its frame and the REST waiters go first).
    state.finished.completed(finished, session=session, speaker=bot, text=text)
    log.info(
        "turn_completed",
        message_id=reply.pk,
        session_id=session.pk,
        bot_id=bot.pk,
        model=model,
        finish_reason=fields["finish_reason"],
        context_tokens=context.admission.selected_tokens,
        reply_tokens=fields["token_count"],
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    # the reply is complete and sent; the meter and soft trigger can wait
    state.finished.gauge(session.pk, bot_id=bot.pk, seat=session)
