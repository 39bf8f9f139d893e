"""The send's quick refusal counts only what no compaction can shrink (the system prompt, the
message, pins): a chat whose summaries filled the budget was refused 422 at send, before the
blocking compaction that fuses them could make room (docs/compaction.md, "Admission")."""

import pytest

from bots.models import Message
from chat_platform.llm.tokens import count_message_tokens
from compaction.models import Summary

pytestmark = pytest.mark.django_db(transaction=True)

TEXT = "The ferry to Naxos leaves at 07:30 from gate E{n}; tickets cost 48 euros each. "


def test_summaries_that_fill_b_do_not_refuse_a_send(owner_client, chat_session, eager_tasks):
    bot = chat_session.bot
    bot.context_window, bot.max_output_tokens = 20_000, 500
    bot.save()
    url = f"/api/v1/sessions/{chat_session.pk}/messages/"
    for round_ in range(2):
        for n in range(3):
            sent = owner_client.post(
                url, {"content": TEXT.format(n=n + 3 * round_) * 20, "wait": True}, format="json"
            )
            assert sent.status_code == 201
        compacted = owner_client.post(f"/api/v1/sessions/{chat_session.pk}/compact/", {})
        assert compacted.status_code == 200
    summaries = sum(
        Summary.objects.filter(session=chat_session, status="active").values_list(
            "token_count", flat=True
        )
    )
    question = "When does the ferry leave, and from which gate?"
    asked = count_message_tokens(question, model=bot.model)
    # A window where the summaries alone leave no room for the question, the question alone
    # fits with a margin.
    bot.context_window = 500 + asked + summaries // 2 + 60
    bot.save()
    assert asked + summaries > bot.context_window - 500

    response = owner_client.post(url, {"content": question}, format="json")

    assert response.status_code == 202, response.content
    reply = Message.objects.get(pk=response.json()["assistant_message"]["id"])
    assert reply.error_code != "context_too_large"
