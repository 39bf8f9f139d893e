"""The test fake itself: it must behave like an OpenAI-compatible server for the gateway tests to
mean anything."""

import json
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.fakeopenai import Reply

REPO = Path(__file__).resolve().parents[2]


def post(url, body, headers=None):
    request = urllib.request.Request(
        url + "/chat/completions",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return response.status, response.read().decode()


def test_models_endpoint(fake_openai):
    with urllib.request.urlopen(fake_openai.url + "/models", timeout=5) as response:
        data = json.loads(response.read())

    assert data == {
        "object": "list",
        "data": [{"id": "fake-model", "object": "model", "created": 0, "owned_by": "fake"}],
    }


def test_non_streaming_reply_and_recording(fake_openai):
    fake_openai.script(Reply(text="One.", finish_reason="length"))
    body = {"model": "fake-model", "messages": [{"role": "user", "content": "12345678"}]}

    status, raw = post(fake_openai.url, body, {"Authorization": "Bearer k"})
    data = json.loads(raw)

    assert status == 200
    assert data["object"] == "chat.completion"
    assert data["choices"] == [
        {"index": 0, "message": {"role": "assistant", "content": "One."}, "finish_reason": "length"}
    ]
    assert data["usage"] == {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}
    assert fake_openai.requests == [body]
    assert fake_openai.headers[0]["authorization"] == "Bearer k"
    # Once the script is used up the default reply answers.
    assert json.loads(post(fake_openai.url, body)[1])["choices"][0]["message"]["content"] == (
        "Hello from fake."
    )


def test_streaming_reply_is_server_sent_events(fake_openai):
    fake_openai.script(Reply(text="Hi there", chunks=["Hi", " there"]))
    body = {
        "model": "fake-model",
        "messages": [],
        "stream": True,
        "stream_options": {"include_usage": True},
    }

    status, raw = post(fake_openai.url, body)
    events = [line.removeprefix("data: ") for line in raw.split("\n\n") if line]

    assert status == 200
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [c["choices"][0]["delta"] for c in chunks[:-1]] == [
        {"role": "assistant", "content": ""},
        {"content": "Hi"},
        {"content": " there"},
        {},
    ]
    assert chunks[-2]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3}


def test_error_status_has_an_openai_error_body(fake_openai):
    fake_openai.script(Reply(status=503, error_message="overloaded"))

    with pytest.raises(urllib.error.HTTPError) as caught:
        post(fake_openai.url, {"model": "fake-model", "messages": []})

    assert caught.value.code == 503
    assert json.loads(caught.value.read()) == {
        "error": {"message": "overloaded", "type": "server_error", "param": None, "code": "503"}
    }


@pytest.mark.crossprocess
def test_standalone_process_serves_a_fixed_reply():
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.fakeopenai", "--port", "0", "--text", "From afar."],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        line = process.stdout.readline().strip()
        assert line.startswith("FAKEOPENAI_URL=http://127.0.0.1:")
        url = line.removeprefix("FAKEOPENAI_URL=")

        status, raw = post(url, {"model": "fake-model", "messages": []})

        assert status == 200
        assert json.loads(raw)["choices"][0]["message"]["content"] == "From afar."
    finally:
        process.terminate()
        process.wait(10)


def test_served_reports_the_providers_own_time_per_request(fake_openai):
    """bench/turn_overhead.py subtracts this from a turn's time (issue 17, item 8)."""
    fake_openai.script(
        Reply(text="a", status=500),
        Reply(text="one two", chunks=["one ", "two"], delay_between_chunks=0.1),
    )
    with pytest.raises(urllib.error.HTTPError):
        post(fake_openai.url, {"messages": [{"role": "user", "content": "first"}]})
    post(fake_openai.url, {"stream": True, "messages": [{"role": "user", "content": "second"}]})

    def served(since):
        with urllib.request.urlopen(f"{fake_openai.url}/served?since={since}", timeout=5) as r:
            return json.loads(r.read())

    every = served(0)
    assert every["count"] == 2
    assert [(row["last"], row["completed"]) for row in every["served"]] == [
        ("first", True),
        ("second", True),
    ]
    # role chunk, two deltas, the finish chunk and [DONE]: four pauses of 0.1 s between them,
    # so the time served covers at least those (no upper bound: a test asserts no timing)
    assert every["served"][1]["seconds"] >= 0.4
    assert every["served"][0]["seconds"] < 0.2
    assert served(1)["served"] == every["served"][1:]
    assert served(2) == {"served": [], "count": 2}
    # the caller's address: bench/multihost.py tells its worker hosts apart by it
    assert [row["client"] for row in every["served"]] == ["127.0.0.1", "127.0.0.1"]
