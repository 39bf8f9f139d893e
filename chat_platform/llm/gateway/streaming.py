"""A streamed call (``stream`` / ``ChatStream``) on either road: litellm's stream wrapper, or
the direct road for an OpenAI-compatible server (``direct``). Each attempt reads the chunks under
the output cap and the secrets' redactor; only an attempt that has shown no text is retried."""

from __future__ import annotations

import contextlib
import contextvars
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
import tenacity

from chat_platform import outbound, redaction
from chat_platform.llm import openai_compat
from chat_platform.llm.gateway import direct as direct_road
from chat_platform.llm.gateway.config import Completion, ModelCallFailed, ModelConfig
from chat_platform.llm.gateway.errors import MODEL_CALL_RETRY, attempts_of, unavailable
from chat_platform.llm.gateway.request import call_kwargs, outbound_policy, setting
from chat_platform.llm.gateway.results import (
    OutputCap,
    arguments_text,
    clean_tool_call,
    content_text,
    field_of,
    finish_reason_of,
    log_done,
    log_failed,
    log_retry,
    usage_tokens,
)
from chat_platform.textcheck import text_made_storable

log = structlog.get_logger("chat_platform.llm.gateway")

_END = object()

# Threads that send a direct-road request while the turn's own waits for its answer or a stop
# (``ChatStream._open``); a stopped opening holds one until its provider answers or times out.
_OPENERS = futures.ThreadPoolExecutor(max_workers=64, thread_name_prefix="llm-open")
# How often a waiting opening looks whether the call was stopped.
OPEN_STOP_CHECK_SECONDS = 0.2


def _close_late_response(opening: futures.Future[Any]) -> None:
    """The response of an opening whose call was stopped meanwhile: closed unread."""
    if opening.cancelled() or opening.exception() is not None:
        return
    with contextlib.suppress(Exception):
        opening.result().close()


@dataclass(frozen=True)
class _Call:
    """One streamed call as built once, before its attempts."""

    kwargs: dict[str, Any]
    direct: bool
    policy: outbound.Policy
    secrets: tuple[str, ...]


class _Read:
    """What one attempt has read. Each attempt starts clean: nothing of a failed one was shown,
    so what its redactor held or its cap counted is not part of the next one."""

    def __init__(self, call: _Call, model: str) -> None:
        self.cap = OutputCap(call.kwargs["max_tokens"], model=model)
        self.redactor = redaction.StreamRedactor(call.secrets)
        self.calls: dict[int, dict] = {}
        self.finish_reason: str | None = None
        self.usage: Any = None
        # Set when ``close()`` ended the attempt: the call ends quietly, without an answer.
        self.stopped = False


def stream(
    config: ModelConfig,
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    on_open: Callable[[], None] | None = None,
) -> ChatStream:
    """A streaming call. Nothing is sent until the returned stream is iterated.

    ``on_open`` runs once, in the iterating thread, when the provider has accepted the request
    (its response has begun) and before the first chunk is read: work the caller can do while
    the model produces its first token. An exception it raises is logged, not propagated.
    """
    return ChatStream(config, messages, tools=tools, on_open=on_open)


class ChatStream:
    """Iterate for text deltas; ``completion`` is set once the stream ends normally.

    ``close()`` stops early (user pressed stop): the HTTP response is closed, iteration ends
    quietly and ``completion`` stays ``None``. It may be called from another thread. Breaking out
    of the loop without calling ``close()`` closes the response too (when the iterator is
    collected). ``text`` is what has arrived so far.
    """

    def __init__(
        self,
        config: ModelConfig,
        messages: list[dict],
        *,
        tools: list[dict] | None = None,
        on_open: Callable[[], None] | None = None,
    ) -> None:
        self.config = config
        self.messages = messages
        self.tools = tools
        self._on_open = on_open
        self.completion: Completion | None = None
        self._parts: list[str] = []
        self._response: Any = None
        self._closed = threading.Event()
        self._iterator: Iterator[str] | None = None
        self._lock = threading.Lock()

    @property
    def text(self) -> str:
        return "".join(self._parts)

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def __iter__(self) -> Iterator[str]:
        if self._iterator is not None:
            raise RuntimeError("a ChatStream can be iterated only once")
        self._iterator = self._run()
        return self._iterator

    def close(self) -> None:
        self._closed.set()
        self._close_response()
        if self._iterator is not None:
            # ValueError: it is running in another thread; the closed response ends it there.
            with contextlib.suppress(ValueError):
                self._iterator.close()  # type: ignore[attr-defined]

    def _opened(self) -> None:
        callback, self._on_open = self._on_open, None
        if callback is None:
            return
        try:
            callback()
        except Exception:  # the caller's bookkeeping must not fail the model call
            log.exception("llm_stream_on_open_failed", model=self.config.model)

    def _close_response(self, *, wake_reader: bool = True) -> None:
        """Close the attempt's response. ``wake_reader``: another thread may be blocked reading
        its socket (a stop), so the socket is shut down first; the reading thread's own close
        (the stream's end) leaves it whole: a body read to its end puts the connection back in
        the pool (it was shut down after every call, and every call connected anew)."""
        with self._lock:
            response, self._response = self._response, None
        if response is not None:
            try:
                if wake_reader:
                    direct_road.shutdown_socket(response)
                response.close()
            except Exception:  # best effort: the stream is being abandoned anyway
                log.debug("llm_stream_close_failed", model=self.config.model, exc_info=True)

    def _run(self) -> Iterator[str]:
        started = time.monotonic()
        call = self._build(started)
        state: tenacity.RetryCallState | None = None
        read: _Read | None = None
        retrying = MODEL_CALL_RETRY.attempts(
            # A stream that has shown text is not started again: the user has read it.
            may_retry=lambda: not self._parts,
            # A stop during the back-off ends the wait (and, below, the call).
            sleep=self._closed.wait,
            on_retry=partial(log_retry, self.config),
        )
        try:
            for attempt in retrying:
                state = attempt.retry_state
                if self.closed:
                    return
                read = _Read(call, self.config.model)
                with attempt:
                    yield from self._attempt(call, read)
                if read.stopped:
                    return
        except Exception as exc:
            failure = unavailable(self.config, exc, attempts=attempts_of(state), kwargs=call.kwargs)
            log_failed(self.config, failure, started=started, streamed=True)
            raise failure from exc
        finally:
            self._close_response(wake_reader=False)
        assert read is not None  # tenacity makes at least one attempt
        yield from self._finish(read, started=started, attempts=attempts_of(state))

    def _build(self, started: float) -> _Call:
        """The call's arguments, its road and its outbound policy; a refused call is logged and
        raised before anything is sent."""
        config = self.config
        try:
            kwargs = call_kwargs(
                config, self.messages, tools=self.tools, max_tokens=None, stream=True
            )
        except ModelCallFailed as error:
            log_failed(config, error, started=started, streamed=True)
            raise
        direct = openai_compat.is_direct(
            config.model,
            kwargs.get("api_base") or "",
            enabled=bool(setting("LLM_DIRECT_OPENAI_COMPATIBLE")),
        )
        return _Call(
            kwargs=kwargs,
            direct=direct,
            policy=outbound_policy(config, kwargs),
            secrets=redaction.secret_values(),
        )

    def _attempt(self, call: _Call, read: _Read) -> Iterator[str]:
        """One attempt: open the stream, read it into ``read`` (``read.stopped`` on a stop)."""
        try:
            with outbound.scope(call.policy):
                response = self._open(call)
            if response is None:  # stopped before the provider answered
                read.stopped = True
                return
            with self._lock:
                self._response = response
            if self.closed:
                read.stopped = True
                return
            self._opened()
            yield from self._read_chunks(response, call, read)
            if self.closed:
                # Stopped: a closed socket can read as the body's end (HTTP/1.0), so the loop
                # may finish normally; it is still a stop, not an answer.
                read.stopped = True
                return
            if (
                call.direct
                and read.finish_reason is None
                and not read.cap.reached
                and not getattr(response, "done", True)
            ):
                raise openai_compat.ProviderProtocolError(
                    "the provider's stream ended before the answer did"
                )
        except Exception:
            if self.closed:
                read.stopped = True
                return
            self._close_response()
            raise

    def _open(self, call: _Call) -> Any:
        """Open the stream (None: stopped before the provider sent its headers). On the direct
        road the request is sent from a thread of ``_OPENERS`` while this one waits for its
        answer or a stop: a provider that holds the request before answering left no socket
        to shut, and a stop waited for the read timeout (two minutes by default). A stopped
        opening goes on on its own and its late response is closed when it comes."""
        if not call.direct:
            return direct_road.open_stream(call.kwargs, direct=False)
        opening = _OPENERS.submit(
            contextvars.copy_context().run, direct_road.open_stream, call.kwargs, direct=True
        )
        while True:
            done, _ = futures.wait([opening], timeout=OPEN_STOP_CHECK_SECONDS)
            if done:
                return opening.result()
            if self.closed:
                opening.add_done_callback(_close_late_response)
                return None

    def _read_chunks(self, response: Any, call: _Call, read: _Read) -> Iterator[str]:
        chunks = iter(response)
        while True:
            # Only the reads are in the policy's scope: a yield leaves this frame, and the
            # caller's code between chunks must not run inside it.
            with outbound.scope(call.policy):
                chunk = next(chunks, _END)
            if chunk is _END:
                break
            chunk_usage = field_of(chunk, "usage")
            if chunk_usage is not None:
                read.usage = chunk_usage
                if read.finish_reason is not None and not call.direct:
                    # The provider's usage chunk follows the last choice: the answer is whole.
                    # Reading on only makes litellm rebuild the full response for its logging
                    # (a quarter of a call's CPU). (The direct road reads on to [DONE]: its
                    # connection goes back to the pool.)
                    break
            choices = field_of(chunk, "choices")
            if not choices:
                continue
            choice = choices[0]
            read.finish_reason = finish_reason_of(field_of(choice, "finish_reason")) or (
                read.finish_reason
            )
            delta = field_of(choice, "delta")
            if field_of(delta, "tool_calls"):
                for tool_call in field_of(delta, "tool_calls"):
                    merge_tool_call_delta(read.calls, tool_call)
            content = field_of(delta, "content")
            if content:
                content = read.cap.take(text_made_storable(content_text(content)))
                shown = read.redactor.feed(content)
                if shown:
                    self._parts.append(shown)
                    yield shown
                if read.cap.reached:
                    # Far past max_tokens: the provider ignores the cap. Stop reading; what
                    # arrived is the reply, cut at the cap.
                    read.finish_reason = "length"
                    self._close_response()
                    break

    def _finish(self, read: _Read, *, started: float, attempts: int) -> Iterator[str]:
        """What the redactor still holds, then ``completion`` and the call's log line."""
        config = self.config
        rest = read.redactor.flush()
        if rest:
            self._parts.append(rest)
            yield rest
        tool_calls = [clean_tool_call(call_joined(read.calls[i])) for i in sorted(read.calls)]
        text = self.text
        prompt_tokens, completion_tokens = usage_tokens(
            read.usage, config, self.messages, text, tool_calls
        )
        self.completion = Completion(
            text=text,
            finish_reason=read.finish_reason or ("tool_calls" if tool_calls else "stop"),
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            model=config.model,
            tool_calls=tool_calls,
        )
        log_done(config, self.completion, started=started, attempts=attempts, streamed=True)


def merge_tool_call_delta(calls: dict[int, dict], delta: Any) -> None:
    """Add one streamed tool-call delta to ``calls`` (by index). The arguments' pieces are kept
    in a list, joined once by ``call_joined``: a long argument arrives in hundreds of thousands
    of pieces, and adding each to a growing string cost quadratic time (a 2 MB argument: 11.8 s
    of CPU in this function alone)."""
    index = field_of(delta, "index")
    index = index if isinstance(index, int) else len(calls)
    call = calls.setdefault(
        index, {"id": "", "type": "function", "function": {"name": "", "arguments": []}}
    )
    if field_of(delta, "id"):
        call["id"] = field_of(delta, "id")
    function = field_of(delta, "function")
    if field_of(function, "name"):
        call["function"]["name"] = field_of(function, "name")
    if arguments := field_of(function, "arguments"):
        call["function"]["arguments"].append(arguments_text(arguments))


def call_joined(call: dict) -> dict:
    """A call merged by ``merge_tool_call_delta``, its arguments one string."""
    return {
        **call,
        "function": {**call["function"], "arguments": "".join(call["function"]["arguments"])},
    }
