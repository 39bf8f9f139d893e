"""Every model name a user sets on a bot that uses a connection (``model``, ``allowed_models``,
``compaction_model``, ``embedding_model``) passes the one rule of ``turns.bot_validation``: a
non-staff user names only models the connection lists (docs/connections.md)."""

import pytest

from bots.models import Bot

pytestmark = pytest.mark.django_db(transaction=True)

UNLISTED = "openai/o1-pro-UNLISTED"


@pytest.fixture
def conn_bot(owner, owner_client, fake_connection):
    fake_connection.users.add(owner)
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "Conn bot", "connection": fake_connection.pk, "model": "fake-model"},
        format="json",
    )
    assert response.status_code == 201, response.json()
    return Bot.objects.get(pk=response.json()["id"])


def _stored(bot: Bot) -> tuple:
    bot.refresh_from_db()
    return (bot.model, bot.allowed_models, bot.compaction_model, bot.embedding_model)


def test_unlisted_names_are_refused_for_every_field_and_nothing_is_called(
    owner_client, conn_bot, fake_openai
):
    before = _stored(conn_bot)
    calls = len(fake_openai.requests)
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/",
        {
            "allowed_models": [UNLISTED],
            "compaction_model": UNLISTED,
            "embedding_model": "openai/text-embedding-UNLISTED",
        },
        format="json",
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    shown = "Not a model of the connection Fake: pick one of fake-model."
    assert error["details"] == {
        "allowed_models": [f"{UNLISTED}: {shown}"],
        "compaction_model": [shown],
        "embedding_model": [shown],
    }
    assert _stored(conn_bot) == before
    assert len(fake_openai.requests) == calls


@pytest.mark.parametrize(
    "value",
    [[1, 2, {"a": 1}], "fake-model", None, ["fake-model", "fake-model"], [""]],
    ids=["not-strings", "not-a-list", "null", "twice", "blank"],
)
def test_allowed_models_of_a_connection_bot_is_a_list_of_names(owner_client, conn_bot, value):
    before = _stored(conn_bot)
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/", {"allowed_models": value}, format="json"
    )
    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert (error["code"], list(error["details"])) == ("validation_error", ["allowed_models"])
    assert _stored(conn_bot) == before


def test_a_null_in_a_multipart_patch_is_a_validation_error(owner_client, conn_bot):
    before = _stored(conn_bot)
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/",
        {"allowed_models": "null"},
        format="multipart",
    )
    assert response.status_code == 400, response.content
    error = response.json()["error"]
    assert (error["code"], list(error["details"])) == ("validation_error", ["allowed_models"])
    assert _stored(conn_bot) == before


def test_listed_names_are_accepted_and_stored_as_model_strings(owner_client, conn_bot):
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/",
        {"allowed_models": ["fake-model"], "compaction_model": "fake-model"},
        format="json",
    )
    assert response.status_code == 200, response.json()
    assert _stored(conn_bot) == (
        "openai/fake-model",
        ["openai/fake-model"],
        "openai/fake-model",
        "builtin/embed",  # the default: the built-in embedding model is allowed with a connection
    )
    # a built-in compaction model stays allowed
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/", {"compaction_model": "builtin/extractive"}, format="json"
    )
    assert response.status_code == 200, response.json()


def test_staff_may_name_any_model_of_the_provider(staff_client, fake_connection):
    response = staff_client.post(
        "/api/v1/bots/",
        {
            "name": "Staff bot",
            "connection": fake_connection.pk,
            "model": "fake-model",
            "allowed_models": [UNLISTED],
            "compaction_model": UNLISTED,
            "embedding_model": "openai/text-embedding-UNLISTED",
        },
        format="json",
    )
    assert response.status_code == 201, response.json()
    assert _stored(Bot.objects.get(pk=response.json()["id"])) == (
        "openai/fake-model",
        [UNLISTED],
        UNLISTED,
        "openai/text-embedding-UNLISTED",
    )


def test_what_staff_set_stays_while_the_owner_edits_another_field(owner_client, conn_bot):
    # as the admin leaves it when staff set unlisted names on the owner's bot
    Bot.objects.filter(pk=conn_bot.pk).update(allowed_models=[UNLISTED], compaction_model=UNLISTED)
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/", {"temperature": 0.2}, format="json"
    )
    assert response.status_code == 200, response.json()
    # but a list the owner changes is checked whole, as ``model`` is when changed
    response = owner_client.patch(
        f"/api/v1/bots/{conn_bot.pk}/",
        {"allowed_models": [UNLISTED, "openai/gpt-UNLISTED-2"]},
        format="json",
    )
    assert response.status_code == 400, response.json()
    shown = "Not a model of the connection Fake: pick one of fake-model."
    assert response.json()["error"]["details"] == {
        "allowed_models": [f"{UNLISTED}: {shown}", f"openai/gpt-UNLISTED-2: {shown}"]
    }
    assert _stored(conn_bot)[1:3] == ([UNLISTED], UNLISTED)
