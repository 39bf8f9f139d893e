"""The chat turn: context -> model -> stream -> persist. Runs inside the ``chat`` Celery task.

Safe to run twice: the reply is claimed with a conditional ``pending -> streaming`` update, and the
final text is written with a conditional ``streaming -> complete|failed`` update, so a redelivered
task or a racing sweep never overwrites a finished reply.
"""

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from bots import dispatch, realtime
from bots.models import Bot, ChatSession, Message
from bots.services import allocate_seqs, session_context_add
from chat_platform.errors import InternalError, ModelUnavailable, PlatformError
from chat_platform.llm import gateway
from chat_platform.llm.tokens import MESSAGE_OVERHEAD_TOKENS, count_message_tokens
from compaction.pipeline import BuiltContext, context_build, context_report
from memory.recall import (
    RECALL_MAX_ROUNDS,
    ToolCall,
    calls_from_completion,
    calls_from_text,
    recall_execute,
)
from memory.recall import TOOLS as RECALL_TOOLS

log = structlog.get_logger(__name__)

# How often a streaming turn saves its partial text (kept if the worker dies: the sweep marks the
# reply interrupted) and looks for a user's stop request.
CHECKPOINT_SECONDS = 0.5
# Slack per recalled result under what is left of B: joined text can cost a token or two more
# than its parts.
RECALL_MARGIN_TOKENS = 8


def bot_model_config(bot: Bot, *, model: str | None = None) -> gateway.ModelConfig:
    return gateway.ModelConfig(
        model=model or bot.model,
        api_base=bot.api_base,
        api_key_env=bot.api_key_env,
        api_base_trusted=bot.api_base_trusted,
        temperature=bot.temperature,
        max_output_tokens=bot.max_output_tokens,
    )


class DeltaBatcher:
    """Collects deltas and sends them to the session group at most every flush interval."""

    def __init__(self, reply: Message) -> None:
        self.reply = reply
        self.buffer: list[str] = []
        self.last_flush = time.monotonic()
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
    """Save the partial text: if the worker dies, the sweep keeps it."""
    Message.objects.filter(pk=message_id, status=Message.Status.STREAMING).update(
        content=partial_text, updated_at=timezone.now()
    )


class TurnMonitor(threading.Thread):
    """Runs beside a turn from its claim to its end, on its own database connection:

    * heartbeat: stamps the reply's ``heartbeat_at`` every ``CHAT_HEARTBEAT_SECONDS``, so the
      watchdog can tell a live turn (however slow its provider) from one whose worker died;
    * stop: looks for the user's stop every ``CHECKPOINT_SECONDS`` and closes the provider's
      stream at once, so a silent provider (before its first token, or stalled) is stopped too.
    """

    def __init__(self, message_id: int) -> None:
        super().__init__(daemon=True, name=f"turn-monitor-{message_id}")
        self.message_id = message_id
        self.finished = threading.Event()
        self.stopped = threading.Event()
        self._stream: gateway.ChatStream | None = None
        self._lock = threading.Lock()

    def attach(self, stream: gateway.ChatStream) -> None:
        with self._lock:
            self._stream = stream
            stopped = self.stopped.is_set()
        if stopped:
            stream.close()

    def run(self) -> None:
        beat_every = settings.CHAT_HEARTBEAT_SECONDS
        last_beat = time.monotonic()
        try:
            while not self.finished.wait(CHECKPOINT_SECONDS):
                try:
                    if time.monotonic() - last_beat >= beat_every:
                        last_beat = time.monotonic()
                        Message.objects.filter(
                            pk=self.message_id, status=Message.Status.STREAMING
                        ).update(heartbeat_at=timezone.now())
                    flag = (
                        Message.objects.filter(pk=self.message_id)
                        .values_list("stop_requested", flat=True)
                        .first()
                    )
                except Exception:  # the database blinked: the turn itself will notice if it lasts
                    log.warning("turn_monitor_db_error", message_id=self.message_id, exc_info=True)
                    connection.close()
                    continue
                if flag and not self.stopped.is_set():
                    with self._lock:
                        self.stopped.set()
                        stream = self._stream
                    if stream is not None:
                        stream.close()
        finally:
            connection.close()

    def stop(self) -> None:
        self.finished.set()
        self.join(timeout=5)


def _finish(reply: Message, **fields: Any) -> Message | None:
    """Conditional ``streaming -> final`` write; returns the fresh row, or None if we lost it."""
    updated = Message.objects.filter(pk=reply.pk, status=Message.Status.STREAMING).update(
        updated_at=timezone.now(), **fields
    )
    if not updated:
        log.warning("turn_finish_lost", message_id=reply.pk)
        return None
    return Message.objects.get(pk=reply.pk)


def _end_unfinished(
    reply: Message, error: PlatformError, *, status: str, partial_text: str = ""
) -> None:
    """End a claimed reply that did not complete: ``failed`` (or ``interrupted``), keeping any
    partial text (it counts toward the context like any finished text), with its frame."""
    tokens = count_message_tokens(partial_text, model=reply.model) if partial_text else 0
    with transaction.atomic():
        message = _finish(
            reply,
            status=status,
            content=partial_text,
            token_count=tokens,
            error_code=error.code,
            error_message=error.message,
            finish_reason="error",
        )
        if message is not None and status == Message.Status.INTERRUPTED:
            session_context_add(session_id=reply.session_id, tokens=tokens)
    log.warning(
        "turn_failed",
        message_id=reply.pk,
        session_id=reply.session_id,
        code=error.code,
        status=status,
    )
    if message is not None:
        realtime.notify_message_failed(message)


def _fail(reply: Message, error: PlatformError, *, partial_text: str = "") -> None:
    _end_unfinished(reply, error, status=Message.Status.FAILED, partial_text=partial_text)
    try:
        _notify_context(reply.session_id)
    except Exception:  # the failure is stored and sent; the meter can wait for the next turn
        log.exception("turn_context_notify_failed", session_id=reply.session_id)


@dataclass
class _TurnState:
    parts: list[str] = field(default_factory=list)

    @property
    def text(self) -> str:
        return "".join(self.parts)


def turn_run(*, message_id: int) -> None:
    """Run one turn. After the claim, whatever happens ends the reply visibly: ``complete``,
    or ``failed``/``interrupted`` with a ``message.failed`` frame and a logged traceback."""
    reply = Message.objects.select_related("session__bot", "reply_to").filter(pk=message_id).first()
    if reply is None or reply.status != Message.Status.PENDING:
        log.info("turn_skipped", message_id=message_id, status=reply and reply.status)
        return
    now = timezone.now()
    claimed = Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
        status=Message.Status.STREAMING, updated_at=now, heartbeat_at=now
    )
    if not claimed:
        return
    reply.status = Message.Status.STREAMING
    state = _TurnState()
    monitor = TurnMonitor(reply.pk)
    monitor.start()
    try:
        _turn_body(reply, monitor, state)
    except PlatformError as exc:  # an expected refusal (context_too_large, model_unavailable…)
        _safe_fail(reply, exc, state)
    except Exception:
        log.exception("turn_crashed", message_id=reply.pk, session_id=reply.session_id)
        _safe_fail(reply, InternalError("The reply failed because of an internal error."), state)
    except BaseException:  # the worker is shutting down under us: keep what we have, then go
        log.exception("turn_interrupted", message_id=reply.pk, session_id=reply.session_id)
        with contextlib.suppress(Exception):
            _end_unfinished(
                reply,
                PlatformError("The reply was interrupted before it finished."),
                status=Message.Status.INTERRUPTED,
                partial_text=state.text,
            )
        raise
    finally:
        monitor.stop()


def _safe_fail(reply: Message, error: PlatformError, state: _TurnState) -> None:
    """Fail the reply; if even that cannot be written (database down), the heartbeat stops and
    the watchdog marks it interrupted once the database answers."""
    try:
        _fail(reply, error, partial_text=state.text)
    except Exception:
        log.exception("turn_fail_write_failed", message_id=reply.pk)


def _stream_round(
    reply: Message,
    monitor: TurnMonitor,
    state: _TurnState,
    config: gateway.ModelConfig,
    messages: list[dict[str, Any]],
    *,
    tools: list[dict[str, Any]] | None,
) -> gateway.ChatStream:
    """One model call, streamed to the session. While recall is possible, a reply that opens
    with ``{`` is held back until it ends: it may be a JSON recall request, not an answer."""
    batcher = DeltaBatcher(reply)
    stream = gateway.stream(config, messages, tools=tools)
    monitor.attach(stream)
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
    except gateway.ModelUnavailable as exc:
        raise ModelUnavailable(f"The model did not answer: {exc}") from exc
    finally:
        completion = stream.completion
        if (
            holding
            and state.text
            and not (
                completion is not None and calls_from_text(completion.text, call_id="-") is not None
            )
        ):
            batcher.add(state.text)  # not a recall request after all: send it
        batcher.flush()
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
    model = session.bot.model
    call_content = text if not completion_has_calls(calls, text) else ""
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
    )
    with transaction.atomic():
        # seqs: the request takes the reply's place, results follow, the reply moves last
        first = allocate_seqs(session_id=session.pk, count=len(results) + 1)
        old_seq = reply.seq
        Message.objects.filter(pk=reply.pk).update(seq=first + len(results))
        stored = [
            Message.objects.create(
                session=session,
                seq=old_seq,
                role=Message.Role.ASSISTANT,
                kind=Message.Kind.TOOL,
                content=call_content,
                tool_calls=[c.as_openai() for c in calls],
                status=Message.Status.COMPLETE,
                token_count=call_tokens,
                model=model,
            )
        ]
        for offset, result in enumerate(results):
            stored.append(
                Message.objects.create(
                    session=session,
                    seq=first + offset,
                    role=Message.Role.TOOL,
                    kind=Message.Kind.TOOL,
                    content=result.content,
                    tool_call_id=result.call.id,
                    tool_name=result.call.name,
                    status=Message.Status.COMPLETE,
                    token_count=count_message_tokens(result.content, model=model),
                )
            )
        session_context_add(
            session_id=session.pk,
            tokens=sum(m.token_count for m in stored),
            messages=len(stored),
        )
        for message in stored:
            transaction.on_commit(partial(realtime.notify_message_created, message))
    return stored


def completion_has_calls(calls: list[ToolCall], text: str) -> bool:
    """True when ``text`` is the JSON request itself (the calls came from the text)."""
    return calls_from_text(text, call_id="-") is not None


def _turn_body(reply: Message, monitor: TurnMonitor, state: _TurnState) -> None:
    session = reply.session
    bot = session.bot
    started = time.monotonic()

    if reply.stop_requested or monitor.stopped.is_set():
        message = _finish(
            reply, status=Message.Status.COMPLETE, finish_reason="stopped", content=""
        )
        if message is not None:
            realtime.notify_message_completed(message)
        return

    config = bot_model_config(bot)
    # memory_index_size = 0 disables recall with the index; recall_enabled = false keeps the
    # index visible but offers no recall (CONTRACT §10).
    recall_on = bot.recall_enabled and bot.memory_index_size > 0
    recalled: list[Message] = []
    recall_round = 0
    while True:
        may_recall = recall_on and recall_round < RECALL_MAX_ROUNDS
        context = context_build(
            session=session, reply=reply, recalled=recalled, recall_open=may_recall
        )
        stream = _stream_round(
            reply,
            monitor,
            state,
            config,
            context.messages,
            tools=RECALL_TOOLS if may_recall else None,
        )
        completion = stream.completion
        if not may_recall or completion is None or monitor.stopped.is_set():
            break
        calls = calls_from_completion(completion.tool_calls) or calls_from_text(
            completion.text, call_id=f"recall-{reply.pk}-{recall_round + 1}"
        )
        if not calls:
            break
        recall_round += 1
        recalled.extend(
            _recall_round(reply, context, calls, recall_round=recall_round, text=completion.text)
        )
        reply.refresh_from_db(fields=["seq"])
        state.parts.clear()  # the answer is what the model says after its lookups

    completion = stream.completion
    stopped = monitor.stopped.is_set() and completion is None
    text = state.text
    fields: dict[str, Any] = {
        "status": Message.Status.COMPLETE,
        "content": text,
        # An empty reply (stopped before the first token) takes no part in the context.
        "token_count": count_message_tokens(text, model=bot.model) if text else 0,
        "finish_reason": "stopped" if stopped else (completion.finish_reason if completion else ""),
        "model": bot.model,
    }
    if completion is not None:
        fields["prompt_tokens"] = completion.prompt_tokens
        fields["completion_tokens"] = completion.completion_tokens
    with transaction.atomic():
        message = _finish(reply, **fields)
        if message is not None:
            session_context_add(session_id=session.pk, tokens=message.token_count)
    log.info(
        "turn_completed",
        message_id=reply.pk,
        session_id=session.pk,
        bot_id=bot.pk,
        model=bot.model,
        finish_reason=fields["finish_reason"],
        context_tokens=context.admission.selected_tokens,
        reply_tokens=fields["token_count"],
        duration_ms=int((time.monotonic() - started) * 1000),
    )
    if message is not None:
        realtime.notify_message_completed(message)
    try:
        _notify_context(session.pk)
    except Exception:  # the reply is complete and sent; the meter and soft trigger can wait
        log.exception("turn_context_notify_failed", session_id=session.pk)


def _notify_context(session_id: int) -> None:
    """After every turn: the context report (same numbers as the endpoint), and a soft compaction
    on the ``compaction`` queue when pressure reached the soft threshold. The turn never waits."""
    session = ChatSession.objects.select_related("bot").get(pk=session_id)
    report = context_report(session=session)
    realtime.notify_context_updated(session_id, report)
    compaction = report["compaction"]
    if (
        compaction["enabled"]
        and report["soft"]
        and report["pressure"] >= report["soft"]
        and not compaction["cooldown_until"]
        and not compaction["in_flight"]
    ):
        transaction.on_commit(partial(dispatch.compact_soft_dispatch, session_id))
