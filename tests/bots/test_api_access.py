"""REST surface of bots and sessions: shapes, the error contract, and access chokepoints."""

import pytest
from rest_framework.test import APIClient

from bots.models import Bot, ChatSession, Message
from tests.factories import BotFactory, message_add

pytestmark = pytest.mark.django_db


def test_token_auth_issues_token_and_rejects_bad_password(owner):
    client = APIClient()
    ok = client.post(
        "/api/v1/auth/token/", {"username": "owner", "password": "pw-123456"}, format="json"
    )
    assert ok.status_code == 200
    assert len(ok.json()["token"]) == 40

    bad = client.post("/api/v1/auth/token/", {"username": "owner", "password": "x"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "validation_error"


def test_anonymous_requests_get_not_authenticated():
    response = APIClient().get("/api/v1/bots/")
    assert response.status_code == 401
    assert response.json() == {
        "error": {
            "code": "not_authenticated",
            "message": "Authentication credentials were not provided.",
            "details": {},
        }
    }


def test_bot_list_shows_own_and_shared_only(owner_client, owner, other_user):
    mine = BotFactory(owner=owner, name="mine")
    shared = BotFactory(owner=other_user, name="shared", is_shared=True)
    BotFactory(owner=other_user, name="private")
    response = owner_client.get("/api/v1/bots/")
    assert response.status_code == 200
    assert sorted(b["id"] for b in response.json()) == sorted([mine.pk, shared.pk])


def test_bot_create_has_contract_defaults(owner_client, owner):
    response = owner_client.post("/api/v1/bots/", {"name": "Helper"}, format="json")
    assert response.status_code == 201
    body = response.json()
    expected = {
        "name": "Helper",
        "system_prompt": "",
        "model": "builtin/recall",
        "api_base": "",
        "api_key_env": "",
        "temperature": 0.7,
        "max_output_tokens": 1024,
        "context_window": 0,
        "is_shared": False,
        "compaction_enabled": True,
        "compaction_threshold": 0,
        "compaction_kept_percent": 40,
        "compaction_model": "",
        "compaction_fallback_extractive": True,
        "memory_index_size": 50,
        "recall_enabled": True,
        "owner": owner.pk,
    }
    assert {k: body[k] for k in expected} == expected
    assert {"id", "created_at"} <= body.keys()


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("temperature", 2.5),
        ("max_output_tokens", 0),
        ("compaction_kept_percent", 0),
        ("compaction_kept_percent", 100),
        ("memory_index_size", 201),
        ("api_key_env", "sk-live-secret value"),
    ],
)
def test_bot_create_rejects_out_of_range_values(owner_client, field, value):
    response = owner_client.post("/api/v1/bots/", {"name": "b", field: value}, format="json")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert field in error["details"]
    assert Bot.objects.count() == 0


def test_shared_bot_is_readable_but_only_owner_or_staff_edit(
    owner_client, other_client, staff_client, owner
):
    bot = BotFactory(owner=owner, is_shared=True, name="team")
    denied = other_client.patch(f"/api/v1/bots/{bot.pk}/", {"name": "hijack"}, format="json")
    assert denied.status_code == 403
    assert denied.json()["error"]["code"] == "permission_denied"
    assert other_client.get(f"/api/v1/bots/{bot.pk}/").json()["name"] == "team"

    by_staff = staff_client.patch(f"/api/v1/bots/{bot.pk}/", {"name": "renamed"}, format="json")
    assert by_staff.status_code == 200
    by_owner = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"compaction_kept_percent": 55}, format="json"
    )
    assert by_owner.status_code == 200
    bot.refresh_from_db()
    assert (bot.name, bot.compaction_kept_percent) == ("renamed", 55)


def test_private_bot_of_another_user_is_not_found(other_client, owner):
    bot = BotFactory(owner=owner, name="secret")
    for method in ("get", "patch", "delete"):
        response = getattr(other_client, method)(f"/api/v1/bots/{bot.pk}/", {}, format="json")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert Bot.objects.filter(pk=bot.pk, name="secret").exists()


def test_session_create_list_and_filter(owner_client, owner):
    a = BotFactory(owner=owner)
    b = BotFactory(owner=owner)
    first = owner_client.post("/api/v1/sessions/", {"bot": a.pk, "title": "one"}, format="json")
    assert first.status_code == 201
    assert set(first.json()) == {
        "id", "bot", "bot_info", "is_room", "title", "created_at", "branch_of", "branch_seq",
        "origin", "model_override", "extra_instruction", "reply_mode",
    }  # fmt: skip
    owner_client.post("/api/v1/sessions/", {"bot": b.pk}, format="json")
    listed = owner_client.get(f"/api/v1/sessions/?bot={a.pk}").json()
    assert [(s["bot"], s["title"]) for s in listed] == [(a.pk, "one")]
    assert len(owner_client.get("/api/v1/sessions/").json()) == 2


def test_session_with_someone_elses_private_bot_is_not_found(other_client, owner, other_user):
    bot = BotFactory(owner=owner)
    response = other_client.post("/api/v1/sessions/", {"bot": bot.pk}, format="json")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert not ChatSession.objects.filter(user=other_user).exists()


def test_other_users_session_is_not_found_everywhere(other_client, chat_session):
    message_add(chat_session, role="user", content="hello")
    base = f"/api/v1/sessions/{chat_session.pk}/"
    for method, path, body in [
        ("get", base, None),
        ("delete", base, None),
        ("get", base + "messages/", None),
        ("post", base + "messages/", {"content": "sneaky"}),
    ]:
        response = getattr(other_client, method)(path, body, format="json")
        assert response.status_code == 404, path
        assert response.json()["error"]["code"] == "not_found"
    assert Message.objects.filter(session=chat_session).count() == 1
    assert ChatSession.objects.filter(pk=chat_session.pk).exists()


def test_session_delete_removes_messages(owner_client, chat_session):
    message_add(chat_session, role="user", content="hello")
    response = owner_client.delete(f"/api/v1/sessions/{chat_session.pk}/")
    assert response.status_code == 204
    assert Message.objects.count() == 0


def test_pin_and_unpin(owner_client, other_client, chat_session):
    message = message_add(chat_session, role="user", content="keep me")
    pinned = owner_client.post(f"/api/v1/messages/{message.pk}/pin/")
    assert pinned.status_code == 200
    assert pinned.json()["pinned"] is True
    assert other_client.post(f"/api/v1/messages/{message.pk}/unpin/").status_code == 404
    message.refresh_from_db()
    assert message.pinned is True
    assert owner_client.post(f"/api/v1/messages/{message.pk}/unpin/").json()["pinned"] is False


def test_messages_after_seq(owner_client, chat_session):
    for text in ["a", "b", "c"]:
        message_add(chat_session, role="user", content=text)
    url = f"/api/v1/sessions/{chat_session.pk}/messages/"
    assert [m["content"] for m in owner_client.get(url).json()] == ["a", "b", "c"]
    assert [m["seq"] for m in owner_client.get(url + "?after_seq=1").json()] == [2, 3]
    bad = owner_client.get(url + "?after_seq=x")
    assert bad.status_code == 400
    assert bad.json()["error"]["details"] == {"after_seq": ["A whole number is required."]}


def test_schema_and_docs_are_served(owner_client):
    schema = owner_client.get("/api/schema/")
    assert schema.status_code == 200
    assert b"/api/v1/sessions/{session_id}/messages/" in schema.content
    docs = owner_client.get("/api/docs/")
    assert docs.status_code == 200
    assert b"swagger" in docs.content.lower()
    assert b"cdn.jsdelivr" not in docs.content


def test_unknown_ids_are_not_found(owner_client):
    for path in [
        "/api/v1/bots/999999/",
        "/api/v1/sessions/999999/",
        "/api/v1/sessions/999999/messages/",
    ]:
        response = owner_client.get(path)
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"


def test_a_session_says_its_reply_mode_in_every_answer(owner_client, chat_session):
    """``reply_mode`` is a session field (docs/rooms.md): GET one and the list show it too; it
    was in a PATCH's answer only, and only when the PATCH set it."""
    url = f"/api/v1/sessions/{chat_session.pk}/"
    assert owner_client.get(url).json()["reply_mode"] == "mentioned"
    listed = owner_client.get("/api/v1/sessions/").json()
    rows = listed["results"] if isinstance(listed, dict) else listed
    assert [s["reply_mode"] for s in rows if s["id"] == chat_session.pk] == ["mentioned"]
    assert (
        owner_client.patch(url, {"title": "T"}, format="json").json()["reply_mode"] == "mentioned"
    )


@pytest.mark.parametrize("big", [2**63, 10**23])
def test_an_id_no_row_can_have_is_not_found_without_a_query(
    owner_client, owner, chat_session, big, django_assert_num_queries
):
    """An id past a 64-bit integer is ``not_found`` before any statement: SQLite (embedded
    mode) cannot bind it and answered 500 (``OverflowError``) on every session road."""
    from bots.queries import session_get_for_user
    from chat_platform.errors import NotFound

    with django_assert_num_queries(0), pytest.raises(NotFound):
        session_get_for_user(user=owner, session_id=big)
    for path in (
        f"/api/v1/sessions/{big}/",
        f"/api/v1/sessions/{big}/messages/",
        f"/api/v1/sessions/?bot={big}",
        f"/api/v1/messages/{big}/context/",
    ):
        response = owner_client.get(path)
        if path.startswith("/api/v1/sessions/?"):
            assert response.status_code == 200 and response.json() in ([], {"results": []}), path
        else:
            assert response.status_code == 404, path
            assert response.json()["error"]["code"] == "not_found", path


def test_a_blank_slug_keeps_the_bots_own_slug(owner_client, owner):
    """Blank means "made from the name": a bot whose own slug is that already keeps it. It
    flipped between ``zed`` and ``zed-2`` at each such PATCH (its own slug counted as taken),
    changing its @handle and /v1 model id."""
    bot = BotFactory(owner=owner, name="Zed")
    assert bot.slug == "zed"
    for _ in range(2):
        response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"slug": ""}, format="json")
        assert response.status_code == 200
        assert response.json()["slug"] == "zed"


def test_what_is_never_sent_to_the_bot_cannot_be_pinned(owner_client, chat_session):
    command = message_add(chat_session, role="user", content="/compact", kind="command")
    notice = message_add(chat_session, role="system", content="Nothing to compact.", kind="notice")
    failed = message_add(chat_session, role="assistant", content="", status="failed")
    for message in (command, notice, failed):
        refused = owner_client.post(f"/api/v1/messages/{message.pk}/pin/")
        assert refused.status_code == 400
        assert refused.json()["error"]["details"] == {
            "message": [
                "Only a message the bot is sent can be pinned: a command, a notice or a failed "
                "reply never is."
            ]
        }
        # One pinned before the rule is unpinned as ever.
        Message.objects.filter(pk=message.pk).update(pinned=True)
        assert owner_client.post(f"/api/v1/messages/{message.pk}/unpin/").json()["pinned"] is False
