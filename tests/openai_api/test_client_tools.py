"""Client tools on /v1/chat/completions (issue 20, item 4), with the real ``openai`` SDK against
uvicorn + a Celery worker; the bot's model is the local fake provider scripted to call them."""

import json

import httpx
import pytest

from bots.models import ChatSession, Message
from openai_api.models import ApiTurn
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply
from tests.openai_api.conftest import new_key, sdk, tiny_bot

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
ARGS = '{"city": "Paris"}'
CALL = {"id": "call_w1", "type": "function", "function": {"name": "get_weather", "arguments": ARGS}}
QUESTION = {"role": "user", "content": "What is the weather in Paris?"}
CALLED = {"role": "assistant", "content": None, "tool_calls": [CALL]}
RESULT = {"role": "tool", "tool_call_id": "call_w1", "content": "sunny, 24 C"}


@pytest.fixture
def user(db):
    return UserFactory(username="tooluser")


@pytest.fixture
def fake_bot(user, fake_openai):
    return BotFactory(
        owner=user,
        name="Writer",
        system_prompt="You are Writer.",
        model="openai/fake-model",
        api_base=fake_openai.url,
    )


def _recall(name: str, arguments: dict, call_id: str = "call_r1") -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _rows(session: ChatSession) -> list[tuple]:
    return [
        (m.role, m.kind, m.content, [c["id"] for c in m.tool_calls], m.tool_call_id, m.status)
        for m in Message.objects.filter(session=session).order_by("seq")
    ]


@pytest.mark.parametrize("stream", [False, True])
def test_a_client_tool_call_round_trips_through_one_session(
    stack, user, fake_bot, fake_openai, stream
):
    _, key = new_key(user)
    fake_openai.script(
        Reply(text="", tool_calls=[CALL]),
        Reply(text="It is sunny in Paris."),
        Reply(text="You are welcome."),
    )
    client = sdk(stack, key)
    if stream:
        events = list(
            client.chat.completions.create(
                model="writer", messages=[QUESTION], tools=[WEATHER], stream=True
            )
        )
        choices = [e.choices[0] for e in events if e.choices]
        assert choices[0].delta.role == "assistant"
        streamed = [d.tool_calls[0] for d in (c.delta for c in choices) if d.tool_calls]
        assert [
            (c.index, c.id, c.type, c.function.name, c.function.arguments) for c in streamed
        ] == [(0, "call_w1", "function", "get_weather", ""), (0, None, None, None, ARGS)]
        assert [c.finish_reason for c in choices][-1] == "tool_calls"
        assert "".join(c.delta.content or "" for c in choices) == ""
    else:
        first = client.chat.completions.create(model="writer", messages=[QUESTION], tools=[WEATHER])
        choice = first.choices[0]
        assert choice.finish_reason == "tool_calls"
        assert choice.message.content is None
        assert [c.model_dump() for c in choice.message.tool_calls] == [
            {
                "id": "call_w1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ARGS},
            }
        ]
    # The client's tool went to the model beside the platform's own.
    offered = [t["function"]["name"] for t in fake_openai.requests[0]["tools"]]
    assert offered[-1] == "get_weather" and "search_records" in offered
    session = ChatSession.objects.get(user=user)
    assert _rows(session) == [
        ("user", "chat", QUESTION["content"], [], "", "complete"),
        ("assistant", "chat", "", ["call_w1"], "", "complete"),
    ]
    assert Message.objects.get(session=session, role="assistant").finish_reason == "tool_calls"

    # The client resends everything with its result: stored once, and the turn goes on.
    raw = client.chat.completions.with_raw_response.create(
        model="writer", messages=[QUESTION, CALLED, RESULT], tools=[WEATHER]
    )
    assert raw.headers["x-session-id"] == str(session.pk)
    answer = raw.parse().choices[0]
    assert (answer.message.content, answer.finish_reason) == ("It is sunny in Paris.", "stop")
    sent = fake_openai.requests[1]["messages"]
    assert sent[-3:] == [
        {"role": "user", "content": QUESTION["content"]},
        {"role": "assistant", "content": "", "tool_calls": [CALL]},
        {"role": "tool", "content": "sunny, 24 C", "tool_call_id": "call_w1"},
    ]
    # The next user turn resends the whole exchange: the same session, nothing stored twice.
    client.chat.completions.create(
        model="writer",
        messages=[
            QUESTION,
            CALLED,
            RESULT,
            {"role": "assistant", "content": "It is sunny in Paris."},
            {"role": "user", "content": "Thanks"},
        ],
        tools=[WEATHER],
    )
    assert ChatSession.objects.filter(user=user).count() == 1
    assert _rows(session) == [
        ("user", "chat", QUESTION["content"], [], "", "complete"),
        ("assistant", "chat", "", ["call_w1"], "", "complete"),
        ("tool", "tool", "sunny, 24 C", [], "call_w1", "complete"),
        ("assistant", "chat", "It is sunny in Paris.", [], "", "complete"),
        ("user", "chat", "Thanks", [], "", "complete"),
        ("assistant", "chat", "You are welcome.", [], "", "complete"),
    ]
    assert len(fake_openai.requests) == 3


def test_recall_tools_never_reach_the_client_beside_its_own(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    fake_openai.script(
        # A recall round first (answered server-side), then a call mixing both kinds.
        Reply(text="", tool_calls=[_recall("search_records", {"query": "Paris"})]),
        Reply(
            text="",
            tool_calls=[_recall("read_records", {"names": ["x"]}, "call_r2"), CALL],
        ),
    )
    completion = sdk(stack, key).chat.completions.create(
        model="writer", messages=[QUESTION], tools=[WEATHER]
    )
    calls = completion.choices[0].message.tool_calls
    assert [(c.id, c.function.name) for c in calls] == [("call_w1", "get_weather")]
    assert len(fake_openai.requests) == 2
    # Stored: the recall exchange server-side, and a reply holding only the client's call.
    reply = Message.objects.get(role="assistant", kind="chat")
    assert reply.tool_calls == [CALL]
    turn = ApiTurn.objects.get(reply=reply)
    assert [t["function"]["name"] for t in turn.options["tools"]] == ["get_weather"]
    # The model's second call saw the recall exchange; the client never does.
    assert [m["role"] for m in fake_openai.requests[1]["messages"][-2:]] == ["assistant", "tool"]


def test_bad_tool_payloads_are_openai_shaped_400s_and_store_nothing(
    stack, user, fake_bot, fake_openai
):
    _, key = new_key(user)
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{stack}/v1/chat/completions"
    reserved = {"type": "function", "function": {"name": "search_records"}}
    cases = [
        ({"tools": "get_weather"}, [QUESTION], "tools"),
        ({"tools": [{"type": "code", "function": {"name": "x"}}]}, [QUESTION], "tools[0]"),
        ({"tools": [reserved]}, [QUESTION], "tools[0].function.name"),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, [QUESTION], None),
        ({"tools": [WEATHER, WEATHER]}, [QUESTION], "tools[1].function.name"),
        ({"tools": [WEATHER], "tool_choice": "required"}, [QUESTION], "tool_choice"),
        ({"functions": [{"name": "x"}]}, [QUESTION], "functions"),
        (
            {},
            [QUESTION, {"role": "assistant", "tool_calls": [{"type": "function"}]}, RESULT],
            "messages[1].tool_calls[0].id",
        ),
        ({}, [QUESTION, CALLED, {"role": "tool", "content": "x"}], "messages[2]"),
        ({}, [QUESTION, CALLED, QUESTION], "messages[2]"),
        (
            {},
            [QUESTION, CALLED, {**RESULT, "tool_call_id": "call_zz"}],
            "messages[2].tool_call_id",
        ),
        ({}, [RESULT], "messages"),  # a result without its call and no session named
    ]
    for extra, messages, param in cases:
        body = {"model": "writer", "messages": messages, **extra}
        response = httpx.post(url, json=body, headers=headers, timeout=30)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error", body
        if param is not None:
            assert error["param"] == param, (body, error)
        else:
            assert error["param"] == "tools[0].function.name"
    assert Message.objects.count() == 0 and ChatSession.objects.count() == 0
    assert fake_openai.requests == []


def test_a_result_for_an_unknown_call_id_is_refused(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    fake_openai.script(Reply(text="", tool_calls=[CALL]))
    client = sdk(stack, key)
    client.chat.completions.create(model="writer", messages=[QUESTION], tools=[WEATHER])
    session = ChatSession.objects.get(user=user)
    before = _rows(session)
    url = f"{stack}/v1/chat/completions"
    headers = {"Authorization": f"Bearer {key}", "X-Session-Id": str(session.pk)}
    for messages in (
        [{**RESULT, "tool_call_id": "call_zz"}],  # no such call waits in the session
        [RESULT, {**RESULT, "tool_call_id": "call_zz"}],
    ):
        response = httpx.post(
            url, json={"model": "writer", "messages": messages}, headers=headers, timeout=30
        )
        assert response.status_code == 400
        assert response.json()["error"] == {
            "message": "No call call_zz is waiting for a result in this conversation.",
            "type": "invalid_request_error",
            "code": "unknown_tool_call",
            "param": "messages",
        }
    assert _rows(session) == before
    assert len(fake_openai.requests) == 1
    # The right id, with only the result and the session named, continues the turn.
    fake_openai.script(Reply(text="Sunny."))
    response = httpx.post(
        url, json={"model": "writer", "messages": [RESULT]}, headers=headers, timeout=60
    )
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == "Sunny."
    assert [r[0] for r in _rows(session)] == ["user", "assistant", "tool", "assistant"]
    # Answered once: the same result again is refused.
    again = httpx.post(
        url, json={"model": "writer", "messages": [RESULT]}, headers=headers, timeout=30
    )
    assert again.status_code == 400 and again.json()["error"]["code"] == "unknown_tool_call"


def test_client_tools_count_in_the_budget_and_too_many_are_context_length_exceeded(
    stack, user, fake_openai
):
    """A client's tool schemas go with every call, so they count in B like its system part: a
    short question with tools too big for a 500-token budget is refused before any call."""
    import openai

    tiny_bot(user, fake_openai)
    _, key = new_key(user)
    bulky = {
        **WEATHER,
        "function": {**WEATHER["function"], "description": "Weather in a city. " * 200},
    }
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(stack, key).chat.completions.create(model="tiny", messages=[QUESTION], tools=[bulky])
    assert caught.value.body["code"] == "context_length_exceeded"
    assert fake_openai.requests == []

    # the same question with the small tool fits, and is answered
    fake_openai.script(Reply(text="Sunny."))
    answer = sdk(stack, key).chat.completions.create(
        model="tiny", messages=[QUESTION], tools=[WEATHER]
    )
    assert answer.choices[0].message.content == "Sunny."
    from memory.recall import TOOLS as RECALL_TOOLS

    assert [t["function"]["name"] for t in fake_openai.requests[0]["tools"]] == [
        *(t["function"]["name"] for t in RECALL_TOOLS),
        "get_weather",
    ]
