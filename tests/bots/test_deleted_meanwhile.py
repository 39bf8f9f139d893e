"""A chat deleted by one request while another works on it (docs/api.md): an edit or a
regenerate that was checked before the delete, and a `wait: true` send whose reply goes with
the chat, answer 404 `not_found` — not a 500 — and leave nothing behind."""

import pytest

from bots import realtime
from bots.models import ChatSession, Message
from tests.factories import message_add
from turns.services import branch

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def answered(owner, fake_session):
    question = message_add(fake_session, role="user", content="Where is the spare key?")
    reply = message_add(
        fake_session,
        role="assistant",
        content="Under the blue pot.",
        reply_to=question,
        bot=fake_session.bot,
    )
    return question, reply


def _deleted_after_the_check(monkeypatch, session):
    """The chat is deleted right after the request checked it (another request's delete)."""
    checked = branch._check_quota

    def then_deleted(**kwargs):
        checked(**kwargs)
        ChatSession.objects.filter(pk=session.pk).delete()

    monkeypatch.setattr(branch, "_check_quota", then_deleted)


@pytest.mark.parametrize("action", ["edit", "regenerate"])
def test_an_edit_or_regenerate_of_a_chat_deleted_meanwhile_is_not_found(
    owner_client, fake_session, answered, monkeypatch, action
):
    question, reply = answered
    _deleted_after_the_check(monkeypatch, fake_session)
    target, body = (
        (question, {"content": "Where is the car key?"})
        if action == "edit"
        else (
            reply,
            {},
        )
    )
    response = owner_client.post(f"/api/v1/messages/{target.pk}/{action}/", body, "json")
    assert response.status_code == 404, response.content
    assert response.json()["error"]["code"] == "not_found"
    assert ChatSession.objects.count() == 0
    assert Message.objects.count() == 0


def test_a_reply_waited_for_whose_chat_is_deleted_is_not_found(
    owner_client, fake_session, monkeypatch
):
    waited = realtime.wait_reply_finished

    def deleted_meanwhile(message_id, *, is_finished, timeout):
        ChatSession.objects.filter(pk=fake_session.pk).delete()
        return waited(message_id, is_finished=is_finished, timeout=timeout)

    monkeypatch.setattr(realtime, "wait_reply_finished", deleted_meanwhile)
    response = owner_client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/",
        {"content": "Where is the spare key?", "wait": True},
        "json",
    )
    assert response.status_code == 404, response.content
    assert response.json()["error"] == {
        "code": "not_found",
        "message": "The chat was deleted while its reply was being written.",
        "details": {},
    }
