"""The chat turn: context -> model -> stream -> persist. Runs inside the ``chat`` Celery task.

Safe to run twice: the reply is claimed with a conditional ``pending -> streaming`` update, and the
final text is written with a conditional ``streaming -> complete|failed`` update, so a redelivered
task or a racing sweep never overwrites a finished reply.
"""

import threading
import time
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from bots import realtime
from bots.models import Bot, ChatSession, Message
from bots.services import session_context_add
from chat_platform.errors import ModelUnavailable, PlatformError
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens
from compaction.pipeline import context_build, context_report

log = structlog.get_logger(__name__)

# How often a streaming turn saves its partial text (kept if the worker dies: the sweep marks the
# reply interrupted) and looks for a user's stop request.
CHECKPOINT_SECONDS = 0.5


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


class StopWatcher(threading.Thread):
    """Watches for the user's stop beside the stream, so a provider that is silent — before its
    first token, or stalled mid-stream — is stopped at once: closing the stream from here ends
    the turn's blocked read. Uses (and closes) its own database connection."""

    def __init__(self, message_id: int, stream: gateway.ChatStream) -> None:
        super().__init__(daemon=True, name=f"stop-watch-{message_id}")
        self.message_id = message_id
        self.stream = stream
        self.finished = threading.Event()
        self.stopped = False

    def run(self) -> None:
        try:
            while not self.finished.wait(CHECKPOINT_SECONDS):
                flag = (
                    Message.objects.filter(pk=self.message_id)
                    .values_list("stop_requested", flat=True)
                    .first()
                )
                if flag:
                    self.stopped = True
                    self.stream.close()
                    return
        finally:
            connection.close()


def _finish(reply: Message, **fields: Any) -> Message | None:
    """Conditional ``streaming -> final`` write; returns the fresh row, or None if we lost it."""
    updated = Message.objects.filter(pk=reply.pk, status=Message.Status.STREAMING).update(
        updated_at=timezone.now(), **fields
    )
    if not updated:
        log.warning("turn_finish_lost", message_id=reply.pk)
        return None
    return Message.objects.get(pk=reply.pk)


def _fail(reply: Message, error: PlatformError, *, partial_text: str = "") -> None:
    message = _finish(
        reply,
        status=Message.Status.FAILED,
        content=partial_text,
        token_count=count_message_tokens(partial_text, model=reply.model) if partial_text else 0,
        error_code=error.code,
        error_message=error.message,
        finish_reason="error",
    )
    log.warning("turn_failed", message_id=reply.pk, session_id=reply.session_id, code=error.code)
    if message is not None:
        realtime.notify_message_failed(message)
    _notify_context(reply.session_id)


def turn_run(*, message_id: int) -> None:
    reply = Message.objects.select_related("session__bot", "reply_to").filter(pk=message_id).first()
    if reply is None or reply.status != Message.Status.PENDING:
        log.info("turn_skipped", message_id=message_id, status=reply and reply.status)
        return
    claimed = Message.objects.filter(pk=message_id, status=Message.Status.PENDING).update(
        status=Message.Status.STREAMING, updated_at=timezone.now()
    )
    if not claimed:
        return
    reply.status = Message.Status.STREAMING
    session = reply.session
    bot = session.bot
    started = time.monotonic()

    if reply.stop_requested:
        message = _finish(
            reply, status=Message.Status.COMPLETE, finish_reason="stopped", content=""
        )
        if message is not None:
            realtime.notify_message_completed(message)
        return

    try:
        context = context_build(session=session, reply=reply)
    except PlatformError as exc:
        _fail(reply, exc)
        return

    parts: list[str] = []
    batcher = DeltaBatcher(reply)
    stream = gateway.stream(bot_model_config(bot), context.messages)
    watcher = StopWatcher(reply.pk, stream)
    watcher.start()
    try:
        last_checkpoint = time.monotonic()
        for delta in stream:
            parts.append(delta)
            batcher.add(delta)
            if time.monotonic() - last_checkpoint >= CHECKPOINT_SECONDS:
                last_checkpoint = time.monotonic()
                _checkpoint(reply.pk, "".join(parts))
        batcher.flush()
    except gateway.ModelUnavailable as exc:
        batcher.flush()
        _fail(
            reply, ModelUnavailable(f"The model did not answer: {exc}"), partial_text="".join(parts)
        )
        return
    except Exception:
        batcher.flush()
        log.exception("turn_crashed", message_id=reply.pk)
        _fail(
            reply,
            ModelUnavailable("The reply failed unexpectedly."),
            partial_text="".join(parts),
        )
        return
    finally:
        watcher.finished.set()
        watcher.join(timeout=5)
    stopped = watcher.stopped

    text = "".join(parts)
    completion = stream.completion
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
    _notify_context(session.pk)


def _notify_context(session_id: int) -> None:
    """After every turn: the context report (same numbers as the endpoint), and a soft compaction
    on the ``compaction`` queue when pressure reached the soft threshold. The turn never waits."""
    from compaction.tasks import compact_soft

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
        transaction.on_commit(partial(compact_soft.delay, session_id))
