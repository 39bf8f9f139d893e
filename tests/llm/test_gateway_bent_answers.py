"""A provider that bends the answer's format (usage counts that are negative, huge or words;
content as a list of parts or a number; a tool call's arguments as an object) gets a reply
read as well as it can be, never a crash: each failed the turn as an internal error, or as
"the database is unreachable" (a negative count broke a check constraint), after its text had
reached the user. The gateway reads a streamed answer itself on the direct road; litellm reads
the rest, and refuses some of these shapes itself: a clean ``ModelCallFailed`` (the reply's
``model_unavailable``), which these tests pin too."""

# The gateway tests' fixtures (both roads, the retry settings, the config), used by name.
# ruff: noqa: F811

import json

import pytest

from chat_platform.llm import gateway
from chat_platform.llm.gateway import ModelCallFailed
from tests.fakeopenai import Reply
from tests.llm.test_gateway import (  # noqa: F401
    MESSAGES,
    _litellm_imported,
    _retry_settings,
    config,
    road,
)

USAGE_BENT = [
    {"prompt_tokens": -50, "completion_tokens": -7},
    {"prompt_tokens": 10**30, "completion_tokens": 10**30},
    {"prompt_tokens": "many", "completion_tokens": "few"},
    {"prompt_tokens": 1.5, "completion_tokens": None},
]


def _litellm_reads(road, streaming):
    return road == "litellm" or not streaming  # an unstreamed call goes through litellm


def _call(config, streaming, **kwargs):
    if streaming:
        stream = gateway.stream(config, MESSAGES, **kwargs)
        text = "".join(stream)
        return text, stream.completion
    completion = gateway.complete(config, MESSAGES, **kwargs)
    return completion.text, completion


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("usage", USAGE_BENT)
def test_counts_that_are_no_counts_are_estimated(fake_openai, config, road, streaming, usage):
    fake_openai.script(*[Reply(text="Hello there.", usage=usage)] * 3)
    if _litellm_reads(road, streaming) and usage in USAGE_BENT[2:]:
        with pytest.raises(ModelCallFailed):  # litellm's own check of the usage's types
            _call(config, streaming)
        return
    text, completion = _call(config, streaming)
    assert text == "Hello there."
    # Counted here as if the provider had said nothing: whole, non-negative, storable.
    assert 0 < completion.prompt_tokens < 100
    assert 0 < completion.completion_tokens < 100


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("content", "text"),
    [
        ([{"type": "text", "text": "Hello "}, {"type": "text", "text": "there."}], "Hello there."),
        (12345, "12345"),
    ],
)
def test_content_that_is_not_text_is_read_as_text(
    fake_openai, config, road, streaming, content, text
):
    fake_openai.script(*[Reply(raw_deltas=[{"content": content}])] * 3)
    if road == "litellm" and streaming:
        # litellm's stream drops content that is not a string: an empty answer, said as one.
        assert _call(config, streaming)[1].text == ""
        return
    if not streaming:
        with pytest.raises(ModelCallFailed):  # litellm refuses content that is not a string
            _call(config, streaming)
        return
    shown, completion = _call(config, streaming)
    assert (shown, completion.text) == (text, text)


@pytest.mark.parametrize("streaming", [False, True])
def test_arguments_sent_as_an_object_are_its_json(fake_openai, config, streaming):
    call = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": {"a": 1}}}
    delta = {"tool_calls": [{"index": 0, **call}]}
    fake_openai.script(
        Reply(text="", tool_calls=[call], raw_deltas=[delta], finish_reason="tool_calls")
    )
    _text, completion = _call(config, streaming)
    [made] = completion.tool_calls
    assert made["function"]["name"] == "f"
    assert json.loads(made["function"]["arguments"]) == {"a": 1}


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize("reason", [7, "x" * 40])
def test_a_finish_reason_that_cannot_be_stored_is_stop(fake_openai, config, streaming, reason):
    fake_openai.script(Reply(text="Hi.", finish_reason=reason))
    _text, completion = _call(config, streaming)
    assert completion.finish_reason == "stop"
