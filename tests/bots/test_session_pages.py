"""Chat titles (from the first message, rename) and the chat pages of docs/architecture.md."""

import pytest
from django.test import Client

from bots.models import ChatSession, Message
from tests.factories import SessionFactory, message_add
from turns.services.session import session_title_from_text

pytestmark = pytest.mark.django_db


def _send(client, session, content, callbacks_fixture):
    # The turn is scheduled on commit; these tests look only at what the send itself wrote.
    with callbacks_fixture(execute=False):
        return client.post(
            f"/api/v1/sessions/{session.pk}/messages/", {"content": content}, format="json"
        )


@pytest.mark.parametrize(
    ("text", "title"),
    [
        ("Plan a trip to Lisbon", "Plan a trip to Lisbon"),
        ("\n\n   first   line  \nsecond line", "first line"),
        ("word " * 30, "word word word word word word word word word word word word…"),
        ("x" * 80, "x" * 59 + "…"),
        ("   \n  ", ""),
    ],
)
def test_title_from_text(text, title):
    assert session_title_from_text(text) == title


def test_first_message_titles_a_blank_chat_once(
    owner_client, owner, bot, django_capture_on_commit_callbacks
):
    session = SessionFactory(user=owner, bot=bot, title="")
    response = _send(
        owner_client,
        session,
        "  How do tides work?\nAnd why twice a day?",
        django_capture_on_commit_callbacks,
    )
    assert response.status_code == 202
    session.refresh_from_db()
    assert session.title == "How do tides work?"
    assert owner_client.get(f"/api/v1/sessions/{session.pk}/").json()["title"] == (
        "How do tides work?"
    )

    _send(owner_client, session, "A second question", django_capture_on_commit_callbacks)
    session.refresh_from_db()
    assert session.title == "How do tides work?"


def test_first_message_keeps_a_given_title(
    owner_client, owner, bot, django_capture_on_commit_callbacks
):
    session = SessionFactory(user=owner, bot=bot, title="Named by me")
    _send(owner_client, session, "hello", django_capture_on_commit_callbacks)
    session.refresh_from_db()
    assert session.title == "Named by me"


def test_compact_command_does_not_title_the_chat(
    owner_client, owner, bot, django_capture_on_commit_callbacks
):
    session = SessionFactory(user=owner, bot=bot, title="")
    response = _send(owner_client, session, "/compact", django_capture_on_commit_callbacks)
    assert response.status_code == 200
    session.refresh_from_db()
    assert session.title == ""


def test_rename(owner_client, chat_session):
    before = ChatSession.objects.values_list("updated_at", flat=True).get(pk=chat_session.pk)
    response = owner_client.patch(
        f"/api/v1/sessions/{chat_session.pk}/", {"title": "  Trip   notes "}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {
        "id": chat_session.pk,
        "bot": chat_session.bot_id,
        "bot_info": {
            "id": chat_session.bot_id,
            "slug": chat_session.bot.slug,
            "name": chat_session.bot.name,
        },
        "is_room": False,
        "title": "Trip notes",
        "created_at": response.json()["created_at"],
        "branch_of": None,
        "branch_seq": None,
        "origin": None,
        "model_override": "",
        "extra_instruction": "",
        "reply_mode": "mentioned",
    }
    chat_session.refresh_from_db()
    assert chat_session.title == "Trip notes"
    # A rename is not activity: "/" still opens the chat used last.
    assert chat_session.updated_at == before

    cleared = owner_client.patch(
        f"/api/v1/sessions/{chat_session.pk}/", {"title": ""}, format="json"
    )
    assert (cleared.status_code, cleared.json()["title"]) == (200, "")


@pytest.mark.parametrize(
    "body",
    [
        '{"title": "bad\\u0000title"}',
        '{"title": "bad\\ud800title"}',
        '{"title": "%s"}' % ("x" * 201),
        '{"title": null}',
        "{}",
    ],
)
def test_rename_refuses_bad_titles(owner_client, chat_session, body):
    response = owner_client.generic(
        "PATCH", f"/api/v1/sessions/{chat_session.pk}/", body, content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert list(response.json()["error"]["details"]) == ["title"]
    chat_session.refresh_from_db()
    assert chat_session.title == "test session"


def test_rename_someone_elses_chat_is_not_found(other_client, chat_session):
    response = other_client.patch(
        f"/api/v1/sessions/{chat_session.pk}/", {"title": "mine now"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    chat_session.refresh_from_db()
    assert chat_session.title == "test session"


# --- pages ------------------------------------------------------------------------------------


def _browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_pages_need_a_login(chat_session):
    for path in ("/", f"/chat/{chat_session.pk}/", "/chat/new/"):
        response = Client().get(path)
        assert (response.status_code, response["Location"]) == (
            302,
            f"/accounts/login/?next={path}",
        )


def test_home_opens_the_chat_used_last(owner, bot):
    older = SessionFactory(user=owner, bot=bot)
    newer = SessionFactory(user=owner, bot=bot)
    message_add(older, role=Message.Role.USER, content="bump")
    ChatSession.objects.filter(pk=older.pk).update(updated_at=newer.updated_at.replace(year=2100))
    response = _browser(owner).get("/")
    assert (response.status_code, response["Location"]) == (302, f"/chat/{older.pk}/")


def test_home_without_chats_is_a_new_chat(owner):
    response = _browser(owner).get("/")
    assert response.status_code == 200
    assert b'data-session-id=""' in response.content
    assert "csrftoken" in response.cookies


def test_chat_page_names_its_chat_and_bot(owner, chat_session):
    response = _browser(owner).get(f"/chat/{chat_session.pk}/")
    assert response.status_code == 200
    assert f'data-session-id="{chat_session.pk}"'.encode() in response.content
    assert f'data-bot-id="{chat_session.bot_id}"'.encode() in response.content
    assert "csrftoken" in response.cookies


def test_someone_elses_or_a_missing_chat_page_is_404(other_user, chat_session):
    assert _browser(other_user).get(f"/chat/{chat_session.pk}/").status_code == 404
    assert _browser(other_user).get("/chat/999999/").status_code == 404


def test_new_chat_page(owner, chat_session):
    response = _browser(owner).get("/chat/new/")
    assert response.status_code == 200
    assert b'data-session-id=""' in response.content
