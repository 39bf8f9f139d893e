"""Done-when of issue 20: the ``openai`` SDK, resending its whole history every call, holds a
500-turn conversation with a 4k-window bot: no provider request over B, summaries appear, one
session, and the stored transcript holds each message once.

The 500 turns are a soak run (``make soak``, docs/testing.md); the suite proves the same property
at a tenth of the size: 50 turns in a 2k window, so several compactions happen inside the run."""

import pytest

from bots.models import ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens
from compaction.measure import bot_budget
from compaction.models import Summary
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply
from tests.openai_api.conftest import new_key, sdk

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]


@pytest.mark.parametrize(
    ("turns", "window", "output", "budget"),
    [
        pytest.param(50, 2048, 128, 1920, id="50-turns"),
        pytest.param(500, 4096, 256, 3840, id="500-turns", marks=pytest.mark.soak),
    ],
)
@pytest.mark.timeout(1500)
def test_turns_resending_everything_never_exceed_the_budget(
    stack, fake_openai, turns, window, output, budget
):
    user = UserFactory()
    bot = BotFactory(
        owner=user,
        name="Long",
        system_prompt="You keep notes.",
        model="openai/fake-model",
        api_base=fake_openai.url,
        context_window=window,
        max_output_tokens=output,
        compaction_model="builtin/extractive",
    )
    assert bot_budget(bot).budget == budget
    _, key = new_key(user)
    client = sdk(stack, key)
    history: list[dict] = []
    session_ids = set()
    for turn in range(1, turns + 1):
        fake_openai.script(Reply(text=f"Noted item {turn}."))
        history.append(
            {
                "role": "user",
                "content": f"Note {turn}: the parcel for order {turn * 37} ships to depot "
                f"{turn % 11} on day {turn % 28 + 1}, handled by agent {turn * 3}.",
            }
        )
        raw = client.chat.completions.with_raw_response.create(model="long", messages=history)
        answer = raw.parse().choices[0].message.content
        assert answer == f"Noted item {turn}."
        history.append({"role": "assistant", "content": answer})
        session_ids.add(raw.headers["X-Session-Id"])

    assert len(session_ids) == 1
    assert ChatSession.objects.filter(user=user).count() == 1
    session = ChatSession.objects.get(pk=int(session_ids.pop()))
    stored = list(
        Message.objects.filter(session=session, kind="chat")
        .order_by("seq")
        .values_list("role", "content")
    )
    assert stored == [(m["role"], m["content"]) for m in history]
    assert Summary.objects.filter(session=session).exists()
    requests = fake_openai.requests
    assert len(requests) == turns
    sizes = [
        sum(count_message_tokens(m["content"] or "", model=bot.model) for m in r["messages"])
        for r in requests
    ]
    assert max(sizes) <= budget
    # Late requests carry a summary block, not the whole history.
    assert any(m["content"].startswith("[Summary of messages") for m in requests[-1]["messages"])
