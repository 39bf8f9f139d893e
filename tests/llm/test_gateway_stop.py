"""A caller's Stop for unstreamed calls (chat_platform/llm/gateway/stop.py): the wait ends at
once, the call's own answer or error comes back otherwise, and its context goes with it."""

import contextvars
import threading
import time

import pytest

from chat_platform.llm.gateway.stop import CallStopped, stop_on, stop_requested, stoppable

_seen: contextvars.ContextVar[str] = contextvars.ContextVar("seen", default="unset")


def test_without_a_stop_event_the_call_runs_in_the_callers_thread():
    assert stoppable(threading.get_ident) == threading.get_ident()
    assert stop_requested() is False


def test_with_one_the_answer_comes_back_with_the_callers_context():
    _seen.set("the caller's")
    with stop_on(threading.Event()):
        assert stoppable(_seen.get) == "the caller's"
        assert stoppable(threading.get_ident) != threading.get_ident()


def test_the_calls_error_is_raised_in_the_callers_thread():
    def failing():
        raise ValueError("provider said no")

    with stop_on(threading.Event()), pytest.raises(ValueError, match="provider said no"):
        stoppable(failing)


def test_a_stop_ends_the_wait_at_once_and_the_call_is_left_to_its_timeout():
    event, release = threading.Event(), threading.Event()
    threading.Timer(0.2, event.set).start()
    with stop_on(event):
        with pytest.raises(CallStopped):
            stoppable(lambda: release.wait(30))
        assert stop_requested() is True
    release.set()
    assert stop_requested() is False  # outside the block


def test_a_stop_before_the_call_makes_none():
    event = threading.Event()
    event.set()
    made = []
    with stop_on(event), pytest.raises(CallStopped):
        stoppable(lambda: made.append(time.monotonic()))
    assert made == []
