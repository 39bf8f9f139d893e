"""One streamed model call of a turn: the deltas to the session (batched, ``DeltaBatcher``),
checkpoints of the partial text, and the call as the context record keeps it (``call_entry``).
The turn's core (``turns.turn``) and its recall loop (``turns.recall_loop``) call it."""

import time
from dataclasses import dataclass, field
from typing import Any

import structlog
from django.conf import settings

from bots import realtime
from bots.models import Message
from bots.transitions import reply_checkpoint
from chat_platform.dbconn import connection_release
from chat_platform.errors import ContextTooLarge, ModelUnavailable
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_tools_tokens
from compaction.pipeline import BuiltContext
from compaction.provenance import part
from memory.recall import calls_from_text
from turns.finished import TurnFinished, envelope
from turns.liveness import CHECKPOINT_SECONDS, TurnHandle

log = structlog.get_logger(__name__)

# A streaming turn saves its partial text every CHECKPOINT_SECONDS (kept if the worker dies: the
# watchdog marks the reply interrupted); the process's watcher looks for stops as often.


@dataclass
class TurnState:
    """What a running turn holds: the text streamed so far, and its notifier (``finished``)."""

    finished: TurnFinished
    parts: list[str] = field(default_factory=list)
    # What the turn's model calls used, every call of its recall and tool rounds: the reply's
    # usage (it was the last call's alone, a twentieth of a long tool loop).
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def text(self) -> str:
        return "".join(self.parts)


class DeltaBatcher:
    """Sends the first delta at once, then batches: at most one frame per flush interval."""

    def __init__(self, reply: Message) -> None:
        self.reply = reply
        self.bot = realtime.room_frame_bot(reply.session)  # the seat, loaded with the claim
        self.buffer: list[str] = []
        # The first delta goes out the moment it arrives (time to first token is what a user
        # feels); batching only starts after it.
        self.last_flush = float("-inf")
        self.interval = settings.CHAT_STREAM_FLUSH_SECONDS
        self.holding = False  # text held back until it is known not to be a recall request
        # What the frames sent so far carried, in UTF-16 code units as a browser counts a
        # string: each frame says where its delta starts (``offset``), so a client that joined
        # from the saved text (a reconnect) appends only what follows it.
        self.sent = 0

    def add(self, delta: str) -> None:
        self.buffer.append(delta)
        if time.monotonic() - self.last_flush >= self.interval:
            self.flush()

    def flush(self) -> None:
        if self.buffer:
            text = "".join(self.buffer)
            offset = self.sent
            self.sent += utf16_length(text)
            if self.bot is None:  # a one-bot chat's frame: no bot
                realtime.notify_message_delta(self.reply, text, offset=offset)
            else:
                realtime.notify_message_delta(self.reply, text, bot=self.bot, offset=offset)
            self.buffer.clear()
        self.last_flush = time.monotonic()


def utf16_length(text: str) -> int:
    """``text.length`` in a browser: characters past U+FFFF (most emoji) count twice."""
    return len(text) + sum(1 for ch in text if ord(ch) > 0xFFFF)


def checkpoint(message_id: int, partial_text: str) -> None:
    """Save the partial text: if the worker dies, the watchdog keeps it."""
    reply_checkpoint(message_id=message_id, content=partial_text)
    connection_release()


def call_entry(
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


def stream_round(
    reply: Message,
    handle: TurnHandle,
    state: TurnState,
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
    # While recall is possible, text that opens with ``{`` is held back (``_relay``).
    batcher.holding = tools is not None
    try:
        _relay(stream, reply, state, batcher, handle)
    except gateway.ModelCallFailed as exc:
        if exc.context_window:  # the provider's window is smaller than the bot was told
            raise ContextTooLarge(
                f"The model refused the request as longer than its context window ({exc}). "
                "Set the bot's context window to the model's, or compact the chat."
            ) from exc
        error = f"The model did not answer: {exc}"
        raise ModelUnavailable(error) from exc
    finally:
        completion = stream.completion
        state.finished.calls.append(
            call_entry(
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
            batcher.holding
            and state.text
            and not (
                completion is not None and calls_from_text(completion.text, call_id="-") is not None
            )
        ):
            batcher.add(state.text)  # not a recall request after all: send it
        batcher.flush()
        if not recorded:
            # a bookkeeping write must not hide how the call ended
            with envelope("turn_admission_record_failed", message_id=reply.pk):
                record_admission()
    return stream


def _relay(
    stream: gateway.ChatStream,
    reply: Message,
    state: TurnState,
    batcher: DeltaBatcher,
    handle: TurnHandle,
) -> None:
    """Relay the call's deltas to the session, checkpointing the partial text. ``batcher.holding``
    stays true while the text opens with ``{`` (maybe a JSON recall request), however the
    stream ends. Text that arrived since the last checkpoint is marked on ``handle``: when the
    stream stalls, the watcher saves it (``TurnHandle.save_unsaved``)."""
    last_checkpoint = time.monotonic()
    for delta in stream:
        state.parts.append(delta)
        handle.text_arrived(state)
        if batcher.holding:
            head = state.text.lstrip()
            if not head:
                continue
            batcher.holding = head.startswith("{")
            if batcher.holding:
                continue
            delta = state.text  # release what was held
        batcher.add(delta)
        if time.monotonic() - last_checkpoint >= CHECKPOINT_SECONDS:
            last_checkpoint = time.monotonic()
            handle.unsaved = None
            checkpoint(reply.pk, state.text)
