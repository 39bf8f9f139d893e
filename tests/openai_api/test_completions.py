"""/v1/ with the real ``openai`` SDK against uvicorn + a Celery worker; the bots' model is the
local fake provider, so every request the platform sends is seen and measured."""

import datetime as dt

import httpx
import openai
import pytest
from django.utils import timezone

from bots.models import ChatSession, Message
from connections import usage
from connections.models import TokenCounter, UserQuota
from openai_api.models import ApiKey, ApiSession, ChainLink
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply
from tests.openai_api.conftest import new_key, sdk, tiny_bot

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def user(db):
    return UserFactory(username="apiuser")


@pytest.fixture
def fake_bot(user, fake_openai):
    return BotFactory(
        owner=user,
        name="Writer",
        system_prompt="You are Writer.",
        model="openai/fake-model",
        api_base=fake_openai.url,
    )


def _transcript(session: ChatSession) -> list[tuple[str, str]]:
    return [
        (m.role, m.content)
        for m in Message.objects.filter(session=session, kind="chat").order_by("seq")
    ]


def test_models_lists_only_the_keys_bots(stack, user, fake_bot):
    other_bot = BotFactory(owner=user, name="Second Bot")
    BotFactory(owner=UserFactory(), name="Not Yours")
    _, all_key = new_key(user)
    _, scoped = new_key(user, bots=[other_bot.pk])
    listed = sdk(stack, all_key).models.list()
    assert [(m.id, m.object, m.owned_by) for m in listed.data] == [
        ("writer", "model", "apiuser"),
        ("second-bot", "model", "apiuser"),
    ]
    assert listed.data[0].created == int(fake_bot.created_at.timestamp())
    assert [m.id for m in sdk(stack, scoped).models.list().data] == ["second-bot"]
    # One of them, as the SDK's models.retrieve asks (it was a 404 "Unknown path").
    one = sdk(stack, all_key).models.retrieve("second-bot")
    assert (one.id, one.object, one.owned_by) == ("second-bot", "model", "apiuser")
    with pytest.raises(openai.NotFoundError) as missing:
        sdk(stack, scoped).models.retrieve("writer")
    assert missing.value.body["code"] == "model_not_found"


def test_completion_runs_the_bots_turn_and_answers_in_openai_json(
    stack, user, fake_bot, fake_openai
):
    key_row, key = new_key(user, name="my editor")
    fake_openai.script(
        Reply(
            text="Hi there.",
            usage={"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14},
        )
    )
    raw = sdk(stack, key).chat.completions.with_raw_response.create(
        model="writer",
        messages=[{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hello"}],
        temperature=0.2,
        max_tokens=50,
        stop=["END"],
    )
    completion = raw.parse()
    assert completion.choices[0].message.content == "Hi there."
    assert completion.choices[0].finish_reason == "stop"
    assert completion.object == "chat.completion"
    assert completion.model == "writer"
    assert (completion.usage.prompt_tokens, completion.usage.completion_tokens) == (11, 3)
    assert completion.usage.total_tokens == 14
    session = ChatSession.objects.get(pk=int(raw.headers["X-Session-Id"]))
    assert (session.user_id, session.bot_id) == (user.pk, fake_bot.pk)
    assert _transcript(session) == [("user", "Hello"), ("assistant", "Hi there.")]
    api = ApiSession.objects.get(session=session)
    assert (api.key_id, api.key_name) == (key_row.pk, "my editor")
    (sent,) = fake_openai.requests
    # The client's system message follows the bot's prompt, on this call only (not stored).
    assert sent["messages"] == [
        {"role": "system", "content": "You are Writer."},
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hello"},
    ]
    assert (sent["temperature"], sent["max_tokens"], sent["stop"]) == (0.2, 50, ["END"])


def test_stream_sends_role_content_finish_usage_and_done(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    chunks = ["Stream", "ing ", "works."]
    fake_openai.script(
        Reply(
            text="".join(chunks),
            chunks=chunks,
            delay_between_chunks=0.2,
            usage={"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11},
        )
    )
    with sdk(stack, key).chat.completions.with_streaming_response.create(
        model="writer",
        messages=[{"role": "user", "content": "Stream please"}],
        stream=True,
        stream_options={"include_usage": True},
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        session_id = int(response.headers["X-Session-Id"])
        events = list(response.parse())
    assert events[0].choices[0].delta.role == "assistant"
    content = [
        e.choices[0].delta.content for e in events[1:] if e.choices and e.choices[0].delta.content
    ]
    assert "".join(content) == "Streaming works."
    finals = [e for e in events if e.choices and e.choices[0].finish_reason]
    assert [e.choices[0].finish_reason for e in finals] == ["stop"]
    assert events[-1].choices == []
    assert (events[-1].usage.prompt_tokens, events[-1].usage.completion_tokens) == (7, 4)
    assert all(e.usage is None for e in events[:-1])
    session = ChatSession.objects.get(pk=session_id)
    assert _transcript(session) == [("user", "Stream please"), ("assistant", "Streaming works.")]


def test_resent_history_continues_one_session_and_an_edit_forks(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    client = sdk(stack, key)
    fake_openai.script("Answer one.", "Answer two.", "Answer three.")
    history = [{"role": "user", "content": "First question"}]
    first = client.chat.completions.with_raw_response.create(model="writer", messages=history)
    history.append({"role": "assistant", "content": first.parse().choices[0].message.content})
    history.append({"role": "user", "content": "Second question"})
    second = client.chat.completions.with_raw_response.create(model="writer", messages=history)
    session_id = first.headers["X-Session-Id"]
    assert second.headers["X-Session-Id"] == session_id
    session = ChatSession.objects.get(pk=int(session_id))
    assert _transcript(session) == [
        ("user", "First question"),
        ("assistant", "Answer one."),
        ("user", "Second question"),
        ("assistant", "Answer two."),
    ]
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "Answer one."},
        {"role": "user", "content": "Second question"},
    ]
    # The client edits its first question: a fork holding no shared prefix but the edit.
    edited = [
        {"role": "user", "content": "First question"},
        {"role": "assistant", "content": "Answer one."},
        {"role": "user", "content": "Another second question"},
    ]
    third = client.chat.completions.with_raw_response.create(model="writer", messages=edited)
    fork_id = int(third.headers["X-Session-Id"])
    assert fork_id != int(session_id)
    fork = ChatSession.objects.get(pk=fork_id)
    assert _transcript(fork) == [
        ("user", "First question"),
        ("assistant", "Answer one."),
        ("user", "Another second question"),
        ("assistant", "Answer three."),
    ]
    assert ApiSession.objects.get(session=fork).forked_from_id == int(session_id)
    # The source is untouched.
    assert _transcript(session) == [
        ("user", "First question"),
        ("assistant", "Answer one."),
        ("user", "Second question"),
        ("assistant", "Answer two."),
    ]
    assert ChatSession.objects.filter(user=user).count() == 2
    assert list(ChainLink.objects.filter(session=fork).values_list("position", flat=True)) == [
        1,
        2,
        3,
        4,
    ]


def test_chatting_on_the_page_in_an_api_chat_does_not_fork_the_clients_next_call(
    stack, user, fake_bot, fake_openai
):
    """docs/openai-api.md: a client's resend still continues a chat its user went on with on
    the chat page. The page's question, after the client's newest link, counted as another
    call's question in flight, and the resend went into a new chat without the page's turn."""
    from rest_framework.authtoken.models import Token

    _, key = new_key(user)
    client = sdk(stack, key)
    fake_openai.script("Answer one.", "Answer on the page.", "Answer two.")
    history = [{"role": "user", "content": "First question"}]
    first = client.chat.completions.with_raw_response.create(model="writer", messages=history)
    session_id = int(first.headers["X-Session-Id"])
    token = Token.objects.get_or_create(user=user)[0].key
    typed = httpx.post(  # as the page sends it, through the running server
        f"{stack}/api/v1/sessions/{session_id}/messages/",
        json={"content": "Typed on the page", "wait": True},
        headers={"Authorization": f"Token {token}"},
        timeout=60,
    )
    assert typed.status_code == 201, typed.json()
    history += [
        {"role": "assistant", "content": "Answer one."},
        {"role": "user", "content": "Second question"},
    ]
    second = client.chat.completions.with_raw_response.create(model="writer", messages=history)
    assert int(second.headers["X-Session-Id"]) == session_id
    assert _transcript(ChatSession.objects.get(pk=session_id)) == [
        ("user", "First question"),
        ("assistant", "Answer one."),
        ("user", "Typed on the page"),
        ("assistant", "Answer on the page."),
        ("user", "Second question"),
        ("assistant", "Answer two."),
    ]
    assert ChatSession.objects.filter(user=user).count() == 1


def test_explicit_session_continues_with_only_the_latest_message(
    stack, user, fake_bot, fake_openai
):
    _, key = new_key(user)
    client = sdk(stack, key)
    fake_openai.script("Noted: blue.", "You said blue.")
    first = client.chat.completions.with_raw_response.create(
        model="writer", messages=[{"role": "user", "content": "My colour is blue"}]
    )
    session_id = first.headers["X-Session-Id"]
    second = client.chat.completions.with_raw_response.create(
        model="writer",
        messages=[{"role": "user", "content": "What is my colour?"}],
        extra_headers={"X-Session-Id": session_id},
    )
    assert second.headers["X-Session-Id"] == session_id
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "My colour is blue"},
        {"role": "assistant", "content": "Noted: blue."},
        {"role": "user", "content": "What is my colour?"},
    ]
    # metadata.session_id works too; another user's session is not found and nothing is stored.
    stranger = UserFactory()
    _, stranger_key = new_key(stranger)
    BotFactory(owner=stranger, name="Writer", model="openai/fake-model", api_base=fake_openai.url)
    with pytest.raises(openai.NotFoundError) as caught:
        sdk(stack, stranger_key).chat.completions.create(
            model="writer",
            messages=[{"role": "user", "content": "Let me in"}],
            metadata={"session_id": session_id},
        )
    assert caught.value.body["code"] == "session_not_found"
    assert Message.objects.filter(content="Let me in").count() == 0


def test_keys_and_models_are_refused_in_openai_shape(stack, user, fake_bot, fake_openai):
    other_bot = BotFactory(owner=user, name="Other")
    foreign = BotFactory(owner=UserFactory(), name="Foreign")
    key_row, key = new_key(user, bots=[other_bot.pk])
    messages = [{"role": "user", "content": "hi"}]
    with pytest.raises(openai.NotFoundError) as caught:
        sdk(stack, key).chat.completions.create(model="writer", messages=messages)
    assert caught.value.body == {
        "message": "The model 'writer' does not exist or this key may not use it.",
        "type": "invalid_request_error",
        "code": "model_not_found",
        "param": "model",
    }
    with pytest.raises(openai.NotFoundError):
        sdk(stack, key).chat.completions.create(model=foreign.slug, messages=messages)
    with pytest.raises(openai.AuthenticationError) as caught:
        sdk(stack, key + "x").chat.completions.create(model="other", messages=messages)
    assert caught.value.body["code"] == "invalid_api_key"
    assert key not in str(caught.value.body)
    ApiKey.objects.filter(pk=key_row.pk).update(expiry_date=timezone.now() - dt.timedelta(1))
    with pytest.raises(openai.AuthenticationError):
        sdk(stack, key).models.list()
    _, revoked = new_key(user)
    ApiKey.objects.filter(prefix=revoked.split(".")[0]).update(revoked=True)
    with pytest.raises(openai.AuthenticationError):
        sdk(stack, revoked).chat.completions.create(model="writer", messages=messages)
    assert fake_openai.requests == []
    assert Message.objects.count() == 0


def test_bad_input_is_an_openai_shaped_400_and_stores_nothing(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    headers = {"Authorization": f"Bearer {key}"}
    url = f"{stack}/v1/chat/completions"
    cases = [
        (
            {"model": "writer", "messages": [{"role": "user", "content": "a\x00b"}]},
            "messages[0].content",
        ),
        ({"model": "writer", "messages": "hello"}, "messages"),
        ({"model": "writer", "messages": []}, "messages"),
        ({"model": 5, "messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "writer", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
        ({"model": "writer", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
        ({"model": "writer", "messages": [{"role": "user", "content": "x"}], "n": 2}, "n"),
        (
            {"model": "writer", "messages": [{"role": "user", "content": "x"}], "temperature": 9},
            "temperature",
        ),
        (
            {"model": "writer", "messages": [{"role": "user", "content": "x"}], "stream": "yes"},
            "stream",
        ),
        (
            {"model": "writer", "messages": [{"role": "user", "content": "x"}], "max_tokens": -1},
            "max_tokens",
        ),
        ({"model": "writer", "messages": [{"role": "user", "content": "x"}], "stop": [1]}, "stop"),
        ({"model": "writer", "messages": [{"role": "assistant", "content": "x"}]}, "messages"),
        ({"model": "writer", "messages": [{"role": "user", "content": "x"}] * 10_001}, "messages"),
        (
            {
                "model": "writer",
                "messages": [{"role": "user", "content": "x"}],
                "metadata": {"session_id": "1; drop"},
            },
            "metadata.session_id",
        ),
    ]
    for body, param in cases:
        response = httpx.post(url, json=body, headers=headers, timeout=30)
        assert response.status_code == 400, body
        error = response.json()["error"]
        assert (error["type"], error["param"]) == ("invalid_request_error", param), error
        assert error["message"]
    not_json = httpx.post(
        url, content=b"{", headers={**headers, "Content-Type": "application/json"}
    )
    assert not_json.status_code == 400 and not_json.json()["error"]["param"] is None
    unknown = httpx.get(f"{stack}/v1/nope", headers=headers)
    assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
    wrong_method = httpx.get(url, headers=headers)
    assert wrong_method.status_code == 405
    assert set(wrong_method.json()["error"]) == {"message", "type", "code", "param"}
    assert Message.objects.count() == 0 and ChatSession.objects.count() == 0
    assert fake_openai.requests == []


def test_a_message_bigger_than_the_budget_is_context_length_exceeded(stack, user, fake_openai):
    tiny_bot(user, fake_openai)
    _, key = new_key(user)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(stack, key).chat.completions.create(
            model="tiny", messages=[{"role": "user", "content": "word " * 2000}]
        )
    assert caught.value.body["code"] == "context_length_exceeded"
    assert caught.value.body["type"] == "invalid_request_error"
    assert fake_openai.requests == []
    # The user's message stays stored (docs/compaction.md); its reply failed, nothing was sent.
    assert list(Message.objects.values_list("role", "status")) == [
        ("user", "complete"),
        ("assistant", "failed"),
    ]


def test_a_spent_daily_budget_is_rate_limit_exceeded(stack, user, fake_bot, fake_openai):
    # The first turn's context must fit in the limit (only its output may cross it).
    row, key = new_key(user, daily_token_limit=200)
    fake_openai.script(
        Reply(text="ok", usage={"prompt_tokens": 150, "completion_tokens": 50, "total_tokens": 200})
    )
    client = sdk(stack, key)
    client.chat.completions.create(model="writer", messages=[{"role": "user", "content": "one"}])
    with pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="writer", messages=[{"role": "user", "content": "two"}]
        )
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert "resets at" in caught.value.body["message"]
    assert len(fake_openai.requests) == 1
    assert not Message.objects.filter(content="two").exists()
    # the key's counter, the one the turn counts in (connections.usage)
    assert TokenCounter.objects.get(subject=f"key:{row.pk}").used == 200


def test_the_users_daily_limit_applies_to_the_api_too(stack, user, fake_bot, fake_openai):
    _, key = new_key(user)
    UserQuota.objects.create(user=user, daily_token_limit=20)
    TokenCounter.objects.create(subject=f"user:{user.pk}", day=usage.today(), used=20)
    with pytest.raises(openai.RateLimitError) as caught:
        sdk(stack, key).chat.completions.create(
            model="writer", messages=[{"role": "user", "content": "one"}]
        )
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert fake_openai.requests == []


def test_a_client_system_message_counts_in_the_budget(stack, user, fake_openai):
    tiny_bot(user, fake_openai)
    _, key = new_key(user)
    with pytest.raises(openai.BadRequestError) as caught:
        sdk(stack, key).chat.completions.create(
            model="tiny",
            messages=[
                {"role": "system", "content": "rule " * 2000},
                {"role": "user", "content": "short question"},
            ],
        )
    assert caught.value.body["code"] == "context_length_exceeded"
    assert fake_openai.requests == []


def test_a_streamed_call_refused_by_its_turn_answers_its_status_not_200(stack, user, fake_openai):
    """A client system message too big for B, a key whose day has too little left for the
    context: refused by the turn, not at the send. Streamed, they answered 200 and then an
    error event, which the SDK raised as a bare APIError mid-iteration; now the headers wait
    for the turn's first text or its end, so the refusal is a 400 / 429 as unstreamed."""
    tiny_bot(user, fake_openai)
    _, key = new_key(user)
    with pytest.raises(openai.BadRequestError) as caught:
        for _ in sdk(stack, key).chat.completions.create(
            model="tiny",
            stream=True,
            messages=[
                {"role": "system", "content": "rule " * 2000},
                {"role": "user", "content": "short question"},
            ],
        ):
            pass
    assert caught.value.body["code"] == "context_length_exceeded"
    _, small = new_key(user, daily_token_limit=30)
    with pytest.raises(openai.RateLimitError) as limited:
        for _ in sdk(stack, small).chat.completions.create(
            model="tiny", stream=True, messages=[{"role": "user", "content": "word " * 60}]
        ):
            pass
    assert limited.value.body["code"] == "rate_limit_exceeded"
    assert fake_openai.requests == []
    # And a streamed call that runs streams as before.
    fake_openai.script(Reply(text="Fine.", chunks=["Fi", "ne."]))
    chunks = sdk(stack, key).chat.completions.create(
        model="tiny", stream=True, messages=[{"role": "user", "content": "hello"}]
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "Fine."


def test_a_client_that_leaves_mid_stream_still_finds_its_conversation(
    stack, user, fake_bot, fake_openai
):
    """The worker writes the chain when the reply completes (turns.hooks), so a client
    that hung up mid-stream and resends the reply it would have got continues the session."""
    import time

    _, key = new_key(user)
    chunks = ["one ", "two ", "three ", "four."]
    fake_openai.script(
        Reply(text="".join(chunks), chunks=chunks, delay_between_chunks=0.3), "Next."
    )
    client = sdk(stack, key)
    with client.chat.completions.with_streaming_response.create(
        model="writer", messages=[{"role": "user", "content": "Count"}], stream=True
    ) as response:
        session_id = response.headers["X-Session-Id"]
        for event in response.parse():
            if event.choices and event.choices[0].delta.content:
                break  # hang up after the first words
    reply = Message.objects.get(session_id=int(session_id), role="assistant")
    deadline = time.monotonic() + 30
    while reply.status != "complete" and time.monotonic() < deadline:
        time.sleep(0.1)
        reply.refresh_from_db()
    assert reply.content == "one two three four."
    deadline = time.monotonic() + 10
    while ChainLink.objects.filter(session_id=int(session_id)).count() < 2:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    again = client.chat.completions.with_raw_response.create(
        model="writer",
        messages=[
            {"role": "user", "content": "Count"},
            {"role": "assistant", "content": "one two three four."},
            {"role": "user", "content": "Again"},
        ],
    )
    assert again.headers["X-Session-Id"] == session_id
    assert ChatSession.objects.filter(user=user).count() == 1


def _recall_call(name, arguments):
    import json

    return {
        "id": f"call_{name}",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.mark.parametrize("stream", [False, True])
def test_recall_rounds_run_server_side_and_never_reach_the_client(
    stack, user, fake_bot, fake_openai, stream
):
    _, key = new_key(user)
    fake_openai.script(
        Reply(text="", tool_calls=[_recall_call("search_records", {"query": "depot"})]),
        Reply(text="The depot is in Leeds."),
    )
    client = sdk(stack, key)
    messages = [{"role": "user", "content": "Where is the depot?"}]
    if stream:
        events = list(
            client.chat.completions.create(model="writer", messages=messages, stream=True)
        )
        deltas = [e.choices[0].delta for e in events if e.choices]
        assert all(d.tool_calls is None for d in deltas)
        assert "".join(d.content or "" for d in deltas) == "The depot is in Leeds."
        assert [e.choices[0].finish_reason for e in events if e.choices][-1] == "stop"
    else:
        completion = client.chat.completions.create(model="writer", messages=messages)
        assert completion.choices[0].message.content == "The depot is in Leeds."
        assert completion.choices[0].message.tool_calls is None
        assert completion.choices[0].finish_reason == "stop"
    # The platform offered its recall tools to the model and answered the search itself.
    assert len(fake_openai.requests) == 2
    assert "search_records" in {t["function"]["name"] for t in fake_openai.requests[0]["tools"]}
    assert fake_openai.requests[1]["messages"][-1]["role"] == "tool"
    session = ChatSession.objects.get(user=user)
    assert Message.objects.filter(session=session, kind="tool").count() == 2


def test_an_api_turns_context_record_rebuilds_what_the_provider_received(
    stack, user, fake_bot, fake_openai
):
    """Issue 22: an OpenAI-API call is recorded like any turn, the client's system message as
    its own part (its text: nothing else stores it), and rebuilds byte for byte."""
    import json
    import time

    from compaction.models import ContextRecord
    from compaction.records import record_rebuild

    _, key = new_key(user)
    client = sdk(stack, key)
    fake_openai.script(Reply(text="First."), Reply(text="Second."))
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "One?"}]
    raw = client.chat.completions.with_raw_response.create(model="writer", messages=history)
    history += [{"role": "assistant", "content": "First."}, {"role": "user", "content": "Two?"}]
    client.chat.completions.create(model="writer", messages=history)

    session = ChatSession.objects.get(pk=int(raw.headers["X-Session-Id"]))
    # The worker writes a record just after it finished the reply the client already has.
    deadline = time.monotonic() + 30
    while ContextRecord.objects.filter(session=session).count() < 2 and (  # noqa: PLR2004
        time.monotonic() < deadline
    ):
        time.sleep(0.05)
    records = list(ContextRecord.objects.filter(session=session).order_by("id"))
    assert len(records) == 2  # noqa: PLR2004
    last = records[-1].calls[0]
    assert [(p["kind"], p["ref"]) for p in last["parts"] if p["kind"] == "client_system"] == [
        ("client_system", {"text": "Be brief."})
    ]
    rebuilt = [m for record in records for m in record_rebuild(record)]
    assert [json.dumps(m) for m in rebuilt] == [
        json.dumps(r["messages"]) for r in fake_openai.requests
    ]


def _failing_then(fake_openai, text: str) -> None:
    fake_openai.script(Reply(status=400, error_message="bad request"), Reply(text=text))


def test_a_retried_failed_opening_runs_again_in_its_own_chat(stack, user, fake_bot, fake_openai):
    """A client's (or its SDK's) retry of a first call that failed left one more chat behind
    per try, each holding the question and a failed reply; it now re-runs that reply."""
    _, key = new_key(user)
    client = sdk(stack, key)
    _failing_then(fake_openai, "Lima.")
    opening = [{"role": "user", "content": "What is the capital of Peru?"}]
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="writer", messages=opening)
    answer = client.chat.completions.create(model="writer", messages=opening)
    assert answer.choices[0].message.content == "Lima."
    [session] = ChatSession.objects.all()
    assert _transcript(session) == [
        ("user", "What is the capital of Peru?"),
        ("assistant", "Lima."),
    ]
    # ... and the conversation goes on from there.
    fake_openai.script(Reply(text="Santiago."))
    going_on = [*opening, {"role": "assistant", "content": "Lima."}]
    going_on.append({"role": "user", "content": "And of Chile?"})
    client.chat.completions.create(model="writer", messages=going_on)
    assert ChatSession.objects.count() == 1
    assert _transcript(session)[-1] == ("assistant", "Santiago.")


def test_a_retried_failed_call_mid_conversation_runs_its_reply_again(
    stack, user, fake_bot, fake_openai
):
    _, key = new_key(user)
    client = sdk(stack, key)
    fake_openai.script(Reply(text="Lima."))
    opening = [{"role": "user", "content": "What is the capital of Peru?"}]
    client.chat.completions.create(model="writer", messages=opening)
    going_on = [*opening, {"role": "assistant", "content": "Lima."}]
    going_on.append({"role": "user", "content": "And of Chile?"})
    _failing_then(fake_openai, "Santiago.")
    with pytest.raises(openai.APIStatusError):
        client.chat.completions.create(model="writer", messages=going_on)
    answer = client.chat.completions.create(model="writer", messages=going_on)
    assert answer.choices[0].message.content == "Santiago."
    [session] = ChatSession.objects.all()
    assert _transcript(session) == [
        ("user", "What is the capital of Peru?"),
        ("assistant", "Lima."),
        ("user", "And of Chile?"),
        ("assistant", "Santiago."),
    ]
