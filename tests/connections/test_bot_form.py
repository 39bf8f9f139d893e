"""The bot form: a connection picked from the user's list, its models offered."""

import pytest

from bots.models import Bot

pytestmark = pytest.mark.django_db


def test_the_form_offers_usable_connections_and_their_models(owner, client, fake_connection, staff):
    from connections.models import Connection

    hidden = Connection.objects.create(name="Hidden", kind="openai", base_url="http://h.test/v1")
    fake_connection.users.add(owner)
    client.force_login(owner)
    page = client.get("/bots/new/").content.decode()
    assert f'<option value="{fake_connection.pk}">Fake</option>' in page
    assert f'<option value="{hidden.pk}">' not in page
    assert '<option value="openai/fake-model">' in page


def test_the_form_saves_a_bot_on_a_connection(owner, client, fake_connection):
    fake_connection.users.add(owner)
    client.force_login(owner)
    response = client.post(
        "/bots/new/",
        {
            "name": "Form bot",
            "connection": fake_connection.pk,
            "model": "fake-model",
            "temperature": "0.7",
            "max_output_tokens": "256",
            "context_window": "0",
            "compaction_enabled": "on",
            "compaction_threshold": "0",
            "compaction_kept_percent": "40",
            "compaction_fallback_extractive": "on",
            "memory_index_size": "50",
            "recall_enabled": "on",
        },
    )
    assert response.status_code == 302, response.content.decode()[:2000]
    bot = Bot.objects.get(name="Form bot")
    assert (bot.connection_id, bot.model) == (fake_connection.pk, "openai/fake-model")
