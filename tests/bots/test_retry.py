"""Retry of a failed reply (turns/services/retry.py, docs/chat-turn.md "Retry"): the reply runs
again for the same question, in place; neither the transcript nor the model's request ever holds
the question twice, whichever way the client asks."""

import pytest
from rest_framework.test import APIClient

from bots.models import ChatSession, Message
from compaction.models import ContextRecord
from connections import usage
from connections.models import TokenCounter
from openai_api.keys import key_create
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

SYSTEM = {"role": "system", "content": "You are a test bot."}


def _send(client, session, content, **body):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": content, **body}, format="json"
    )


def _transcript(session) -> list[tuple[int, str, str, str]]:
    return list(
        Message.objects.filter(session=session)
        .order_by("seq")
        .values_list("seq", "role", "content", "status")
    )


@pytest.fixture
def failed_exchange(owner_client, fake_session, fake_openai, eager_tasks):
    """A chat whose first question's reply failed (the provider refused it)."""
    fake_openai.script(Reply(status=400, error_message="bad request"))
    response = _send(owner_client, fake_session, "What is the capital of Peru?", client_id="c1")
    reply = response.json()["assistant_message"]
    assert Message.objects.get(pk=reply["id"]).status == "failed"
    return response.json()


def test_sending_the_question_again_reruns_the_failed_reply(
    owner_client, fake_session, fake_openai, failed_exchange
):
    fake_openai.script(Reply(text="Lima."))
    again = _send(owner_client, fake_session, "What is the capital of Peru?", client_id="c2")
    assert again.status_code == 202
    body = again.json()
    assert body["user_message"]["id"] == failed_exchange["user_message"]["id"]
    assert body["assistant_message"]["id"] == failed_exchange["assistant_message"]["id"]
    assert _transcript(fake_session) == [
        (1, "user", "What is the capital of Peru?", "complete"),
        (2, "assistant", "Lima.", "complete"),
    ]
    assert fake_openai.requests[-1]["messages"] == [
        SYSTEM,
        {"role": "user", "content": "What is the capital of Peru?"},
    ]
    reply = Message.objects.get(pk=body["assistant_message"]["id"])
    assert (reply.error_code, reply.error_message, reply.finish_reason) == ("", "", "stop")
    # The retry's client_id now names the exchange: repeating that send stores nothing.
    repeat = _send(owner_client, fake_session, "What is the capital of Peru?", client_id="c2")
    assert repeat.json()["assistant_message"]["id"] == reply.pk
    assert len(_transcript(fake_session)) == 2


def test_the_retry_endpoint_reruns_the_reply_in_place(
    owner_client, fake_session, fake_openai, failed_exchange
):
    fake_openai.script(Reply(text="Lima."))
    reply_id = failed_exchange["assistant_message"]["id"]
    response = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert response.status_code == 202
    assert response.json()["assistant_message"]["id"] == reply_id
    # Eager tasks: the re-run turn ran when the retry committed.
    assert response.json()["assistant_message"]["status"] == "complete"
    assert _transcript(fake_session) == [
        (1, "user", "What is the capital of Peru?", "complete"),
        (2, "assistant", "Lima.", "complete"),
    ]
    assert [m["role"] for m in fake_openai.requests[-1]["messages"]] == ["system", "user"]
    # What the model saw is the re-run's record, the failed run's gone with it (one per reply).
    record = ContextRecord.objects.get(message_id=reply_id)
    reply = Message.objects.get(pk=reply_id)
    assert [call["usage"]["completion_tokens"] for call in record.calls] == [
        reply.completion_tokens
    ]
    # A complete reply is not retried (regenerate it instead): nothing changes.
    refused = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "message": ["Only a failed or interrupted reply can be retried."]
    }
    assert len(_transcript(fake_session)) == 2


def test_an_interrupted_reply_leaves_the_running_totals_when_retried(
    owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="Fine."))
    _send(owner_client, fake_session, "hello", wait=True)
    before = fake_session.__class__.objects.get(pk=fake_session.pk)
    reply = Message.objects.get(session=fake_session, seq=2)
    Message.objects.filter(pk=reply.pk).update(status="interrupted")  # as the watchdog leaves it
    fake_openai.script(Reply(text="Fine again."))
    owner_client.post(f"/api/v1/messages/{reply.pk}/retry/")
    after = fake_session.__class__.objects.get(pk=fake_session.pk)
    # The interrupted text left the totals, the new text joined them: the same count again.
    assert (after.context_messages, after.context_tokens) == (
        before.context_messages,
        before.context_tokens - reply.token_count + Message.objects.get(pk=reply.pk).token_count,
    )
    assert _transcript(fake_session)[1] == (2, "assistant", "Fine again.", "complete")


def test_a_failed_reply_with_a_later_message_is_not_retried_in_place(
    owner_client, fake_session, fake_openai, failed_exchange
):
    fake_openai.script(Reply(text="Something else."))
    _send(owner_client, fake_session, "Never mind: hello.")
    reply_id = failed_exchange["assistant_message"]["id"]
    refused = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "message": ["Only the chat's last reply can be retried; regenerate an earlier one."]
    }


def test_a_compact_command_after_the_failed_reply_leaves_it_retryable(
    owner_client, fake_session, fake_openai, failed_exchange
):
    """A command and its notice are never sent to the model (docs/api.md): a /compact typed
    after a failure does not make the failed reply an earlier one. It answered 400 ("Only the
    chat's last reply …"), and sending the question again stored it twice."""
    compact = _send(owner_client, fake_session, "/compact")
    assert compact.status_code == 200
    reply_id = failed_exchange["assistant_message"]["id"]
    fake_openai.script(Reply(text="Lima."))
    response = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert response.status_code == 202, response.json()
    assert response.json()["assistant_message"]["status"] == "complete"
    assert fake_openai.requests[-1]["messages"] == [
        SYSTEM,
        {"role": "user", "content": "What is the capital of Peru?"},
    ]
    notice = compact.json()["notice"]["content"]
    assert _transcript(fake_session) == [
        (1, "user", "What is the capital of Peru?", "complete"),
        (2, "assistant", "Lima.", "complete"),
        (3, "user", "/compact", "complete"),
        (4, "system", notice, "complete"),
    ]


def test_the_question_sent_again_after_a_compact_command_is_the_retry(
    owner_client, fake_session, fake_openai, failed_exchange
):
    _send(owner_client, fake_session, "/compact")
    fake_openai.script(Reply(text="Lima."))
    again = _send(owner_client, fake_session, "What is the capital of Peru?", client_id="c2")
    assert again.status_code == 202
    assert again.json()["assistant_message"]["id"] == failed_exchange["assistant_message"]["id"]
    assert [row[1:3] for row in _transcript(fake_session)][:2] == [
        ("user", "What is the capital of Peru?"),
        ("assistant", "Lima."),
    ]
    assert len(_transcript(fake_session)) == 4


def test_the_same_text_after_a_complete_reply_is_a_new_message(
    owner_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="One."), Reply(text="Two."))
    _send(owner_client, fake_session, "again?")
    _send(owner_client, fake_session, "again?")
    assert _transcript(fake_session) == [
        (1, "user", "again?", "complete"),
        (2, "assistant", "One.", "complete"),
        (3, "user", "again?", "complete"),
        (4, "assistant", "Two.", "complete"),
    ]


def test_a_retry_through_an_api_key_is_charged_to_the_key_and_refused_once_it_is_spent(
    owner, owner_client, fake_session, fake_openai, failed_exchange
):
    key, text = key_create(user=owner, name="script", daily_token_limit=600)
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {text}")
    reply_id = failed_exchange["assistant_message"]["id"]
    subject = f"key:{key.pk}"
    TokenCounter.objects.create(subject=subject, day=usage.today(), used=600)
    calls = len(fake_openai.requests)

    refused = client.post(f"/api/v1/messages/{reply_id}/retry/")

    assert refused.status_code == 429
    assert refused.json()["error"]["code"] == "quota_exceeded"
    assert refused.json()["error"]["details"]["scope"] == "key"
    assert Message.objects.get(pk=reply_id).status == "failed"
    assert len(fake_openai.requests) == calls

    TokenCounter.objects.filter(subject=subject).update(used=0)
    usage_reported = {"prompt_tokens": 40, "completion_tokens": 10, "total_tokens": 50}
    fake_openai.script(Reply(text="Lima.", usage=usage_reported))

    again = client.post(f"/api/v1/messages/{reply_id}/retry/")

    assert again.status_code == 202
    reply = Message.objects.get(pk=reply_id)
    assert (reply.status, reply.content, reply.charged_to) == ("complete", "Lima.", subject)
    counter = TokenCounter.objects.get(subject=subject, day=usage.today())
    assert (counter.used, counter.reserved) == (50, 0)


@pytest.fixture
def too_large_exchange(owner, owner_client, eager_tasks):
    """A chat whose first question can never fit its bot's budget (B 100): refused with 422."""
    from tests.factories import BotFactory, SessionFactory

    bot = BotFactory(owner=owner, context_window=300, max_output_tokens=200)
    session = SessionFactory(user=owner, bot=bot)
    first = _send(owner_client, session, "word " * 400)
    assert first.status_code == 422
    return session, first.json()["error"]["details"]


@pytest.mark.parametrize("wait", [False, True])
def test_the_same_oversized_question_sent_again_is_refused_again_at_once(
    owner_client, too_large_exchange, wait
):
    """It was taken for a Retry and answered 202 without ``wait``: its reply went back to
    pending, a turn ran, and it failed again later for the same reason."""
    session, first = too_large_exchange
    again = _send(owner_client, session, "word " * 400, wait=wait)
    assert again.status_code == 422
    error = again.json()["error"]
    assert error["code"] == "context_too_large"
    assert error["details"]["user_message"]["id"] == first["user_message"]["id"]
    assert error["details"]["assistant_message"]["id"] == first["assistant_message"]["id"]
    assert error["details"]["assistant_message"]["status"] == "failed"
    assert [row[3] for row in _transcript(session)] == ["complete", "failed"]


def test_the_retry_endpoint_refuses_an_oversized_question_at_once(owner_client, too_large_exchange):
    session, first = too_large_exchange
    reply_id = first["assistant_message"]["id"]
    again = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert again.status_code == 422
    assert again.json()["error"]["code"] == "context_too_large"
    assert again.json()["error"]["details"]["assistant_message"]["id"] == reply_id
    reply = Message.objects.get(pk=reply_id)
    assert (reply.status, reply.error_code) == ("failed", "context_too_large")


def test_an_edit_that_can_never_fit_is_refused_as_its_send_would_be(
    owner, owner_client, eager_tasks
):
    """An edit's new text over the budget: 422 context_too_large, as a send of it is, with the
    branch, its stored question and its failed reply in ``details`` (it answered 201)."""
    from tests.factories import BotFactory, SessionFactory, message_add

    bot = BotFactory(owner=owner, context_window=300, max_output_tokens=200)
    session = SessionFactory(user=owner, bot=bot)
    question = message_add(session, role="user", content="Short question")
    message_add(session, role="assistant", content="Short answer.", reply_to=question, bot=bot)
    edited = owner_client.post(
        f"/api/v1/messages/{question.pk}/edit/", {"content": "word " * 400}, format="json"
    )
    assert edited.status_code == 422, edited.json()
    error = edited.json()["error"]
    assert error["code"] == "context_too_large"
    branch_id = error["details"]["session"]["id"]
    assert branch_id != session.pk
    assert error["details"]["user_message"]["content"] == "word " * 400
    assert error["details"]["assistant_message"]["status"] == "failed"
    assert [row[3] for row in _transcript(ChatSession.objects.get(pk=branch_id))] == [
        "complete",
        "failed",
    ]


def test_a_retry_of_a_reply_another_retry_just_reran_answers_it_as_it_runs(
    owner_client, fake_session, fake_openai, failed_exchange
):
    """Two Retries at once (a double click, two tabs): the second finds the reply running again
    and answers 202 with it, nothing run twice; it answered 400 'Only a failed or interrupted
    reply can be retried', as if the reply could not be retried at all."""
    from bots import transitions

    reply_id = failed_exchange["assistant_message"]["id"]
    served = len(fake_openai.requests)
    assert transitions.reply_rerun(message_id=reply_id, model="openai/fake-model")  # the first
    second = owner_client.post(f"/api/v1/messages/{reply_id}/retry/")
    assert second.status_code == 202, second.json()
    assert (
        second.json()["assistant_message"]["id"],
        second.json()["assistant_message"]["status"],
    ) == (
        reply_id,
        "pending",
    )
    assert len(fake_openai.requests) == served
    assert len(_transcript(fake_session)) == 2
