"""A bot's MCP tools on /v1/chat/completions (issue 34, item 6; docs/tools.md): they run
server-side, beside a client's own tools, which still end the loop and come back to the client
as ``tool_calls``. The real ``openai`` SDK against uvicorn + a Celery worker; the bot's model is
the local fake provider, its tools the real test MCP server (``tests/mcpserver.py``)."""

import json

import openai
import pytest

from bots.models import ChatSession, Message
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply
from tests.openai_api.conftest import new_key, sdk
from tests.openai_api.test_client_tools import CALL as WEATHER_CALL
from tests.openai_api.test_client_tools import WEATHER
from tools.services import tool_server_create, tool_server_tools_refresh

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]

ADD_CALL = {
    "id": "call_a1",
    "type": "function",
    "function": {"name": "calc__add", "arguments": json.dumps({"a": 2, "b": 40})},
}
QUESTION = {"role": "user", "content": "Add 2 and 40, then tell me the weather in Paris."}


@pytest.fixture
def user(db):
    return UserFactory(username="servertools")


@pytest.fixture
def tool_bot(user, staff, fake_openai, mcp_server):
    server = tool_server_create(user=staff, name="calc", url=mcp_server.url, public=True)
    tool_server_tools_refresh(user=staff, server_id=server.pk)
    return BotFactory(
        owner=user,
        name="Agent",
        system_prompt="You are Agent.",
        model="openai/fake-model",
        api_base=fake_openai.url,
        tools=["calc/add"],
    )


# The model's context once the client answered its call: the bot's round, then the client's.
BOTH_ROUNDS = [
    {"role": "assistant", "content": "", "tool_calls": [ADD_CALL]},
    {"role": "tool", "content": "42", "tool_call_id": "call_a1"},
    {"role": "assistant", "content": "", "tool_calls": [WEATHER_CALL]},
    {"role": "tool", "content": "sunny, 24 C", "tool_call_id": "call_w1"},
]


def _weather_answered(client):
    """The client's next call: its own tool's call answered."""
    return client.chat.completions.with_raw_response.create(
        model="agent",
        messages=[
            QUESTION,
            {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
            {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 24 C"},
        ],
        tools=[WEATHER],
    )


@pytest.mark.parametrize("stream", [False, True])
def test_server_tools_run_on_v1_and_client_tools_still_end_the_loop(
    stack, user, tool_bot, fake_openai, mcp_server, stream
):
    _, key = new_key(user)
    fake_openai.script(
        Reply(text="", tool_calls=[ADD_CALL]),  # the bot's tool: run by the platform
        Reply(text="", tool_calls=[WEATHER_CALL]),  # the client's: back to the client
        Reply(text="42, and it is sunny in Paris."),
    )
    client = sdk(stack, key)
    if stream:
        events = list(
            client.chat.completions.create(
                model="agent", messages=[QUESTION], tools=[WEATHER], stream=True
            )
        )
        choices = [e.choices[0] for e in events if e.choices]
        streamed = [d.tool_calls[0] for d in (c.delta for c in choices) if d.tool_calls]
        assert [(c.id, c.function.name) for c in streamed if c.id] == [("call_w1", "get_weather")]
        assert choices[-1].finish_reason == "tool_calls"
    else:
        choice = client.chat.completions.create(
            model="agent", messages=[QUESTION], tools=[WEATHER]
        ).choices[0]
        assert choice.finish_reason == "tool_calls"
        assert [c.model_dump() for c in choice.message.tool_calls] == [WEATHER_CALL]

    # The bot's tool ran on the server, once, and the model got its result.
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]
    first, second = fake_openai.requests[:2]
    offered = [t["function"]["name"] for t in first["tools"]]
    assert "calc__add" in offered and offered[-1] == "get_weather"
    assert second["messages"][-2:] == [
        {"role": "assistant", "content": "", "tool_calls": [ADD_CALL]},
        {"role": "tool", "content": "42", "tool_call_id": "call_a1"},
    ]
    session = ChatSession.objects.get(user=user)
    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("role", "kind", "tool_call_id", "tool_ok", "status")
    )
    assert rows == [
        ("user", "chat", "", None, "complete"),
        ("assistant", "tool", "", None, "complete"),
        ("tool", "tool", "call_a1", True, "complete"),
        ("assistant", "chat", "", None, "complete"),
    ]
    reply = Message.objects.get(session=session, role="assistant", kind="chat")
    assert (reply.finish_reason, [c["id"] for c in reply.tool_calls]) == ("tool_calls", ["call_w1"])

    # The client answers its own call: the same session goes on to the answer.
    raw = _weather_answered(client)
    assert raw.headers["x-session-id"] == str(session.pk)
    answer = raw.parse().choices[0]
    assert (answer.message.content, answer.finish_reason) == (
        "42, and it is sunny in Paris.",
        "stop",
    )
    # The model sees the server's round, then the client's call and its result.
    assert fake_openai.requests[2]["messages"][-4:] == BOTH_ROUNDS
    # Nothing ran twice, nothing was stored twice.
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]
    assert ChatSession.objects.filter(user=user).count() == 1
    assert len(fake_openai.requests) == 3


SAID_FIRST = "Let me add those. "
ANSWER = "It is 42."
FIRST = {"role": "user", "content": "Add 2 and 40."}
# The model's context for the client's "Thanks": the tool round as it happened, once, then the
# answer and the thanks.
THANKS_CONTEXT = [
    {"role": "assistant", "content": SAID_FIRST, "tool_calls": [ADD_CALL]},
    {"role": "tool", "content": "42", "tool_call_id": "call_a1"},
    {"role": "assistant", "content": ANSWER},
    {"role": "user", "content": "Thanks"},
]


def _streamed(client) -> str:
    events = client.chat.completions.create(model="agent", messages=[FIRST], stream=True)
    return "".join(e.choices[0].delta.content or "" for e in events if e.choices)


def _thanks_stays_in(client, user, got: str) -> None:
    """The client's next call, its history holding ``got`` as the assistant's turn, continues
    the user's one chat."""
    session = ChatSession.objects.get(user=user)
    raw = client.chat.completions.with_raw_response.create(
        model="agent",
        messages=[
            FIRST,
            {"role": "assistant", "content": got},
            {"role": "user", "content": "Thanks"},
        ],
    )
    assert raw.parse().choices[0].message.content == "You are welcome."
    assert raw.headers["x-session-id"] == str(session.pk)
    assert ChatSession.objects.filter(user=user).count() == 1


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_that_resends_what_it_got_stays_in_its_chat(
    stack, user, tool_bot, fake_openai, mcp_server, stream
):
    """A call with the bot's own tools streams each model call's text, what the model said before
    its tool call included (docs/openai-api.md); unstreamed, the answer is the last call's text.
    A client resends what it got as the assistant turn of its history: either way, its next call
    continues the same chat, with the same tool round in the model's context."""
    _, key = new_key(user)
    fake_openai.script(
        Reply(text=SAID_FIRST, tool_calls=[ADD_CALL]),
        Reply(text=ANSWER),
        Reply(text="You are welcome."),
    )
    client = sdk(stack, key)
    if stream:
        got = _streamed(client)
        assert got == SAID_FIRST + ANSWER
    else:
        got = client.chat.completions.create(model="agent", messages=[FIRST])
        got = got.choices[0].message.content
        assert got == ANSWER

    _thanks_stays_in(client, user, got)

    assert fake_openai.requests[2]["messages"][-4:] == THANKS_CONTEXT
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]


def test_a_retried_streamed_call_is_linked_by_what_its_own_run_streamed(
    stack, user, tool_bot, fake_openai, mcp_server
):
    """A streamed first call whose reply failed after a tool round, sent again: it continues in
    its chat (not a new one), the reply runs again with that round in its context and streams
    only its own text. The client resends that text, and its next call stays in the chat (the
    failed run's round was never part of the stream that answered)."""
    _, key = new_key(user)
    fake_openai.script(
        Reply(text=SAID_FIRST, tool_calls=[ADD_CALL]),
        Reply(status=400, error_message="bad request"),
        Reply(text=ANSWER),
        Reply(text="You are welcome."),
    )
    client = sdk(stack, key)
    with pytest.raises(openai.APIError):
        _streamed(client)
    got = _streamed(client)
    assert got == ANSWER

    _thanks_stays_in(client, user, got)

    assert fake_openai.requests[3]["messages"][-4:] == THANKS_CONTEXT
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]


def test_an_answer_calling_the_bots_and_the_clients_tools_runs_the_bots_first(
    stack, user, tool_bot, fake_openai, mcp_server
):
    """One answer calls both: the bot's tool runs on the server as a round of its own (it was
    dropped, never run nor told), then the client's call ends the turn and comes back to it."""
    _, key = new_key(user)
    fake_openai.script(
        Reply(text="", tool_calls=[ADD_CALL, WEATHER_CALL]),
        Reply(text="42, and it is sunny in Paris."),
    )
    client = sdk(stack, key)
    choice = client.chat.completions.create(
        model="agent", messages=[QUESTION], tools=[WEATHER]
    ).choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [c.model_dump() for c in choice.message.tool_calls] == [WEATHER_CALL]
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]
    session = ChatSession.objects.get(user=user)
    rows = list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("role", "kind", "tool_call_id", "tool_ok", "content")
    )
    assert rows == [
        ("user", "chat", "", None, QUESTION["content"]),
        ("assistant", "tool", "", None, ""),
        ("tool", "tool", "call_a1", True, "42"),
        ("assistant", "chat", "", None, ""),
    ]

    raw = _weather_answered(client)
    assert raw.headers["x-session-id"] == str(session.pk)
    assert raw.parse().choices[0].message.content == "42, and it is sunny in Paris."
    assert fake_openai.requests[1]["messages"][-4:] == BOTH_ROUNDS
    assert mcp_server.calls == [("add", {"a": 2, "b": 40})]
    assert len(fake_openai.requests) == 2
