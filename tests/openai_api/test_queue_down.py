"""A /v1 call whose message is stored while the task queue is down answers 503 with the chat
(`X-Session-Id`) and `x-should-retry: false`: the reply starts by itself when the queue is
back, and the SDK's own retries (two by default) stored the question three times, in three new
chats, each answered later (docs/openai-api.md)."""

import pytest

from bots.models import ChatSession, Message
from openai_api.keys import key_create
from tests.openai_api.conftest import completion_post
from turns import dispatch

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_call_stored_while_the_queue_is_down_says_not_to_retry(owner, fake_bot, monkeypatch):
    monkeypatch.setattr(dispatch, "turn_dispatch", lambda message_id, **kwargs: False)
    _, raw = key_create(user=owner, name="sdk")
    response = completion_post(
        raw, {"model": fake_bot.slug, "messages": [{"role": "user", "content": "Hello there"}]}
    )
    assert response.status_code == 503, response.content
    assert response.json()["error"]["code"] == "service_unavailable"
    assert response["x-should-retry"] == "false"
    (chat,) = ChatSession.objects.all()
    assert response["X-Session-Id"] == str(chat.pk)
    assert list(Message.objects.values_list("role", "status")) == [
        ("user", "complete"),
        ("assistant", "pending"),
    ]
