"""Bots on a connection: picking it and a listed model (API), the call using its key, Check
model, access re-checked, and the data migration's rule."""

import pytest

from bots.model_check import bot_model_check
from bots.models import Bot, Message
from connections.models import Connection
from connections.queries import connection_builtin
from tests.connections.conftest import SECRET_API_KEY
from tests.factories import SessionFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def _bot(client, **body):
    return client.post("/api/v1/bots/", {"name": "Conn bot", **body}, format="json")


def test_a_user_picks_a_listed_model_and_the_turn_uses_the_connection_key(
    owner, owner_client, fake_connection, fake_openai, eager_tasks, capfd
):
    fake_connection.users.add(owner)
    response = _bot(owner_client, connection=fake_connection.pk, model="fake-model")
    assert response.status_code == 201, response.json()
    body = response.json()
    assert (body["connection"], body["model"], body["api_base"]) == (
        fake_connection.pk,
        "openai/fake-model",
        "",
    )
    session = SessionFactory(user=owner, bot=Bot.objects.get(pk=body["id"]))
    fake_openai.script(Reply(text="Via the connection."))
    sent = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "hi", "wait": True}, format="json"
    )
    assert sent.status_code == 201
    assert sent.json()["assistant_message"]["content"] == "Via the connection."
    assert fake_openai.headers[0]["authorization"] == f"Bearer {SECRET_API_KEY}"
    out, err = capfd.readouterr()
    assert SECRET_API_KEY not in out + err


def test_a_provider_echoing_the_key_is_redacted(owner, fake_connection, fake_openai, staff, capfd):
    bot = Bot.objects.create(
        owner=staff, name="b", model="openai/fake-model", connection=fake_connection
    )
    fake_openai.script(Reply(status=400, error_message=f"bad request from key {SECRET_API_KEY}"))
    result = bot_model_check(user=staff, bot_id=bot.pk)
    assert result.ok is False
    assert SECRET_API_KEY not in result.error
    assert "***" in result.error
    out, err = capfd.readouterr()
    assert SECRET_API_KEY not in out + err


def test_check_model_uses_the_connection(staff, fake_connection, fake_openai):
    bot = Bot.objects.create(
        owner=staff, name="b", model="openai/fake-model", connection=fake_connection
    )
    fake_openai.script(Reply(text="ok"))
    result = bot_model_check(user=staff, bot_id=bot.pk)
    assert (result.ok, result.reply) == (True, "ok")
    assert fake_openai.headers[0]["authorization"] == f"Bearer {SECRET_API_KEY}"


def test_a_connection_the_user_may_not_use_is_refused_like_a_missing_one(
    owner_client, fake_connection
):
    for connection_id in (fake_connection.pk, 999999, "x"):
        response = _bot(owner_client, connection=connection_id, model="fake-model")
        assert response.status_code == 400
        assert response.json()["error"]["details"]["connection"] == (
            ["No such connection, or you may not use it."]
            if connection_id != "x"
            else ["A valid integer is required."]
        )
    assert not Bot.objects.exists()


def test_the_model_must_be_one_the_connection_lists(owner, owner_client, fake_connection):
    fake_connection.users.add(owner)
    response = _bot(owner_client, connection=fake_connection.pk, model="other-model")
    assert response.status_code == 400
    assert response.json()["error"]["details"]["model"] == [
        "Not a model of the connection Fake: pick one of fake-model."
    ]
    both = _bot(
        owner_client,
        connection=fake_connection.pk,
        model="fake-model",
        api_key_env="OPENAI_API_KEY",
    )
    assert both.status_code == 400
    assert "connection" in both.json()["error"]["details"]
    assert not Bot.objects.exists()


def test_the_window_fills_in_from_discovery(owner, owner_client, fake_connection):
    fake_connection.users.add(owner)
    Connection.objects.filter(pk=fake_connection.pk).update(
        model_list=[{"id": "fake-model", "context_window": 8192}]
    )
    response = _bot(owner_client, connection=fake_connection.pk, model="fake-model")
    assert response.json()["context_window"] == 8192
    chosen = _bot(
        owner_client, connection=fake_connection.pk, model="fake-model", context_window=4000
    )
    assert chosen.json()["context_window"] == 4000


def test_an_owner_who_lost_access_gets_a_refusal_not_a_call(
    owner, fake_connection, fake_openai, eager_tasks, owner_client
):
    fake_connection.users.add(owner)
    bot_id = _bot(owner_client, connection=fake_connection.pk, model="fake-model").json()["id"]
    fake_connection.users.remove(owner)
    session = SessionFactory(user=owner, bot=Bot.objects.get(pk=bot_id))
    sent = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "hi", "wait": True}, format="json"
    )
    assert sent.status_code == 502
    reply = Message.objects.get(pk=sent.json()["error"]["details"]["assistant_message"]["id"])
    assert reply.status == "failed"
    assert "may no longer use its provider connection" in reply.error_message
    assert fake_openai.requests == []


def test_the_builtin_connection_serves_the_builtin_models(owner_client):
    builtin = connection_builtin()
    response = _bot(owner_client, connection=builtin.pk, model="recall")
    assert response.status_code == 201, response.json()
    assert response.json()["model"] == "builtin/recall"


def test_the_decrypted_key_never_shows_in_a_config_repr(staff, fake_connection):
    from bots.model_config import bot_model_config

    bot = Bot.objects.create(
        owner=staff, name="b", model="openai/fake-model", connection=fake_connection
    )
    config = bot_model_config(bot)
    assert config.api_key == SECRET_API_KEY
    assert SECRET_API_KEY not in repr(config)
    assert (config.api_base, config.api_base_trusted, config.refusal) == (
        fake_connection.base_url,
        True,
        "",
    )
