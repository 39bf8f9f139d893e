"""API keys: the REST endpoints (docs/openai-api.md) and keys on /api/v1/ (read or full)."""

import datetime as dt
import logging
import sys

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from openai_api.models import ApiKey
from tests.factories import BotFactory
from tests.openai_api.conftest import completion_post

pytestmark = pytest.mark.django_db


def _bearer(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {key}")
    return client


def test_create_shows_the_key_once_and_stores_only_its_hash(owner_client, owner, bot):
    response = owner_client.post(
        "/api/v1/api-keys/",
        {"name": "editor", "bots": [bot.pk], "daily_token_limit": 5000, "access": "read"},
        format="json",
    )
    assert response.status_code == 201
    # shown once: no cache keeps it (it had no Cache-Control)
    assert (response["Cache-Control"], response["Pragma"]) == ("no-store", "no-cache")
    body = response.json()
    raw = body.pop("key")
    prefix = raw.split(".")[0]
    assert body == {
        "id": prefix,
        "name": "editor",
        "prefix": prefix,
        "bots": [bot.pk],
        "expires_at": None,
        "daily_token_limit": 5000,
        "access": "read",
        "last_used_at": None,
        "created_at": body["created_at"],
    }
    row = ApiKey.objects.get(prefix=prefix)
    assert raw not in row.hashed_key and raw not in row.id
    assert row.hashed_key.startswith("sha512$$")
    listing = owner_client.get("/api/v1/api-keys/").json()
    assert [k["id"] for k in listing] == [prefix]
    assert "key" not in listing[0]


def test_bad_fields_are_refused_and_nothing_is_created(owner_client, other_user):
    foreign = BotFactory(owner=other_user)  # private bot of another user
    cases = [
        ({"name": ""}, "name"),
        ({"name": "a\x00b"}, "name"),
        ({"name": "x" * 51}, "name"),
        ({"name": "k", "bots": [foreign.pk]}, "bots"),
        ({"name": "k", "bots": []}, "bots"),
        ({"name": "k", "bots": "1"}, "bots"),
        ({"name": "k", "daily_token_limit": 0}, "daily_token_limit"),
        ({"name": "k", "access": "admin"}, "access"),
        ({"name": "k", "expires_at": "2001-01-01T00:00:00Z"}, "expires_at"),
    ]
    for data, field in cases:
        response = owner_client.post("/api/v1/api-keys/", data, format="json")
        assert response.status_code == 400, data
        assert response.json()["error"]["code"] == "validation_error"
        assert field in response.json()["error"]["details"], data
    assert ApiKey.objects.count() == 0


def test_revoke_is_for_good_and_another_users_key_is_not_found(owner_client, other_client, owner):
    raw = owner_client.post("/api/v1/api-keys/", {"name": "k"}, format="json").json()["key"]
    prefix = raw.split(".")[0]
    assert _bearer(raw).get("/api/v1/bots/").status_code == 200
    assert other_client.delete(f"/api/v1/api-keys/{prefix}/").status_code == 404
    assert ApiKey.objects.get(prefix=prefix).revoked is False
    assert owner_client.delete(f"/api/v1/api-keys/{prefix}/").status_code == 204
    response = _bearer(raw).get("/api/v1/bots/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert owner_client.delete(f"/api/v1/api-keys/{prefix}/").status_code == 404
    assert owner_client.get("/api/v1/api-keys/").json() == []


def test_read_key_reads_full_key_writes_and_no_key_manages_keys(owner_client, owner):
    read = owner_client.post("/api/v1/api-keys/", {"name": "r", "access": "read"}, format="json")
    full = owner_client.post("/api/v1/api-keys/", {"name": "f"}, format="json")
    read_client, full_client = _bearer(read.json()["key"]), _bearer(full.json()["key"])
    assert read_client.get("/api/v1/bots/").status_code == 200
    refused = read_client.post("/api/v1/bots/", {"name": "New"}, format="json")
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "permission_denied"
    assert owner.bots.count() == 0
    assert full_client.post("/api/v1/bots/", {"name": "New"}, format="json").status_code == 201
    assert owner.bots.count() == 1
    # A key never mints or revokes keys, full or not.
    minted = full_client.post("/api/v1/api-keys/", {"name": "x"}, format="json")
    assert minted.status_code == 403
    assert ApiKey.objects.count() == 2
    assert full_client.delete(f"/api/v1/api-keys/{read.json()['id']}/").status_code == 403


def test_expired_key_is_refused_and_last_used_is_stamped(owner):
    from openai_api.keys import key_create

    key, raw = key_create(user=owner, name="soon", expires_at=timezone.now() + dt.timedelta(1))
    assert _bearer(raw).get("/api/v1/bots/").status_code == 200
    key.refresh_from_db()
    assert key.last_used_at is not None
    ApiKey.objects.filter(pk=key.pk).update(expiry_date=timezone.now() - dt.timedelta(seconds=1))
    assert _bearer(raw).get("/api/v1/bots/").status_code == 401
    assert _bearer(raw + "x").get("/api/v1/bots/").status_code == 401
    assert _bearer("nodot").get("/api/v1/bots/").status_code == 401


def test_chats_an_api_client_started_are_marked_with_the_keys_name(owner_client, owner, bot):
    from bots.models import ChatSession
    from openai_api.identity import conversation_resolve
    from openai_api.keys import key_create

    ui_session = ChatSession.objects.create(user=owner, bot=bot)
    key, _ = key_create(user=owner, name="zed editor")
    api_session = conversation_resolve(
        key=key, bot=bot, history=[], explicit_session_id=None
    ).session
    listing = {s["id"]: s["origin"] for s in owner_client.get("/api/v1/sessions/").json()}
    assert listing == {
        ui_session.pk: None,
        api_session.pk: {"kind": "api", "key_name": "zed editor"},
    }
    # Revoking (or deleting) the key keeps the mark: the chat still says where it came from.
    key.delete()
    assert owner_client.get(f"/api/v1/sessions/{api_session.pk}/").json()["origin"] == {
        "kind": "api",
        "key_name": "zed editor",
    }


def test_model_ids_are_the_bots_own_slugs(owner, other_user):
    """The one slug (``Bot.slug``, docs/rooms.md) names a bot on /v1/ too: an edited slug is the
    new model id; a shared bot whose slug one of the user's bots has is ``<owner>/<slug>``."""
    from chat_platform.errors import NotFound
    from openai_api.keys import key_bot_for_model, key_create, key_models

    mine = BotFactory(owner=owner, name="Writer")
    renamed = BotFactory(owner=owner, name="Second Bot")
    renamed.slug = "helper"
    renamed.save(update_fields=["slug"])
    shared_same = BotFactory(owner=other_user, name="Writer", is_shared=True)
    shared_other = BotFactory(owner=other_user, name="Poet", is_shared=True)
    key, _ = key_create(user=owner, name="editor")
    assert {mid: bot.pk for mid, bot in key_models(key=key).items()} == {
        "writer": mine.pk,
        "helper": renamed.pk,
        f"{other_user.username}/writer": shared_same.pk,
        "poet": shared_other.pk,
    }
    assert key_bot_for_model(key=key, model="helper").pk == renamed.pk
    assert key_bot_for_model(key=key, model=f"{other_user.username}/poet").pk == shared_other.pk
    with pytest.raises(NotFound):
        key_bot_for_model(key=key, model="second-bot")  # the name's slug is not the bot's
    with pytest.raises(NotFound):
        key_bot_for_model(key=key, model=f"{owner.username}/writer")  # own bots: the slug alone


def test_a_shared_bots_model_id_stays_when_another_user_shares_one_with_its_slug(owner, other_user):
    """The client used a shared bot by its slug; a third user then shared a bot with the same
    slug, and both became ``<owner>/<slug>``: the working id answered model_not_found. The bot
    shared first keeps the bare slug; the later one is ``<owner>/<slug>``; either is reachable
    by ``<owner>/<slug>``."""
    from openai_api.keys import key_bot_for_model, key_create, key_models
    from tests.factories import UserFactory

    first = BotFactory(owner=other_user, name="Poet", is_shared=True)
    key, _ = key_create(user=owner, name="editor")
    assert key_bot_for_model(key=key, model="poet").pk == first.pk
    third = UserFactory(username="third")
    later = BotFactory(owner=third, name="Poet", is_shared=True)

    assert {mid: bot.pk for mid, bot in key_models(key=key).items()} == {
        "poet": first.pk,
        "third/poet": later.pk,
    }
    assert key_bot_for_model(key=key, model="poet").pk == first.pk
    assert key_bot_for_model(key=key, model=f"{other_user.username}/poet").pk == first.pk
    assert key_bot_for_model(key=key, model="third/poet").pk == later.pk


@pytest.mark.django_db(transaction=True)
def test_a_model_is_retrieved_by_any_id_a_completion_takes(owner, other_user):
    """/v1/models/{id} finds what a completion finds: ``<owner>/<slug>`` of a shared bot listed
    by its bare slug answered model_not_found, while completions took it."""
    from django.test import Client

    from openai_api.keys import key_create

    BotFactory(owner=other_user, name="Poet", is_shared=True)
    _, raw = key_create(user=owner, name="reader")
    qualified = f"{other_user.username}/poet"
    got = Client().get(f"/v1/models/{qualified}", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert (got.status_code, got.json()["id"]) == (200, qualified)
    assert Client().get("/v1/models/poet", HTTP_AUTHORIZATION=f"Bearer {raw}").status_code == 200
    missing = Client().get("/v1/models/nobody/poet", HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "model_not_found")


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("json_lines", [False, True])
def test_a_key_never_reaches_a_log_line_not_even_in_a_traceback(
    capsys, owner, settings, json_lines
):
    """An outage while the key is checked logs a traceback (readable lines in embedded mode,
    JSON in real mode): the frames' locals hold the key's text, and they are never printed."""
    from unittest import mock

    from django.db import OperationalError
    from django.test import Client

    from chat_platform.log_config import configure_logging
    from openai_api.keys import key_create

    _, raw = key_create(user=owner, name="editor")
    # The handlers the session's logging writes through, put back afterwards: configuring again
    # in `finally` would bind them to capsys's stream, closed after this test, and every later
    # log line of this process would fail with "I/O operation on closed file" (printing the
    # record, arguments and exception chain unredacted to stderr).
    root = logging.getLogger()
    session_handlers = root.handlers[:]
    configure_logging(level="INFO", json=json_lines)  # onto the stream capsys holds
    try:
        with mock.patch.object(
            ApiKey.objects, "get_from_key", side_effect=OperationalError("database is down")
        ):
            response = Client().get("/v1/models", HTTP_AUTHORIZATION=f"Bearer {raw}")
        logged = capsys.readouterr().err
    finally:
        configure_logging(level=settings.LOG_LEVEL, json=settings.LOG_JSON)
        root.handlers[:] = session_handlers
    assert root.handlers[0].stream is not sys.stderr  # not capsys's stream
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "service_unavailable"
    assert "openai_api_service_unavailable" in logged and "database is down" in logged
    assert "Traceback" in logged or "traceback" in logged.lower()
    assert raw not in logged and raw.split(".", 1)[1] not in logged


@pytest.mark.django_db(transaction=True)
def test_a_call_that_outwaits_its_reply_names_its_chat_and_asks_not_to_be_retried(
    owner, settings, monkeypatch
):
    """A 504 carried no X-Session-Id, and the SDK's automatic retry of a 5xx stored the
    question a second time (two pending replies). It names the chat the reply is still being
    written in, and says ``x-should-retry: false``, which the SDK honours."""

    from bots.models import ChatSession, Message
    from openai_api.keys import key_create
    from turns import dispatch

    settings.CHAT_WAIT_TIMEOUT_SECONDS = 0.2
    monkeypatch.setattr(dispatch, "turn_dispatch", lambda message_id: True)  # never runs
    BotFactory(owner=owner, name="Slow", model="openai/fake-model")
    _, raw = key_create(user=owner, name="slow")
    body = {"model": "slow", "messages": [{"role": "user", "content": "Take your time."}]}
    late = completion_post(raw, body)
    assert late.status_code == 504
    assert late["x-should-retry"] == "false"
    session = ChatSession.objects.get(user=owner)
    assert late["X-Session-Id"] == str(session.pk)
    assert late.json()["error"]["code"] == "timeout"
    assert Message.objects.filter(session=session, status="pending").count() == 1


@pytest.mark.django_db(transaction=True)
def test_an_empty_reply_is_linked_and_its_conversation_goes_on(owner, fake_openai, eager_tasks):
    """A reply that completed with no text wrote no links (nor its question's), so the client's
    next call, resending it, started a chat of its own."""

    from bots.models import ChatSession
    from openai_api.keys import key_create
    from tests.fakeopenai import Reply

    BotFactory(owner=owner, name="Quiet", model="openai/fake-model", api_base=fake_openai.url)
    _, raw = key_create(user=owner, name="quiet")
    fake_openai.script(Reply(text=""), Reply(text="Now I speak."))

    def call(messages):
        return completion_post(raw, {"model": "quiet", "messages": messages})

    question = {"role": "user", "content": "Say nothing."}
    first = call([question])
    assert first.status_code == 200, first.json()
    assert first.json()["choices"][0]["message"]["content"] == ""
    second = call(
        [question, {"role": "assistant", "content": ""}, {"role": "user", "content": "Now?"}]
    )
    assert second.status_code == 200, second.json()
    assert second["X-Session-Id"] == first["X-Session-Id"]
    assert ChatSession.objects.filter(user=owner).count() == 1
