"""No request exceeds B, the platform's own memory tools included (docs/compaction.md,
"Admission"). Their schemas (~290 tokens) are not counted in pressure or the thresholds (a
small bot's hard compaction would keep next to no history: issue 17), but admission leaves
room for them: a bot of B 1500 with compaction off sent 1,773 tokens."""

import pytest

from chat_platform.llm.tokens import count_message_tokens, count_tools_tokens
from memory.recall import TOOLS as RECALL_TOOLS
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

WORDS = "apple river stone cloud green table light music paper house "


def _sent(body: dict) -> int:
    model = "openai/fake-model"
    messages = sum(
        count_message_tokens(m.get("content") or "", model=model) for m in body["messages"]
    )
    return messages + count_tools_tokens(body.get("tools"), model=model)


def test_the_memory_tools_fit_in_b_with_the_history(
    owner_client, fake_session, fake_openai, eager_tasks
):
    bot = fake_session.bot
    bot.context_window, bot.max_output_tokens, bot.compaction_enabled = 2000, 500, False
    bot.save()  # B = 1500
    for i in range(6):
        fake_openai.script(Reply(text="Ok noted."))
        sent = owner_client.post(
            f"/api/v1/sessions/{fake_session.pk}/messages/",
            {"content": f"Turn {i}. " + WORDS * 28, "wait": True},
            format="json",
        )
        assert sent.status_code == 201

    bodies = fake_openai.requests
    assert len(bodies) == 6
    assert all(body.get("tools") for body in bodies)  # recall stays offered
    assert [_sent(body) <= 1500 for body in bodies] == [True] * 6
    # The last call still carries as much history as fits beside the tools.
    assert _sent(bodies[-1]) > 1500 - count_message_tokens("Turn 5. " + WORDS * 28, model="x")
    assert count_tools_tokens(RECALL_TOOLS, model="openai/fake-model") > 200
