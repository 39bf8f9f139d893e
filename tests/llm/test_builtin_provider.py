"""The built-in models through the gateway, as every other model: its policy, caps, retries and
errors. The gateway calls them in-process (``gateway.builtin_road``), without litellm; litellm's
custom provider (``builtin.provider``) answers the same for whoever calls litellm itself."""

import socket

import pytest

from chat_platform.llm import gateway
from chat_platform.llm.builtin import generate
from chat_platform.llm.gateway import Completion, ModelCallFailed, ModelConfig, lazy_litellm
from tests.llm.test_builtin_extractive import PROMPT, SYSTEM
from tests.llm.test_builtin_recall import BOT, HISTORY, INDEX, RECALL_TOOL, SAVE, SEARCH, SUMMARY

RECALL = ModelConfig(model="builtin/recall")
EXTRACTIVE = ModelConfig(model="builtin/extractive", max_output_tokens=500)
BUDGET_QUESTION = [BOT, SUMMARY, *HISTORY, {"role": "user", "content": "How much is my budget?"}]
ALLERGY_QUESTION = [BOT, INDEX, {"role": "user", "content": "Do I have food allergies?"}]
EXTRACT = [SYSTEM, {"role": "user", "content": PROMPT}]


@pytest.fixture(scope="module", autouse=True)
def _litellm_imported():
    gateway.warm_up()


@pytest.fixture
def no_network(monkeypatch):
    def refuse(*args, **kwargs):
        raise OSError("network disabled in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


def test_recall_complete(no_network):
    completion = gateway.complete(RECALL, BUDGET_QUESTION)

    assert completion == Completion(
        text=(
            "From earlier in our conversation:\n> My budget is 4500 euros. — you said in message 7"
        ),
        finish_reason="stop",
        prompt_tokens=134,
        completion_tokens=22,
        model="builtin/recall",
        tool_calls=[],
    )


def test_recall_stream_deltas_are_words_that_join_to_the_complete_text(no_network):
    stream = gateway.stream(RECALL, BUDGET_QUESTION)
    deltas = list(stream)

    assert deltas == [
        "From ",
        "earlier ",
        "in ",
        "our ",
        "conversation:\n",
        "> ",
        "My ",
        "budget ",
        "is ",
        "4500 ",
        "euros. ",
        "— ",
        "you ",
        "said ",
        "in ",
        "message ",
        "7",
    ]
    assert stream.completion == gateway.complete(RECALL, BUDGET_QUESTION)
    assert "".join(deltas) == stream.completion.text


@pytest.mark.parametrize(
    ("config", "messages"),
    [
        (RECALL, BUDGET_QUESTION),
        (RECALL, [*BUDGET_QUESTION[:-1], {"role": "user", "content": "Lisbon gate hotel?"}]),
        (RECALL, [{"role": "user", "content": "nothing matches this"}]),
        (RECALL, [{"role": "user", "content": "My locker code is 4471."}]),
        (RECALL, ALLERGY_QUESTION),
        (EXTRACTIVE, EXTRACT),
        (ModelConfig(model="builtin/extractive", max_output_tokens=25), EXTRACT),
    ],
)
def test_streaming_and_non_streaming_agree(config, messages):
    stream = gateway.stream(config, messages)
    text = "".join(stream)
    completion = gateway.complete(config, messages)

    assert text == completion.text
    assert stream.completion == completion
    assert completion.prompt_tokens > 0
    assert completion.completion_tokens > 0
    assert completion.finish_reason == "stop"


def test_recall_tool_call_through_litellm(no_network):
    # the built-in model's own answer, which both roads must give unchanged
    expected_call = generate("builtin/recall", ALLERGY_QUESTION, tools=[RECALL_TOOL]).tool_calls[0]
    assert expected_call["function"] == {
        "name": "read_records",
        "arguments": '{"names": ["diet"]}',
    }

    completion = gateway.complete(RECALL, ALLERGY_QUESTION, tools=[RECALL_TOOL])
    stream = gateway.stream(RECALL, ALLERGY_QUESTION, tools=[RECALL_TOOL])
    deltas = list(stream)

    assert completion.tool_calls == [expected_call]
    assert completion.finish_reason == "tool_calls"
    assert completion.text == ""
    assert deltas == []
    assert stream.completion == completion


def test_recall_search_and_save_calls_through_litellm(no_network):
    searching = [BOT, INDEX, {"role": "user", "content": "What instrument does my sister play?"}]
    saving = [BOT, {"role": "user", "content": "Remember that my locker code is 4471"}]
    tools = [RECALL_TOOL, SEARCH, SAVE]

    search = gateway.complete(RECALL, searching, tools=tools)
    save = gateway.stream(RECALL, saving, tools=tools)
    deltas = list(save)

    assert search.finish_reason == "tool_calls"
    assert [c["function"] for c in search.tool_calls] == [
        {"name": "search_records", "arguments": '{"query": "instrument sister play"}'}
    ]
    assert deltas == []
    assert save.completion.finish_reason == "tool_calls"
    assert [c["function"]["name"] for c in save.completion.tool_calls] == ["save_record"]
    assert save.completion.prompt_tokens > 0 and save.completion.completion_tokens > 0


def test_recall_read_files_json_through_litellm():
    completion = gateway.complete(RECALL, ALLERGY_QUESTION)

    assert completion.text == '{"read_files": {"files": ["diet"]}}'
    assert completion.tool_calls == []


def test_output_budget_reaches_the_builtin_model():
    config = ModelConfig(model="builtin/recall", max_output_tokens=10)

    completion = gateway.complete(config, BUDGET_QUESTION)
    stream = gateway.stream(config, BUDGET_QUESTION)
    text = "".join(stream)

    assert completion.text == "From earlier in our conversation:\n> My budget is"
    assert completion.finish_reason == "length"
    assert completion.completion_tokens == 10
    assert text == completion.text
    assert stream.completion.finish_reason == "length"


def test_extractive_complete_max_tokens_argument_wins():
    completion = gateway.complete(EXTRACTIVE, EXTRACT, max_tokens=25)

    assert completion.text == (
        "user: We agreed on a budget of 12,000 EUR. I prefer vegetarian options for lunch."
    )
    assert completion.finish_reason == "stop"
    assert completion.completion_tokens == 21
    assert completion.prompt_tokens == 181


def test_unknown_builtin_model_is_model_unavailable_without_retry():
    with pytest.raises(ModelCallFailed) as caught:
        gateway.complete(ModelConfig(model="builtin/nope"), BUDGET_QUESTION)

    assert caught.value.attempts == 1
    assert caught.value.transient is False
    assert str(caught.value) == (
        "builtin/nope: model or endpoint not found (HTTP 404) (unknown built-in model "
        "builtin/nope (known: builtin/recall, builtin/extractive))"
    )


@pytest.mark.parametrize(
    ("config", "messages", "tools"),
    [
        (RECALL, BUDGET_QUESTION, None),
        (RECALL, ALLERGY_QUESTION, [RECALL_TOOL]),
        (ModelConfig(model="builtin/recall", max_output_tokens=10), BUDGET_QUESTION, None),
        (EXTRACTIVE, EXTRACT, None),
    ],
)
def test_the_gateway_calls_builtin_models_without_litellm_and_answers_as_litellm_does(
    config, messages, tools, monkeypatch
):
    litellm = lazy_litellm.get()
    asked = {"tools": tools, "max_tokens": config.max_output_tokens}
    kwargs = {"model": config.model, "messages": messages}
    kwargs |= {k: v for k, v in asked.items() if v is not None}
    answer = litellm.completion(**kwargs)
    chunks = list(litellm.completion(**kwargs, stream=True))
    streamed = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)

    monkeypatch.setattr(lazy_litellm, "get", lambda: pytest.fail("litellm reached"))
    completion = gateway.complete(config, messages, tools=tools)
    stream = gateway.stream(config, messages, tools=tools)
    text = "".join(stream)

    message = answer.choices[0].message
    calls = [c.model_dump() for c in message.tool_calls or []]
    assert (completion.text, completion.tool_calls) == (message.content or "", calls)
    assert completion.prompt_tokens == answer.usage.prompt_tokens
    assert text == streamed == completion.text
    assert stream.completion == completion


async def test_async_completion_and_streaming_through_litellm():
    litellm = lazy_litellm.get()
    expected = generate("recall", BUDGET_QUESTION)

    response = await litellm.acompletion(model="builtin/recall", messages=BUDGET_QUESTION)
    stream = await litellm.acompletion(
        model="builtin/recall",
        messages=BUDGET_QUESTION,
        stream=True,
        stream_options={"include_usage": True},
    )
    deltas = []
    usage = None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            deltas.append(chunk.choices[0].delta.content)
        usage = getattr(chunk, "usage", None) or usage

    assert response.choices[0].message.content == expected.text
    assert response.choices[0].finish_reason == "stop"
    assert response.usage.prompt_tokens == expected.prompt_tokens
    assert response.usage.completion_tokens == expected.completion_tokens
    assert "".join(deltas) == expected.text
    assert usage.completion_tokens == expected.completion_tokens


@pytest.mark.parametrize("streamed", [False, True])
def test_a_fixed_answer_keeps_to_max_tokens_and_stop(streamed):
    """The built-in recall model's fixed answers (nothing matched, "Noted.") ignored the call's
    ``max_tokens`` and ``stop``: 34 tokens for a cap of 3. They are held to both, as any
    provider's text is."""
    nothing = [{"role": "user", "content": "What is the capital of Peru?"}]

    def call(config: ModelConfig) -> tuple[str, str, int]:
        if streamed:
            stream = gateway.stream(config, nothing)
            text = "".join(stream)
            return text, stream.completion.finish_reason, stream.completion.completion_tokens
        done = gateway.complete(config, nothing)
        return done.text, done.finish_reason, done.completion_tokens

    capped = call(ModelConfig(model="builtin/recall", max_output_tokens=3))
    assert capped == ("I am the", "length", 3)
    stopped = call(ModelConfig(model="builtin/recall", stop=(", not",)))
    assert stopped == ("I am the built-in recall model", "stop", 7)
