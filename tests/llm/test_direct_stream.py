"""The direct road for streamed calls to OpenAI-compatible servers (``openai_compat``): which calls
take it, that litellm is not involved, and how the server-sent events are read.

The shared behaviour (answers, errors, retries, stops) is proven on both roads by
``test_gateway.py``; here are the parts only the direct road has."""

import dataclasses
import itertools
import json
import threading

import httpx
import pytest

from chat_platform.llm import gateway, openai_compat
from chat_platform.llm.gateway import ModelCallFailed, ModelConfig, lazy_litellm
from tests.fakeopenai import Reply

API_BASE = "http://llm.internal:8000/v1"
MESSAGES = [{"role": "user", "content": "Say hello."}]


@pytest.fixture(autouse=True)
def _settings(settings):
    settings.LLM_DIRECT_OPENAI_COMPATIBLE = True
    settings.LLM_MAX_RETRIES = 1
    settings.LLM_RETRY_BACKOFF_SECONDS = 0.01
    settings.PROVIDER_API_BASES = ["http://llm.internal:8000/"]


@pytest.mark.parametrize(
    ("model", "api_base", "enabled", "expected"),
    [
        ("openai/qwen2.5", "http://llm.internal:8000/v1", True, True),
        ("openai/llama3", "http://127.0.0.1:11434/v1", True, True),
        ("openai/qwen2.5", "http://llm.internal:8000/v1", False, False),  # switched off
        ("openai/gpt-4o", "", True, False),  # OpenAI itself: litellm maps its parameters
        ("openai/o3-mini", "https://api.openai.com/v1", True, False),
        ("openai/o3-mini", "https://API.OpenAI.com/v1", True, False),
        ("anthropic/claude-sonnet-4", "http://llm.internal:8000/v1", True, False),
        ("builtin/echo", "", True, False),
    ],
)
def test_which_calls_take_the_direct_road(model, api_base, enabled, expected):
    assert openai_compat.is_direct(model, api_base, enabled=enabled) is expected


def test_a_direct_stream_never_touches_litellm(fake_openai, monkeypatch):
    def no_litellm():
        raise AssertionError("litellm was used")

    monkeypatch.setattr(lazy_litellm, "get", no_litellm)
    fake_openai.script(
        Reply(text="Hello there, friend.", usage={"prompt_tokens": 9, "completion_tokens": 5})
    )
    config = ModelConfig(model="openai/fake-model", api_base=fake_openai.url, api_base_trusted=True)

    stream = gateway.stream(config, MESSAGES)
    assert "".join(stream) == "Hello there, friend."
    completion = stream.completion
    assert (completion.text, completion.finish_reason) == ("Hello there, friend.", "stop")
    assert (completion.prompt_tokens, completion.completion_tokens) == (9, 5)
    [request] = fake_openai.requests
    # the provider's model name, without litellm's provider prefix
    assert request["model"] == "fake-model"
    assert request["stream"] is True and request["stream_options"] == {"include_usage": True}


def _sse(*events: str) -> bytes:
    return "".join(events).encode()


def _chunk(content: str | None = None, finish: str | None = None) -> dict:
    delta = {"content": content} if content is not None else {}
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}


@pytest.fixture
def provider(monkeypatch):
    """A mock transport behind the direct road's client: ``provider.answer(status, body)``."""

    class Provider:
        def __init__(self) -> None:
            self.answers: list[tuple[int, bytes | list[bytes], dict]] = []
            self.requests: list[httpx.Request] = []

        def answer(
            self, status: int, body: bytes | list[bytes], headers: dict | None = None
        ) -> None:
            """``body`` as a list: sent as those network chunks, one after another."""
            self.answers.append((status, body, headers or {}))

        def handle(self, request: httpx.Request) -> httpx.Response:
            self.requests.append(request)
            status, body, headers = self.answers.pop(0)
            content = iter(body) if isinstance(body, list) else body
            return httpx.Response(status, content=content, headers=headers)

    mock = Provider()
    client = httpx.Client(transport=httpx.MockTransport(mock.handle))
    monkeypatch.setattr(openai_compat, "_client", client)
    monkeypatch.setattr(openai_compat, "_client_pid", __import__("os").getpid())
    return mock


USAGE = {"prompt_tokens": 4, "completion_tokens": 3}
CONFIG = ModelConfig(model="openai/qwen2.5", api_base=API_BASE, max_output_tokens=64)


def test_events_are_read_per_the_sse_rules(provider, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    provider.answer(
        200,
        _sse(
            ": keep-alive comment\n\n",
            f"data: {json.dumps(_chunk('Hel'))}\n\n",
            # one event's data split over two data lines (joined with a newline: valid JSON)
            'data: {"choices": [{"index": 0,\n'
            'data: "delta": {"content": "lo"}, "finish_reason": null}]}\n\n',
            "event: message\n",
            f"data:{json.dumps(_chunk(' you', 'stop'))}\n\n",  # no space after the colon
            f"data: {json.dumps({'choices': [], 'usage': USAGE})}\n\n",
            "data: [DONE]\n\n",
        ),
    )
    stream = gateway.stream(CONFIG, MESSAGES)
    assert list(stream) == ["Hel", "lo", " you"]
    assert (stream.completion.finish_reason, stream.completion.prompt_tokens) == ("stop", 4)
    assert stream.completion.completion_tokens == 3
    [request] = provider.requests
    assert str(request.url) == "http://llm.internal:8000/v1/chat/completions"
    # no key anywhere: the placeholder local servers accept
    assert request.headers["authorization"] == "Bearer no-key-required"
    body = json.loads(request.content)
    assert (body["model"], body["max_tokens"], body["messages"]) == ("qwen2.5", 64, MESSAGES)


def test_events_split_across_network_chunks_read_as_whole_events(provider):
    """httpx-sse's decoder over httpx's lines: a chunk boundary inside "data:", inside the JSON,
    between an event's two newlines or inside a CRLF changes nothing; a comment, an event with
    several data lines, no Content-Type header and a last event without its blank line are read
    as before."""
    body = _sse(
        ": ping\r\n\r\n",
        f"data: {json.dumps(_chunk('Hel'))}\r\n\r\n",
        'data: {"choices": [{"index": 0,\n',
        'data: "delta": {"content": "lo"}, "finish_reason": null}]}\n\n',
        f"id: 7\ndata: {json.dumps(_chunk(' you', 'stop'))}\n\n",
        f"data: {json.dumps({'choices': [], 'usage': USAGE})}\n\n",
        "data: [DONE]",  # the server closed without the blank line
    )
    cuts = [3, 9, body.index(b"\r\n\r\n") + 1, body.index(b'{"index": 0') + 4]
    cuts += [body.index(b"}]}\n\n") + 4, body.index(b"id: 7") + 2, len(body) - 3]
    edges = [0, *sorted(cuts), len(body)]
    pieces = [body[a:b] for a, b in itertools.pairwise(edges)]
    assert b"".join(pieces) == body and len(pieces) == 8
    provider.answer(200, pieces)  # no headers: no Content-Type either
    stream = gateway.stream(CONFIG, MESSAGES)

    assert list(stream) == ["Hel", "lo", " you"]
    assert (stream.completion.finish_reason, stream.completion.prompt_tokens) == ("stop", 4)


def test_a_last_event_without_its_blank_line_is_still_read(provider):
    provider.answer(200, _sse(f"data: {json.dumps(_chunk('All of it.', 'stop'))}"))

    stream = gateway.stream(CONFIG, MESSAGES)

    assert list(stream) == ["All of it."]
    assert stream.completion.finish_reason == "stop"


def test_an_error_event_mid_stream_fails_with_the_providers_words(provider):
    provider.answer(
        200,
        _sse(
            f"data: {json.dumps(_chunk('Partial'))}\n\n",
            'data: {"error": {"message": "worker crashed", "code": 503}}\n\n',
        ),
    )
    stream = gateway.stream(CONFIG, MESSAGES)
    seen = []
    with pytest.raises(ModelCallFailed) as caught:
        for delta in stream:
            seen.append(delta)
    assert seen == ["Partial"]  # text already sent is never retried
    assert str(caught.value) == "openai/qwen2.5: provider error (HTTP 503) (worker crashed)"
    assert (caught.value.status_code, caught.value.attempts) == (503, 1)


def test_an_event_that_is_not_json_fails_clearly(provider):
    provider.answer(200, _sse("data: <html>oops</html>\n\n"))
    with pytest.raises(ModelCallFailed) as caught:
        list(gateway.stream(CONFIG, MESSAGES))
    assert str(caught.value) == (
        "openai/qwen2.5: the provider's answer could not be read "
        "(the provider sent an event that is not JSON)"
    )
    assert caught.value.transient is False


@pytest.mark.parametrize(
    ("status", "body", "expected", "attempts"),
    [
        (
            400,
            {"error": {"message": "This model's maximum context length is 4096 tokens"}},
            "the request is longer than the model's context window "
            "(This model's maximum context length is 4096 tokens)",
            1,
        ),
        (
            400,
            {"error": {"message": "bad temperature"}},
            "request rejected (HTTP 400) (bad temperature)",
            1,
        ),
        (
            404,
            {"error": "no such model"},
            "model or endpoint not found (HTTP 404) (no such model)",
            1,
        ),
        (503, {"detail": "overloaded"}, 'provider error (HTTP 503) ({"detail": "overloaded"})', 2),
    ],
)
def test_error_statuses_name_the_reason_and_the_providers_message(
    provider, status, body, expected, attempts
):
    for _ in range(attempts):
        provider.answer(status, json.dumps(body).encode(), {"content-type": "application/json"})
    with pytest.raises(ModelCallFailed) as caught:
        list(gateway.stream(CONFIG, MESSAGES))
    suffix = f", after {attempts} attempts" if attempts > 1 else ""
    assert str(caught.value) == f"openai/qwen2.5: {expected}{suffix}"
    assert len(provider.requests) == attempts


def test_a_refused_key_never_reaches_the_message(provider, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-secret-value-1234")
    provider.answer(
        401, b'{"error": {"message": "Incorrect API key provided: sk-secret-value-1234"}}'
    )
    config = dataclasses.replace(CONFIG, api_key_env="OPENAI_API_KEY")
    with pytest.raises(ModelCallFailed) as caught:
        list(gateway.stream(config, MESSAGES))
    assert str(caught.value) == (
        "openai/qwen2.5: authentication failed: the provider key is missing or was refused"
    )
    assert provider.requests[0].headers["authorization"] == "Bearer sk-secret-value-1234"


def test_an_endless_error_body_is_read_only_for_its_message(monkeypatch):
    """A server answering an error with a body that never ends (or a huge one) costs at most
    ``ERROR_BODY_MAX_BYTES`` of it: the message comes from its start."""
    pulled = [0]

    def endless():
        yield b"upstream exploded: " + b"x" * 1000 + b"\n"
        while True:
            if pulled[0] > 10 * 1024 * 1024:
                raise AssertionError("the error body was read past its cap")
            pulled[0] += 1024
            yield b"y" * 1024

    client = httpx.Client(
        transport=httpx.MockTransport(lambda request: httpx.Response(400, content=endless()))
    )
    monkeypatch.setattr(openai_compat, "_client", client)
    monkeypatch.setattr(openai_compat, "_client_pid", __import__("os").getpid())

    with pytest.raises(ModelCallFailed) as caught:
        list(gateway.stream(CONFIG, MESSAGES))

    # the body's first line, cut to 160 characters as every provider message is
    assert str(caught.value) == (
        "openai/qwen2.5: request rejected (HTTP 400) (upstream exploded: " + "x" * 138 + "...)"
    )
    assert pulled[0] <= openai_compat.ERROR_BODY_MAX_BYTES


def test_a_redirect_is_not_followed(provider):
    """The provider policy approved this address, not wherever it points to."""
    provider.answer(307, b"", {"location": "http://169.254.169.254/latest/meta-data"})
    with pytest.raises(ModelCallFailed) as caught:
        list(gateway.stream(CONFIG, MESSAGES))
    # The refusal reaches the user: it never names where the redirect pointed.
    assert str(caught.value) == (
        "openai/qwen2.5: the provider answered with a redirect (HTTP 307) "
        "(redirected, not followed)"
    )
    assert [str(r.url) for r in provider.requests] == [f"{API_BASE}/chat/completions"]


def test_a_stop_that_lands_as_the_stream_ends_leaves_no_completion(monkeypatch):
    """close() (the user's stop, from the turn's watcher thread) shuts the socket; over HTTP/1.0
    without a length that can read as the body's normal end, with chunks still buffered. A
    stopped stream must end stopped, never as a completed answer (seen once in CI)."""

    holder: dict = {}

    class BodyEndsNormallyAfterClose:
        response = None

        def __iter__(self):
            yield _chunk("word0 ")
            # The stop arrives from another thread while this thread is reading the body.
            stopper = threading.Thread(target=holder["stream"].close)
            stopper.start()
            stopper.join()
            yield _chunk("word1 ", "stop")  # already buffered when the stop landed

        def close(self):
            pass

    monkeypatch.setattr(openai_compat, "open_stream", lambda kwargs: BodyEndsNormallyAfterClose())
    stream = holder["stream"] = gateway.stream(CONFIG, MESSAGES)
    assert list(stream) == ["word0 ", "word1 "]
    assert stream.closed
    assert stream.completion is None


def test_a_stream_cut_before_the_answer_ended_fails_and_keeps_its_text(provider):
    """No finish_reason and no [DONE]: the provider went away mid-answer."""
    provider.answer(200, _sse(f"data: {json.dumps(_chunk('Half an '))}\n\n"))
    stream = gateway.stream(CONFIG, MESSAGES)
    seen = []
    with pytest.raises(ModelCallFailed) as caught:
        for delta in stream:
            seen.append(delta)
    assert seen == ["Half an "]
    assert str(caught.value) == (
        "openai/qwen2.5: the provider's answer could not be read "
        "(the provider's stream ended before the answer did)"
    )
