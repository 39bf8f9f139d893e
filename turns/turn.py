"""The chat turn: context -> model -> stream -> persist. Runs inside the ``chat`` Celery task.

Safe to run twice: the reply is claimed with a conditional ``pending -> streaming`` update, and the
final text is written with a conditional ``streaming -> complete|failed`` update, so a redelivered
task or a racing sweep never overwrites a finished reply.
"""

import contextlib
import json
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.db import DatabaseError, transaction
from django.utils import timezone

from bots import realtime
from bots.model_config import bot_model_config
from bots.models import Bot, ChatSession, Message
from bots.queries import (
    BOT_UNAVAILABLE,
    bot_usable_in,
    participants_of,
    room_snapshot_take,
    session_seat,
)
from bots.transitions import (
    message_finish,
    recall_exchange_store,
    reply_checkpoint,
    reply_claim,
    reply_handover_create,
    room_notice_create,
)
from chat_platform import realtime as transport
from chat_platform.dbconn import connection_release
from chat_platform.errors import (
    ContextTooLarge,
    InternalError,
    ModelUnavailable,
    NotFound,
    PlatformError,
    ServiceUnavailable,
)
from chat_platform.llm import gateway
from chat_platform.llm.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tools_tokens,
)
from compaction.pipeline import (
    BuiltContext,
    context_bot,
    context_build,
    context_report,
    context_state,
    seat_key,
    soft_compaction_due,
)
from compaction.provenance import part
from compaction.records import context_record_write
from connections import usage
from memory.recall import (
    RECALL_MAX_ROUNDS,
    ToolCall,
    calls_from_completion,
    calls_from_text,
    recall_execute,
)
from memory.recall import TOOLS as RECALL_TOOLS
from memory.services import messages_index_written
from turns import dispatch, liveness
from turns import hooks as turn_hooks
from turns.liveness import CHECKPOINT_SECONDS, TurnHandle
from turns.room import handovers

log = structlog.get_logger(__name__)

# A streaming turn saves its partial text every CHECKPOINT_SECONDS (kept if the worker dies: the
# watchdog marks the reply interrupted); the process's watcher looks for stops as often.
# Slack per recalled result under what is left of B: joined text can cost a token or two more
# than its parts.
RECALL_MARGIN_TOKENS = 8


class DeltaBatcher:
    """Sends the first delta at once, then batches: at most one frame per flush interval."""

    def __init__(self, reply: Message) -> None:
        self.reply = reply
        self.buffer: list[str] = []
        # The first delta goes out the moment it arrives (time to first token is what a user
        # feels); batching only starts after it.
        self.last_flush = float("-inf")
        self.interval = settings.CHAT_STREAM_FLUSH_SECONDS

    def add(self, delta: str) -> None:
        self.buffer.append(delta)
        if time.monotonic() - self.last_flush >= self.interval:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            realtime.notify_message_delta(self.reply, "".join(self.buffer))
            self.buffer.clear()
        self.last_flush = time.monotonic()


def _checkpoint(message_id: int, partial_text: str) -> None:
    """Save the partial text: if the worker dies, the watchdog keeps it."""
    reply_checkpoint(message_id=message_id, content=partial_text)
    connection_release()


def _finish(
    reply: Message, *, counted: bool, completed: bool = False, **fields: Any
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
    _index_for_search(message)
    return message


def _index_for_search(message: Message) -> None:
    """The reply and the message it answers become searchable across the user's chats at once
    (after the frames: nobody waits for it). Search is never worth a turn: a failure is logged,
    and compaction indexes the messages later anyway."""
    try:
        messages_index_written(message_ids=[m for m in (message.reply_to_id, message.pk) if m])
    except Exception:
        log.exception("turn_search_index_failed", message_id=message.pk)


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


def _fail(
    reply: Message,
    error: PlatformError,
    *,
    partial_text: str = "",
    state: "_TurnState | None" = None,
) -> None:
    _end_unfinished(reply, error, status=Message.Status.FAILED, partial_text=partial_text)
    try:
        _notify_context(reply.session_id, bot_id=reply.bot_id, state=state)
    except Exception:  # the failure is stored and sent; the meter can wait for the next turn
        log.exception("turn_context_notify_failed", session_id=reply.session_id)


@dataclass
class _TurnState:
    parts: list[str] = field(default_factory=list)
    # The turn's model calls as its context record keeps them (``_call_entry``), written once
    # when the turn ends, however it ends (``_record``).
    calls: list[dict[str, Any]] = field(default_factory=list)
    recorded: bool = False
    bot_id: int | None = None
    prompt: str = ""
    # The soft compaction this turn found due (``compact_soft_dispatch``'s arguments), handed
    # to the queue after the session's next reply (``_hand_over_next``), never before it.
    soft_compaction: tuple[int, ...] | None = None

    @property
    def text(self) -> str:
        return "".join(self.parts)


def turn_run(*, message_id: int) -> None:
    """Run one turn. After the claim, whatever happens ends the reply visibly: ``complete``,
    or ``failed``/``interrupted`` with a ``message.failed`` frame and a logged traceback."""
    reply = reply_claim(message_id=message_id)
    if reply is None:
        # Queued behind an earlier reply of its session (whose end hands this one over), a
        # duplicate delivery, or a reply already ended by a stop or the watchdog.
        status = Message.objects.filter(pk=message_id).values_list("status", flat=True).first()
        log.info("turn_skipped", message_id=message_id, status=status)
        return
    state = _TurnState()
    handle = liveness.watcher.register(reply.pk)
    try:
        _turn_body(reply, handle, state)
    except PlatformError as exc:  # an expected refusal (context_too_large, model_unavailable…)
        _record(reply, state)
        _safe_fail(reply, exc, state)
    except DatabaseError:
        # Saturated or unreachable database (e.g. no pooled connection within its timeout):
        # fail fast with a clear error rather than leave the reply waiting.
        log.exception("turn_database_error", message_id=reply.pk, session_id=reply.session_id)
        _record(reply, state)
        _safe_fail(
            reply,
            ServiceUnavailable(
                "The database is overloaded or unreachable, so this reply could not be "
                "written. Please try again in a moment."
            ),
            state,
        )
    except Exception:
        log.exception("turn_crashed", message_id=reply.pk, session_id=reply.session_id)
        _record(reply, state)
        _safe_fail(reply, InternalError("The reply failed because of an internal error."), state)
    except BaseException:  # the worker is shutting down under us: keep what we have, then go
        log.exception("turn_interrupted", message_id=reply.pk, session_id=reply.session_id)
        _record(reply, state)
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
    _hand_over_next(reply.session_id)
    _soft_compaction_dispatch(state)


def _soft_compaction_dispatch(state: _TurnState) -> None:
    """After the hand-over: a reply queued behind this one (the next bot of a room's round, a
    message sent meanwhile) starts first. In embedded mode, where tasks run in-process, the
    compaction then runs after that reply instead of before it; on the queue it yields to the
    session's replies (``compaction.services.soft_compaction_yields``)."""
    if state.soft_compaction is not None:
        transaction.on_commit(partial(dispatch.compact_soft_dispatch, *state.soft_compaction))


def _record(reply: Message, state: _TurnState) -> None:
    """Write the turn's context record (once; nothing if it made no call). Bookkeeping: a
    failure is logged with its traceback and never changes how the reply ends."""
    if state.recorded or not state.calls:
        return
    state.recorded = True
    try:
        context_record_write(
            reply=reply, bot_id=state.bot_id, calls=state.calls, prompt=state.prompt
        )
    except Exception:
        log.exception("turn_context_record_failed", message_id=reply.pk)


def _call_entry(
    context: BuiltContext,
    *,
    recall_round: int,
    model: str,
    tools: list[dict[str, Any]] | None,
    completion: gateway.Completion | None,
    latency_ms: int,
    error: str = "",
) -> dict[str, Any]:
    """One model call as the context record keeps it (docs/context-records.md)."""
    parts = list(context.parts)
    if tools:
        names = [t.get("function", {}).get("name", "") for t in tools]
        # The figure the budget counted for this call (``_turn_calls``): one count.
        parts.append(part("tools", {"names": names}, count_tools_tokens(tools, model=model)))
    entry: dict[str, Any] = {
        "round": recall_round,
        "model": model,
        "budget": context.measure.budget.budget,
        "parts": parts,
        "admission": context.admission_info,
        "waited_for_compaction": context.waited_for_compaction,
        "usage": None
        if completion is None
        else {
            "prompt_tokens": completion.prompt_tokens,
            "completion_tokens": completion.completion_tokens,
        },
        "finish_reason": completion.finish_reason if completion is not None else "",
        "latency_ms": latency_ms,
    }
    if error:
        entry["error"] = error
    return entry


def _hand_over_next(session_id: int) -> None:
    """The reply has ended: a reply queued behind it (a message sent meanwhile) runs now."""
    try:
        dispatch.turn_dispatch_next(session_id)
    except Exception:  # the watchdog hands a queued reply over if this cannot
        log.exception("turn_hand_over_failed", session_id=session_id)


def _safe_fail(reply: Message, error: PlatformError, state: _TurnState) -> None:
    """Fail the reply; if even that cannot be written (database down), the heartbeat stops and
    the watchdog marks it interrupted once the database answers."""
    try:
        _fail(reply, error, partial_text=state.text, state=state)
    except Exception:
        log.exception("turn_fail_write_failed", message_id=reply.pk)


def _stream_round(
    reply: Message,
    handle: TurnHandle,
    state: _TurnState,
    config: gateway.ModelConfig,
    context: BuiltContext,
    *,
    tools: list[dict[str, Any]] | None,
    recall_round: int = 0,
) -> gateway.ChatStream:
    """One model call, streamed to the session. While recall is possible, a reply that opens
    with ``{`` is held back until it ends: it may be a JSON recall request, not an answer.

    The admission (built unrecorded) is recorded while the provider works on its first token,
    or, if the call never got that far, once it ended."""
    batcher = DeltaBatcher(reply)
    recorded = False

    def record_admission() -> None:
        nonlocal recorded
        if recorded:
            return
        recorded = True
        try:
            context.record_admission()
        finally:
            connection_release()

    connection_release()
    called = time.monotonic()
    error = ""
    stream = gateway.stream(config, context.messages, tools=tools, on_open=record_admission)
    handle.attach(stream)
    holding = tools is not None
    try:
        last_checkpoint = time.monotonic()
        for delta in stream:
            state.parts.append(delta)
            if holding:
                head = state.text.lstrip()
                if not head:
                    continue
                holding = head.startswith("{")
                if holding:
                    continue
                delta = state.text  # release what was held
            batcher.add(delta)
            if time.monotonic() - last_checkpoint >= CHECKPOINT_SECONDS:
                last_checkpoint = time.monotonic()
                _checkpoint(reply.pk, state.text)
    except gateway.ModelCallFailed as exc:
        error = f"The model did not answer: {exc}"
        raise ModelUnavailable(error) from exc
    finally:
        completion = stream.completion
        state.calls.append(
            _call_entry(
                context,
                recall_round=recall_round,
                model=config.model,
                tools=tools,
                completion=completion,
                latency_ms=int((time.monotonic() - called) * 1000),
                error=error,
            )
        )
        if (
            holding
            and state.text
            and not (
                completion is not None and calls_from_text(completion.text, call_id="-") is not None
            )
        ):
            batcher.add(state.text)  # not a recall request after all: send it
        batcher.flush()
        if not recorded:
            try:
                record_admission()
            except Exception:  # a bookkeeping write must not hide how the call ended
                log.exception("turn_admission_record_failed", message_id=reply.pk)
    return stream


def _recall_round(
    reply: Message,
    context: BuiltContext,
    calls: list[ToolCall],
    *,
    recall_round: int,
    text: str,
) -> list[Message]:
    """Answer the model's requests and store the exchange in the transcript: the request as an
    assistant ``tool`` message, one ``tool`` message per result, the reply moved after them.

    Everything recalled fits in what is left of B once the turn's fixed part is sent."""
    session = reply.session
    model = session.chat_model
    # A JSON request is stored as the tool call it became, not as text as well.
    call_content = "" if calls_from_text(text, call_id="-") else text
    call_tokens = count_message_tokens(
        call_content + json.dumps([c.as_openai() for c in calls]), model=model
    )
    room = (
        context.measure.budget.budget
        - context.measure.fixed_tokens
        - call_tokens
        - (MESSAGE_OVERHEAD_TOKENS + RECALL_MARGIN_TOKENS) * len(calls)
    )
    results = recall_execute(
        session=session,
        reply=reply,
        recall_round=recall_round,
        calls=calls,
        room_tokens=room,
        model=model,
        live_before=context.recall_live_before,
    )
    with transaction.atomic():
        # seqs: the request takes the reply's place, results follow, then the reply, then what
        # was sent meanwhile (queued behind this reply)
        stored, moved = recall_exchange_store(
            reply=reply,
            call={
                "content": call_content,
                "tool_calls": [c.as_openai() for c in calls],
                "token_count": call_tokens,
                "model": model,
            },
            results=[
                {
                    "content": result.content,
                    "tool_call_id": result.call.id,
                    "tool_name": result.call.name,
                    "token_count": count_message_tokens(result.content, model=model),
                }
                for result in results
            ],
        )
        for message in [*stored, *moved]:
            # A moved message's frame carries its new seq: the page re-sorts it.
            transaction.on_commit(partial(realtime.notify_message_created, message))
    return stored


def _context_with_rounds(
    reply: Message,
    rounds: list[list[Message]],
    *,
    recall_open: bool,
    extra_system: str = "",
    tools_tokens: int = 0,
    exchange: tuple[Message, ...] = (),
) -> BuiltContext:
    """The call's context with the turn's recall rounds. Each round's results were cut to what
    was left of B when it ran, but the fixed part can grow before the next call (the user pins
    a message, a hard compaction adds a summary): then the oldest rounds are left out of this
    call, one at a time, rather than failing the reply (degrade only downward). They stay in
    the transcript. Without any round left, a ``ContextTooLarge`` is the message's own."""
    kept = list(rounds)
    while True:
        try:
            return context_build(
                session=reply.session,
                reply=reply,
                # A client tool exchange the turn continues is never left out (its results
                # would lose their call); the turn's own recall rounds may be.
                recalled=[*exchange, *(m for round_ in kept for m in round_)],
                recall_open=recall_open,
                record=False,
                extra_system=extra_system,
                tools_tokens=tools_tokens,
            )
        except ContextTooLarge:
            if not kept:
                raise
            kept = kept[1:]
            log.warning(
                "turn_recall_round_left_out",
                message_id=reply.pk,
                session_id=reply.session_id,
                rounds=len(rounds),
                kept=len(kept),
            )


def _check_bot_usable(session: ChatSession, *, fresh: bool = False) -> None:
    """The session's user may still run its bot (owner, or shared): checked when the turn starts
    (a send queued before the owner un-shared it) and before each recall round."""
    bot = Bot.objects.only("owner_id", "is_shared").get(pk=session.bot_id) if fresh else None
    if not bot_usable_in(session=session, bot=bot):
        raise NotFound(BOT_UNAVAILABLE)


def _speaker_seat(reply: Message) -> ChatSession:
    """The session as the reply's bot sits in it (``bots.queries.session_seat``): in a room a
    reply may be another participant's than the default bot the claim loaded. A room's
    participants (with their bots) and user name are read once, for the whole turn
    (``room_snapshot_take``): its context builds, its hand-over and its meter reuse them."""
    session = room_snapshot_take(reply.session)
    if reply.bot_id is None or reply.bot_id == session.bot_id:
        return session
    seats = participants_of(session=session, include_removed=True)
    speaker = next((p.bot for p in seats if p.bot_id == reply.bot_id), None)
    if speaker is None:  # not a participant (e.g. a reply written by a fixture)
        speaker = Bot.objects.get(pk=reply.bot_id)
    seat = session_seat(session, speaker)
    reply.session = seat
    return seat


def _turn_body(reply: Message, handle: TurnHandle, state: _TurnState) -> None:
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

    _check_bot_usable(session)
    state.bot_id, state.prompt = bot.pk, bot.system_prompt
    # Per-call overrides an interface registered for this reply (the OpenAI-compatible API's
    # temperature / max_tokens / stop); a reply nobody registered runs on the bot's settings.
    options = turn_hooks.options_for(reply)
    # The chat's model (its per-chat override, among the bot's chat_models, else the bot's).
    model = session.chat_model
    config = turn_hooks.config_with(bot_model_config(bot, model=model), options)
    # The daily token limits of the session's user (and of the API key that asked for this
    # reply): what the turn sends is held before the first call, the spent tokens counted when
    # it ends, however it ends (docs/connections.md "Daily token limits"). The calls the turn
    # causes on the way (a hard compaction, a question's embedding) are charged to the same
    # limits and fit in the turn's own hold.
    limits = [*usage.user_limits(session.user_id), *options.quota]
    reservation = usage.quota_reserve(
        limits,
        tokens=session.context_tokens + config.max_output_tokens,
        may_exceed=config.max_output_tokens,
    )
    spent = usage.Meter(reservation)
    try:
        with usage.quota_scope(extra=options.quota, within=reservation):
            _turn_calls(reply, handle, state, session, bot, model, config, options, started, spent)
    finally:
        spent.settle()  # once: a turn that finished settled before its reply was shown


def _turn_calls(
    reply: Message,
    handle: TurnHandle,
    state: _TurnState,
    session: ChatSession,
    bot: Bot,
    model: str,
    config: gateway.ModelConfig,
    options: turn_hooks.TurnOptions,
    started: float,
    spent: usage.Meter,
) -> None:
    # memory_index_size = 0 disables recall with the index; recall_enabled = false keeps the
    # index visible but offers no recall (docs/memory.md).
    recall_on = bot.recall_enabled and bot.memory_index_size > 0
    rounds: list[list[Message]] = []  # the turn's recall exchange, one list per round
    recall_round = 0
    asked: list[dict[str, Any]] = []  # calls to the client's tools (turn_hooks): end the turn
    while True:
        may_recall = recall_on and recall_round < RECALL_MAX_ROUNDS
        tools = [*RECALL_TOOLS, *options.tools] if may_recall else list(options.tools)
        context = _context_with_rounds(
            reply,
            rounds,
            recall_open=may_recall,
            extra_system=options.system,
            # An API client's tool schemas go with every call: counted in B like a system part.
            # The platform's own recall tools are not counted in B (the context record reports
            # them): counting them took ~290 tokens from every small bot's fixed part, so its
            # hard compaction kept next to no raw history (see the issue 17 note).
            tools_tokens=count_tools_tokens(list(options.tools), model=model),
            exchange=options.exchange,
        )
        stream = _stream_round(
            reply,
            handle,
            state,
            config,
            context,
            tools=tools or None,
            recall_round=recall_round,
        )
        completion = stream.completion
        if completion is not None:
            spent.add(completion.prompt_tokens + completion.completion_tokens)
            asked = turn_hooks.client_calls(options, completion.tool_calls, reply_id=reply.pk)
        if asked or not may_recall or completion is None or handle.stopped.is_set():
            break
        own_calls = turn_hooks.platform_calls(options, completion.tool_calls)
        calls = calls_from_completion(own_calls) or calls_from_text(
            completion.text, call_id=f"recall-{reply.pk}-{recall_round + 1}"
        )
        if not calls:
            break
        _check_bot_usable(session, fresh=True)
        recall_round += 1
        rounds.append(
            _recall_round(reply, context, calls, recall_round=recall_round, text=completion.text)
        )
        reply.refresh_from_db(fields=["seq"])
        state.parts.clear()  # the answer is what the model says after its lookups

    completion = stream.completion
    stopped = handle.stopped.is_set() and completion is None
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
        fields["prompt_tokens"] = completion.prompt_tokens
        fields["completion_tokens"] = completion.completion_tokens
    # Counted before the reply is shown: a client that sends again at once sees them spent.
    spent.settle()
    finished = _finish(reply, counted=True, completed=True, **fields)
    # After the finish (its frame and the REST waiters go first): the record's INSERT is never
    # on the way to the user's reply. Read on demand, it is there a moment later.
    _record(reply, state)
    if finished is not None:
        turn_hooks.notify_completed(finished, user_message=reply.reply_to)
        if session.is_room and "@" in text:
            _room_hand_over(finished, speaker=bot)
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
    try:
        _notify_context(session.pk, bot_id=bot.pk, seat=session, state=state)
    except Exception:  # the reply is complete and sent; the meter and soft trigger can wait
        log.exception("turn_context_notify_failed", session_id=session.pk)


def _room_hand_over(reply: Message, *, speaker: Bot) -> None:
    """A bot's finished reply that mentions other participants hands them the floor: a pending
    reply each, after what is queued (``turns.room.handovers`` says who, within the bounds); a
    bound that stopped someone leaves a notice in the transcript. Best effort: the reply is
    complete and sent whatever happens here."""
    try:
        with transaction.atomic():
            _room_hand_over_write(reply, speaker=speaker)
    except Exception:
        log.exception("room_hand_over_failed", message_id=reply.pk, session_id=reply.session_id)


def _room_hand_over_write(reply: Message, *, speaker: Bot) -> None:
    root_id = reply.prompted_by_id or reply.reply_to_id
    if root_id is None:
        return
    participants = [
        p
        for p in participants_of(session=reply.session)
        if bot_usable_in(session=reply.session, bot=p.bot)
    ]
    chain = list(
        Message.objects.filter(
            session_id=reply.session_id, prompted_by_id=root_id, role=Message.Role.ASSISTANT
        ).values_list("bot_id", "status", "hop", "pk")
    )
    waiting = {b for b, status, _, pk in chain if status == Message.Status.PENDING and b}
    answered = {b for b, status, _, pk in chain if status != Message.Status.PENDING and b}
    decided = handovers(
        reply=reply,
        speaker=speaker,
        participants=participants,
        answered_bot_ids=answered | {speaker.pk},
        waiting_bot_ids=waiting,
        hops_so_far=max((hop for _, _, hop, _ in chain), default=0),
    )
    hop = max((h for _, _, h, _ in chain), default=0)
    for bot in decided.bots:
        hop += 1
        created = reply_handover_create(after=reply, bot=bot, hop=hop, prompted_by_id=root_id)
        transaction.on_commit(partial(realtime.notify_message_created, created))
        log.info("room_hand_over", message_id=created.pk, from_bot=speaker.pk, to_bot=bot.pk)
    for text in decided.notices:
        notice = room_notice_create(session_id=reply.session_id, content=text)
        transaction.on_commit(partial(realtime.notify_message_created, notice))
        log.info("room_hand_over_stopped", message_id=reply.pk, notice=text)


def _notify_context(
    session_id: int,
    *,
    bot_id: int | None = None,
    seat: ChatSession | None = None,
    state: _TurnState | None = None,
) -> None:
    """After every turn: the context report (same numbers as the endpoint), and a soft compaction
    on the ``compaction`` queue when pressure reached the soft threshold. The turn never waits.
    In a room both are the answering bot's own (its seat, ``bot_id``). ``seat``: the session as
    the turn that just ended sat in it (its running totals are re-read, ``context_state``).
    ``state``: the turn's, which then dispatches the soft compaction itself, after the
    session's next reply has started (``_soft_compaction_dispatch``)."""
    if seat is not None:
        session = seat
    else:
        session = ChatSession.objects.select_related("bot").get(pk=session_id)
        if session.is_room and bot_id is not None and bot_id != session.bot_id:
            session = session_seat(session, Bot.objects.get(pk=bot_id))
    context = context_state(session=session)
    transport.notify_context_updated(
        session_id, context_report(session=session, state=context), bot=context_bot(session)
    )
    if soft_compaction_due(context):
        key = seat_key(session)
        args = (session_id,) if key is None else (session_id, key)
        if state is not None:
            state.soft_compaction = args  # the turn dispatches it after its hand-over
        else:
            transaction.on_commit(partial(dispatch.compact_soft_dispatch, *args))
