"""The gateway against a real local HTTP server, through litellm and the OpenAI SDK.

Every test runs on both roads a streamed call to an OpenAI-compatible server can take: read
directly (``openai_compat``, the default) and through litellm (``LLM_DIRECT_OPENAI_COMPATIBLE``
off). Both must give the same answers, errors, retries and stops."""

import gc
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from chat_platform.llm import gateway
from chat_platform.llm.gateway import ModelCallFailed, ModelConfig, lazy_litellm
from tests.fakeopenai import Reply

KEY_ENV = "CHAT_PLATFORM_TEST_GATEWAY_KEY"
KEY = "sk-test-gateway-key-123"
# A hung provider: far longer than any timeout below, so "it did not wait for the hang" can be
# asserted without an upper bound near the timeout (which a loaded machine would break).
HANG_SECONDS = 30

MESSAGES = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello."},
]
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_records",
            "description": "Read memory records by name.",
            "parameters": {
                "type": "object",
                "properties": {"names": {"type": "array", "items": {"type": "string"}}},
                "required": ["names"],
            },
        },
    }
]
TOOL_CALL = {
    "id": "call_abc",
    "type": "function",
    "function": {"name": "read_records", "arguments": '{"names": ["snapshot_1_40", "diet"]}'},
}


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported():
    gateway.warm_up()  # keep litellm's one-off import cost out of the timed tests


@pytest.fixture(autouse=True, params=["direct", "litellm"])
def road(request, settings):
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = request.param == "direct"
    return request.param


@pytest.fixture(autouse=True)
def _retry_settings(settings, monkeypatch):
    settings.LLM_MAX_RETRIES = 2
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01
    settings.LLM_TIMEOUT_SECONDS = 30.0
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def make_config(fake_openai):
    def make(**overrides):
        fields = {
            "model": "openai/fake-model",
            "api_base": fake_openai.url,
            "api_key_env": KEY_ENV,
            "api_base_trusted": True,  # as a staff-approved bot's
        }
        return ModelConfig(**{**fields, **overrides})

    return make


@pytest.fixture
def config(fake_openai):
    return ModelConfig(
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=KEY_ENV,
        api_base_trusted=True,
        temperature=0.2,
        max_output_tokens=77,
    )


def test_complete_returns_text_usage_and_sends_the_request(fake_openai, config):
    fake_openai.script(
        Reply(
            text="Hello there.",
            usage={"prompt_tokens": 21, "completion_tokens": 3, "total_tokens": 24},
        )
    )
    messages = [dict(m) for m in MESSAGES]

    completion = gateway.complete(config, messages)

    assert completion == gateway.Completion(
        text="Hello there.",
        finish_reason="stop",
        prompt_tokens=21,
        completion_tokens=3,
        model="openai/fake-model",
        tool_calls=[],
    )
    assert len(fake_openai.requests) == 1
    body = fake_openai.requests[0]
    assert body["model"] == "fake-model"
    assert body["messages"] == MESSAGES
    assert body["temperature"] == 0.2
    assert body["max_tokens"] == 77
    assert "stream" not in body
    assert "tools" not in body
    assert messages == MESSAGES  # the caller's list is not rewritten


def test_complete_max_tokens_overrides_config(fake_openai, config):
    gateway.complete(config, MESSAGES, max_tokens=5)

    assert fake_openai.requests[0]["max_tokens"] == 5


def test_stream_yields_deltas_in_order(fake_openai, config):
    fake_openai.script(
        Reply(
            text="Hello there, friend.",
            chunks=["Hel", "lo ", "there, ", "friend."],
            usage={"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
        )
    )

    stream = gateway.stream(config, MESSAGES)
    deltas = list(stream)

    assert deltas == ["Hel", "lo ", "there, ", "friend."]
    assert stream.completion == gateway.Completion(
        text="Hello there, friend.",
        finish_reason="stop",
        prompt_tokens=9,
        completion_tokens=4,
        model="openai/fake-model",
        tool_calls=[],
    )
    body = fake_openai.requests[0]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["max_tokens"] == 77


def test_stream_sends_nothing_until_iterated(fake_openai, config):
    stream = gateway.stream(config, MESSAGES)

    assert fake_openai.requests == []
    assert stream.completion is None
    assert list(stream) == ["Hell", "o fr", "om f", "ake."]
    assert len(fake_openai.requests) == 1


def test_stream_can_be_iterated_only_once(fake_openai, config):
    stream = gateway.stream(config, MESSAGES)
    list(stream)

    with pytest.raises(RuntimeError):
        iter(stream)


def test_on_open_runs_once_after_the_provider_took_the_request_before_any_chunk(
    fake_openai, config
):
    fake_openai.script(Reply(text="one two", chunks=["one ", "two"]))
    seen = []
    stream = gateway.stream(
        config, MESSAGES, on_open=lambda: seen.append((len(fake_openai.requests), stream.text))
    )
    assert seen == []  # nothing is sent before iterating
    assert list(stream) == ["one ", "two"]
    # the provider had the request; not one chunk had been read
    assert seen == [(1, "")]


def test_on_open_runs_once_across_retries(fake_openai, config):
    fake_openai.script(Reply(status=500), Reply(text="ok", chunks=["ok"]))
    calls = []
    stream = gateway.stream(config, MESSAGES, on_open=lambda: calls.append(1))
    assert list(stream) == ["ok"]
    assert (calls, len(fake_openai.requests)) == ([1], 2)


def test_on_open_does_not_run_when_the_provider_never_answers(fake_openai, config):
    fake_openai.stop()
    calls = []
    with pytest.raises(ModelCallFailed):
        list(gateway.stream(config, MESSAGES, on_open=lambda: calls.append(1)))
    assert calls == []


def test_a_failing_on_open_is_logged_and_the_stream_goes_on(fake_openai, config, caplog):
    fake_openai.script(Reply(text="still here", chunks=["still ", "here"]))

    def broken():
        raise RuntimeError("bookkeeping failed")

    stream = gateway.stream(config, MESSAGES, on_open=broken)
    assert list(stream) == ["still ", "here"]
    assert stream.completion is not None
    assert stream.completion.text == "still here"
    failures = [r for r in caplog.records if "llm_stream_on_open_failed" in r.getMessage()]
    assert len(failures) == 1
    assert failures[0].exc_info[1].args == ("bookkeeping failed",)


@pytest.mark.parametrize("streaming", [False, True])
def test_finish_reason_length_is_surfaced(fake_openai, config, streaming):
    fake_openai.script(Reply(text="Cut sho", finish_reason="length"))

    if streaming:
        stream = gateway.stream(config, MESSAGES)
        assert "".join(stream) == "Cut sho"
        completion = stream.completion
    else:
        completion = gateway.complete(config, MESSAGES)

    assert completion.text == "Cut sho"
    assert completion.finish_reason == "length"


@pytest.mark.parametrize("streaming", [False, True])
def test_tool_calls_are_returned_in_openai_shape(fake_openai, config, streaming):
    fake_openai.script(Reply(text="", tool_calls=[TOOL_CALL], finish_reason="tool_calls"))

    if streaming:
        stream = gateway.stream(config, MESSAGES, tools=TOOLS)
        assert list(stream) == []
        completion = stream.completion
    else:
        completion = gateway.complete(config, MESSAGES, tools=TOOLS)

    assert completion.tool_calls == [TOOL_CALL]
    assert completion.finish_reason == "tool_calls"
    assert completion.text == ""
    assert fake_openai.requests[0]["tools"] == TOOLS


@pytest.mark.parametrize("streaming", [False, True])
def test_http_500_is_retried_then_model_unavailable(fake_openai, config, streaming):
    fake_openai.default = Reply(status=500)

    with pytest.raises(ModelCallFailed) as caught:
        if streaming:
            list(gateway.stream(config, MESSAGES))
        else:
            gateway.complete(config, MESSAGES)

    assert len(fake_openai.requests) == 3  # 1 + LLM_MAX_RETRIES
    assert str(caught.value) == (
        "openai/fake-model: provider error (HTTP 500) (fake server error), after 3 attempts"
    )
    assert caught.value.status_code == 500
    assert caught.value.transient is True
    assert caught.value.attempts == 3


def test_one_retry_policy_serves_both_loops_on_both_roads(
    fake_openai, config, settings, monkeypatch
):
    """complete() and a stream, read directly or through litellm, all take their attempts from
    the one ``MODEL_CALL_RETRY``: no call counts attempts or sleeps on its own."""
    used = []
    attempts = gateway.MODEL_CALL_RETRY.attempts

    def recorded(**kwargs):
        retrying = attempts(**kwargs)
        used.append(retrying)
        return retrying

    monkeypatch.setattr(gateway.MODEL_CALL_RETRY, "attempts", recorded)
    for call, direct in [("complete", False), ("stream", True), ("stream", False)]:
        settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
        fake_openai.script(Reply(status=503), Reply(text="ok", chunks=["ok"]))
        if call == "complete":
            assert gateway.complete(config, MESSAGES).text == "ok"
        else:
            assert "".join(gateway.stream(config, MESSAGES)) == "ok"
        assert used[-1].statistics["attempt_number"] == 2, (call, direct)

    assert len(used) == 3
    assert len(fake_openai.requests) == 6


def test_a_retried_stream_starts_with_a_clean_redactor(fake_openai, make_config):
    """The failed attempt's only text was the start of the key (held back, never shown): the
    next attempt's answer must not be prefixed with it."""
    fake_openai.script(
        Reply(text=KEY[:6] + "x", chunks=[KEY[:6], "x"], stall_after=1, stall=10),
        Reply(text="Hello.", chunks=["Hello."]),
    )

    stream = gateway.stream(make_config(timeout=0.5), MESSAGES)

    assert "".join(stream) == "Hello."
    assert len(fake_openai.requests) == 2


def test_retry_count_follows_settings(fake_openai, config, settings):
    settings.LLM_MAX_RETRIES = 0
    fake_openai.default = Reply(status=503)

    with pytest.raises(ModelCallFailed):
        gateway.complete(config, MESSAGES)

    assert len(fake_openai.requests) == 1


def test_retry_backoff_is_exponential(fake_openai, config, settings):
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.2
    fake_openai.default = Reply(status=502)

    started = time.monotonic()
    with pytest.raises(ModelCallFailed):
        gateway.complete(config, MESSAGES)

    assert len(fake_openai.requests) == 3
    assert time.monotonic() - started >= 0.2 + 0.4


@pytest.mark.parametrize("streaming", [False, True])
def test_transient_failure_then_success(fake_openai, config, streaming):
    fake_openai.script(Reply(status=500), Reply(status=429), Reply(text="Finally."))

    if streaming:
        stream = gateway.stream(config, MESSAGES)
        text = "".join(stream)
    else:
        text = gateway.complete(config, MESSAGES).text

    assert text == "Finally."
    assert len(fake_openai.requests) == 3


@pytest.mark.parametrize(
    ("status", "reason"),
    [
        (400, "request rejected (HTTP 400) (fake server error)"),
        (401, "authentication failed: the provider key is missing or was refused"),
        (403, "permission denied (HTTP 403) (fake server error)"),
        (404, "model or endpoint not found (HTTP 404) (fake server error)"),
    ],
)
@pytest.mark.parametrize("streaming", [False, True])
def test_client_errors_are_not_retried(fake_openai, config, status, reason, streaming):
    fake_openai.default = Reply(status=status)

    with pytest.raises(ModelCallFailed) as caught:
        if streaming:
            list(gateway.stream(config, MESSAGES))
        else:
            gateway.complete(config, MESSAGES)

    assert len(fake_openai.requests) == 1
    assert str(caught.value) == f"openai/fake-model: {reason}"
    assert caught.value.transient is False


@pytest.mark.parametrize("streaming", [False, True])
def test_hung_server_ends_in_model_unavailable_within_timeout(
    fake_openai, make_config, settings, streaming
):
    settings.LLM_MAX_RETRIES = 0
    fake_openai.default = Reply(hang=HANG_SECONDS)
    config = make_config(timeout=1.0)

    started = time.monotonic()
    with pytest.raises(ModelCallFailed) as caught:
        if streaming:
            list(gateway.stream(config, MESSAGES))
        else:
            gateway.complete(config, MESSAGES)
    elapsed = time.monotonic() - started

    # Lower bounds only: the call waited for its timeout and did not wait for the hang (an upper
    # bound near the timeout would flake on a loaded machine; the message names the timeout).
    assert 0.9 <= elapsed < HANG_SECONDS / 2
    assert str(caught.value) == "openai/fake-model: timed out after 1 s"
    assert caught.value.transient is True
    assert len(fake_openai.requests) == 1


def test_hung_server_is_retried_with_bounded_total_time(fake_openai, make_config):
    fake_openai.default = Reply(hang=HANG_SECONDS)
    config = make_config(timeout=0.5)

    started = time.monotonic()
    with pytest.raises(ModelCallFailed) as caught:
        gateway.complete(config, MESSAGES)
    elapsed = time.monotonic() - started

    assert len(fake_openai.requests) == 3
    assert 1.5 <= elapsed < HANG_SECONDS / 2
    assert str(caught.value) == "openai/fake-model: timed out after 0.5 s, after 3 attempts"


def test_timeout_defaults_to_setting(fake_openai, make_config, settings):
    settings.LLM_TIMEOUT_SECONDS = 0.5
    settings.LLM_MAX_RETRIES = 0
    fake_openai.default = Reply(hang=HANG_SECONDS)

    started = time.monotonic()
    with pytest.raises(ModelCallFailed):
        gateway.complete(make_config(timeout=None), MESSAGES)

    assert time.monotonic() - started < HANG_SECONDS / 2


def test_stall_before_any_text_is_retried(fake_openai, make_config):
    fake_openai.script(Reply(text="ab", chunks=["ab"], stall_after=0, stall=10))

    stream = gateway.stream(make_config(timeout=0.5), MESSAGES)

    assert "".join(stream) == "Hello from fake."
    assert len(fake_openai.requests) == 2


def test_stall_after_text_keeps_partial_text_and_is_not_retried(fake_openai, make_config):
    fake_openai.script(Reply(text="abcd", chunks=["ab", "cd"], stall_after=1, stall=HANG_SECONDS))
    stream = gateway.stream(make_config(timeout=1.0), MESSAGES)
    received = []

    started = time.monotonic()
    with pytest.raises(ModelCallFailed) as caught:
        for delta in stream:
            received.append(delta)

    assert time.monotonic() - started < HANG_SECONDS / 2
    assert received == ["ab"]
    assert stream.text == "ab"
    assert stream.completion is None
    assert str(caught.value) == "openai/fake-model: timed out after 1 s"
    assert len(fake_openai.requests) == 1


def test_api_key_env_is_read_at_call_time(fake_openai, config, monkeypatch):
    gateway.complete(config, MESSAGES)
    monkeypatch.setenv(KEY_ENV, "sk-rotated-key")
    gateway.complete(config, MESSAGES)
    list(gateway.stream(config, MESSAGES))

    assert [h["authorization"] for h in fake_openai.headers] == [
        f"Bearer {KEY}",
        "Bearer sk-rotated-key",
        "Bearer sk-rotated-key",
    ]


KEY_FAILED = "openai/fake-model: authentication failed: the provider key is missing or was refused"


def _call(config, streaming):
    with pytest.raises(ModelCallFailed) as caught:
        if streaming:
            list(gateway.stream(config, MESSAGES))
        else:
            gateway.complete(config, MESSAGES)
    return caught.value


@pytest.mark.parametrize("streaming", [False, True])
def test_unset_api_key_env_fails_like_a_refused_key_and_sends_nothing(
    fake_openai, config, monkeypatch, streaming
):
    """Errors never confirm whether a variable exists: unset reads exactly like a wrong key."""
    monkeypatch.delenv(KEY_ENV)
    unset = _call(config, streaming)
    assert fake_openai.requests == []

    monkeypatch.setenv(KEY_ENV, "sk-wrong")
    fake_openai.default = Reply(status=401, error_message="Incorrect API key provided: sk-wrong")
    refused = _call(config, streaming)

    assert str(unset) == str(refused) == KEY_FAILED
    assert KEY_ENV not in str(unset)
    assert len(fake_openai.requests) == 1


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("name", ["SECRET_KEY", "DATABASE_URL", "HOME", "NOT_SET_ANYWHERE"])
def test_api_key_env_outside_the_allow_list_is_refused_before_reading_it(
    fake_openai, make_config, monkeypatch, streaming, name
):
    """A bot row saved before the allow-list (or behind the service's back) never leaks: the
    call is refused with one message, whatever the variable holds and whether it exists."""
    monkeypatch.setenv("HOME", "/home/someone")
    error = _call(make_config(api_key_env=name), streaming)

    assert str(error) == (
        "openai/fake-model: this bot's api_key_env is not an allowed provider key variable"
    )
    assert fake_openai.requests == []


@pytest.mark.parametrize("streaming", [False, True])
def test_api_base_neither_approved_nor_listed_is_refused(
    fake_openai, make_config, settings, streaming
):
    settings.PROVIDER_API_BASES = []
    error = _call(make_config(api_base_trusted=False), streaming)

    assert str(error) == "openai/fake-model: this bot's api_base is not an allowed provider address"
    assert fake_openai.requests == []

    settings.PROVIDER_API_BASES = [fake_openai.url.removesuffix("/v1") + "/"]
    assert gateway.complete(make_config(api_base_trusted=False), MESSAGES).text == (
        "Hello from fake."
    )


def test_a_trusted_api_base_must_still_be_plain_http(fake_openai, make_config):
    host_port = fake_openai.url.split("//", 1)[1]
    for api_base in (f"ftp://{host_port}", f"http://user:pw@{host_port}", "file:///etc/passwd"):
        error = _call(make_config(api_base=api_base), streaming=False)
        assert str(error) == (
            "openai/fake-model: this bot's api_base is not an allowed provider address"
        )
    assert fake_openai.requests == []


def test_error_messages_and_logs_never_contain_the_key(fake_openai, config, caplog):
    fake_openai.default = Reply(status=401, error_message=f"Incorrect API key provided: {KEY}")

    with caplog.at_level("DEBUG"), pytest.raises(ModelCallFailed) as caught:
        gateway.complete(config, MESSAGES)

    assert "llm_call_failed" in caplog.text
    assert KEY not in caplog.text
    assert KEY not in str(caught.value)
    assert str(caught.value) == KEY_FAILED


def test_api_base_without_any_key_sends_a_placeholder(fake_openai, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    config = ModelConfig(model="openai/fake-model", api_base=fake_openai.url, api_base_trusted=True)

    assert gateway.complete(config, MESSAGES).text == "Hello from fake."
    assert fake_openai.headers[0]["authorization"] == "Bearer no-key-required"


def test_api_base_without_api_key_env_never_sends_the_servers_openai_key(fake_openai, monkeypatch):
    """Hardening II, defect 1: a call carries exactly the key its bot names. litellm (and the
    direct road before it) used to fill a missing key from the server's OPENAI_API_KEY."""
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-openai-variable")
    config = ModelConfig(model="openai/fake-model", api_base=fake_openai.url, api_base_trusted=True)

    gateway.complete(config, MESSAGES)

    assert fake_openai.headers[0]["authorization"] == "Bearer no-key-required"


def test_connection_refused_is_retried_then_model_unavailable(fake_openai, config):
    fake_openai.stop()  # nothing listens on the port any more

    with pytest.raises(ModelCallFailed) as caught:
        gateway.complete(config, MESSAGES)

    assert caught.value.transient is True
    assert caught.value.attempts == 3
    assert str(caught.value) == (
        "openai/fake-model: could not reach the provider (Connection error.), after 3 attempts"
    )


def test_unknown_provider_is_not_retried():
    with pytest.raises(ModelCallFailed) as caught:
        gateway.complete(ModelConfig(model="nosuchprovider/model-x", model_trusted=True), MESSAGES)

    assert caught.value.attempts == 1
    assert caught.value.transient is False
    assert str(caught.value).startswith("nosuchprovider/model-x: request rejected")


def test_a_provider_outside_the_user_list_is_refused_before_any_attempt_unless_staff_approved():
    with pytest.raises(ModelCallFailed) as caught:
        gateway.complete(ModelConfig(model="nosuchprovider/model-x"), MESSAGES)

    assert caught.value.attempts == 0
    assert str(caught.value) == (
        "nosuchprovider/model-x: this bot's model names a provider its owner may not use"
    )


def test_close_stops_the_stream_and_closes_the_http_response(fake_openai, config):
    fake_openai.script(
        Reply(text="x" * 40, chunks=["a", "b", "c", "d"] * 10, delay_between_chunks=0.1)
    )
    stream = gateway.stream(config, MESSAGES)
    received = []

    for delta in stream:
        received.append(delta)
        if len(received) == 2:
            stream.close()

    assert received == ["a", "b"]
    assert stream.completion is None
    assert stream.text == "ab"
    assert fake_openai.client_went_away.wait(5)
    assert fake_openai.served[0].aborted is True
    assert fake_openai.served[0].completed is False


def test_close_from_another_thread_ends_a_blocked_iteration(fake_openai, config):
    fake_openai.script(Reply(text="ab", chunks=["a", "b"], stall_after=1, stall=20))
    stream = gateway.stream(config, MESSAGES)
    received = []
    done = threading.Event()

    def consume():
        for delta in stream:
            received.append(delta)
        done.set()

    worker = threading.Thread(target=consume, daemon=True)
    worker.start()
    deadline = time.monotonic() + 5
    while not received and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)  # the consumer is now blocked reading the next chunk

    stream.close()

    assert done.wait(5)  # well before the 30 s read timeout
    assert received == ["a"]
    assert stream.completion is None
    assert fake_openai.client_went_away.wait(5)


def test_abandoned_stream_closes_its_response(fake_openai, config):
    fake_openai.script(Reply(text="abcd", chunks=list("abcd") * 10, delay_between_chunks=0.1))
    stream = gateway.stream(config, MESSAGES)

    for _delta in stream:
        break
    del stream
    gc.collect()

    assert fake_openai.client_went_away.wait(5)


def test_concurrent_streams_are_served_concurrently(fake_openai, config):
    fake_openai.default = Reply(text="abc", chunks=["a", "b", "c"], delay_between_chunks=0.2)
    results: list[str] = []
    lock = threading.Lock()

    def run():
        text = "".join(gateway.stream(config, MESSAGES))
        with lock:
            results.append(text)

    threads = [threading.Thread(target=run) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)

    assert results == ["abc", "abc", "abc"]
    assert fake_openai.max_concurrent == 3
    assert fake_openai.wait_idle()
    assert fake_openai.in_flight == 0


def test_model_max_input_tokens():
    assert gateway.model_max_input_tokens("gpt-4o-mini") == 128000
    assert gateway.model_max_input_tokens("openai/gpt-4o") == 128000
    assert gateway.model_max_input_tokens("builtin/recall") is None
    assert gateway.model_max_input_tokens("builtin/extractive") is None
    assert gateway.model_max_input_tokens("openai/fake-model") is None
    assert gateway.model_max_input_tokens("no-such-model-xyz") is None
    assert gateway.model_max_input_tokens("") is None


def test_a_model_litellm_does_not_know_is_looked_up_once(monkeypatch):
    """A bot without a context_window on a model litellm's map does not know asks for its window
    three times a turn: litellm is asked once per process (docs/performance.md "A turn's CPU,
    eighth pass"); a server that could not say is asked again."""
    from chat_platform.llm.gateway import model_info

    litellm = lazy_litellm.get()
    asked: list[str] = []
    real = litellm.get_model_info

    def get_model_info(model, **kwargs):
        asked.append(model)
        if model == "openai/down-server-model":
            raise ConnectionError("the server could not say")
        return real(model, **kwargs)

    monkeypatch.setattr(litellm, "get_model_info", get_model_info)
    monkeypatch.setattr(model_info, "_max_input_cache", {})
    for _ in range(3):
        assert gateway.model_max_input_tokens("openai/never-mapped-model") is None
        assert gateway.model_max_input_tokens("openai/gpt-4o") == 128000
        assert gateway.model_max_input_tokens("openai/down-server-model") is None
    assert asked == [
        "openai/never-mapped-model",
        "openai/gpt-4o",
        "openai/down-server-model",
        "openai/down-server-model",
        "openai/down-server-model",
    ]


def test_litellm_is_configured_offline_and_knows_builtin():
    litellm = lazy_litellm.get()

    assert litellm.suppress_debug_info is True
    assert getattr(litellm, "telemetry", False) is False
    assert [p["provider"] for p in litellm.custom_provider_map].count("builtin") == 1
    assert "builtin" in litellm._custom_providers


def test_importing_the_llm_package_does_not_import_litellm():
    script = (
        "import sys\n"
        "import chat_platform.llm.gateway, chat_platform.llm.builtin.provider\n"
        "import chat_platform.llm.builtin.recall, chat_platform.llm.builtin.extractive\n"
        "print('litellm' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
        check=False,
    )

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"


# --- a rate limit that says when to come back ---------------------------------------------------


def _retry_waits(caplog) -> list[float]:
    return [
        r.msg["wait_s"]
        for r in caplog.records
        if isinstance(r.msg, dict) and r.msg.get("event") == "llm_retry"
    ]


@pytest.mark.parametrize(
    ("call", "direct"), [("complete", False), ("stream", True), ("stream", False)]
)
def test_a_429_waits_as_long_as_its_retry_after_asks(
    fake_openai, config, settings, caplog, call, direct
):
    """The back-off is 0.01 s here; the provider asked for 1 s: the retry waited its back-off
    and came back too early, to be limited again."""
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = direct
    fake_openai.script(
        Reply(status=429, error_headers={"Retry-After": "1"}), Reply(text="ok", chunks=["ok"])
    )

    text = (
        gateway.complete(config, MESSAGES).text
        if call == "complete"
        else "".join(gateway.stream(config, MESSAGES))
    )

    assert text == "ok"
    assert len(fake_openai.requests) == 2
    assert _retry_waits(caplog) == [1.0]


def test_a_429_that_asks_for_longer_than_a_call_may_wait_is_not_retried(
    fake_openai, config, settings
):
    """An hour's Retry-After: the call fails at once, saying so, instead of holding the turn."""
    fake_openai.default = Reply(status=429, error_headers={"Retry-After": "3600"})

    with pytest.raises(ModelCallFailed) as failed:
        gateway.complete(config, MESSAGES)

    assert len(fake_openai.requests) == 1
    assert failed.value.status_code == 429
    assert "the provider asks to wait 3600 s" in str(failed.value)
