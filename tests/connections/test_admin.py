"""The admin: the key is a write-only password field, encrypted like over the API."""

import pytest

from connections import crypto
from connections.models import Connection
from tests.connections.conftest import SECRET_API_KEY

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser(django_user_model):
    return django_user_model.objects.create_superuser("root", "root@example.com", "pw")


def test_the_admin_stores_the_key_encrypted_and_never_shows_it(client, superuser):
    client.force_login(superuser)
    response = client.post(
        "/admin/connections/connection/add/",
        {
            "name": "Admin made",
            "kind": "openai",
            "provider": "",
            "base_url": "http://127.0.0.1:9/v1",
            "api_key": SECRET_API_KEY,
            "api_key_env": "",
            "public": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    connection = Connection.objects.get(name="Admin made")
    assert crypto.key_decrypt(connection.api_key_encrypted) == SECRET_API_KEY
    assert connection.created_by == superuser
    page = client.get(f"/admin/connections/connection/{connection.pk}/change/").content.decode()
    assert SECRET_API_KEY not in page
    assert connection.api_key_encrypted not in page


def test_the_admin_refuses_what_the_api_refuses(client, superuser):
    client.force_login(superuser)
    response = client.post(
        "/admin/connections/connection/add/",
        {"name": "Bad", "kind": "openai", "base_url": "http://u:p@x.test/v1", "api_key_env": ""},
    )
    assert response.status_code == 200
    assert "plain http(s) URL" in response.content.decode()
    assert not Connection.objects.filter(name="Bad").exists()


def _bot_admin_data(**fields):
    """The admin's add form as a browser posts it: every bot field at its default."""
    from django.forms.models import model_to_dict

    from bots.models import Bot
    from turns.services.bot import BOT_FIELDS

    data = {}
    for name, value in {**model_to_dict(Bot(), fields=BOT_FIELDS), **fields}.items():
        if value is True:
            data[name] = "on"
        elif value is False or value is None:
            continue
        elif isinstance(value, list):
            data[name] = __import__("json").dumps(value)
        else:
            data[name] = value
    return data


def test_staff_put_a_bot_on_a_connection_in_the_admin(client, superuser, fake_connection):
    from bots.models import Bot

    client.force_login(superuser)
    response = client.post(
        "/admin/bots/bot/add/",
        _bot_admin_data(
            owner=superuser.pk, name="Admin bot", connection=fake_connection.pk, model="fake-model"
        ),
    )
    assert response.status_code == 302, response.content.decode()[:3000]
    bot = Bot.objects.get(name="Admin bot")
    assert (bot.connection_id, bot.model) == (fake_connection.pk, "openai/fake-model")
    # a connection that does not exist is refused, and nothing is saved
    refused = client.post(
        "/admin/bots/bot/add/",
        _bot_admin_data(
            owner=superuser.pk, name="Wrong bot", connection=999999, model="fake-model"
        ),
    )
    assert refused.status_code == 200
    assert "Select a valid choice" in refused.content.decode()
    assert not Bot.objects.filter(name="Wrong bot").exists()


def test_the_bot_admin_offers_the_discovered_models_as_a_list(client, superuser, fake_connection):
    """Staff pick a bot's model from the list discovered on the connections (docs/connections.md),
    and may still type any litellm model string."""
    client.force_login(superuser)
    page = client.get("/admin/bots/bot/add/").content.decode()

    assert 'list="bot-model-suggestions"' in page
    start = page.index('<datalist id="bot-model-suggestions">')
    listed = page[start : page.index("</datalist>", start)]
    assert '<option value="openai/fake-model">' in listed
    assert '<option value="builtin/recall">' in listed
