"""A bot sent to the API with a field it does not have (a misspelt setting) is refused with the
field named, and nothing is made or changed: it was dropped, and the answer looked like success.
The fields a bot answer carries but the API sets itself (``id``, ``owner``, ``created_at``,
``editable``) may be sent back as read (a client that edits the bot it got)."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


def test_create_with_a_misspelt_setting_is_refused_and_makes_nothing(owner_client):
    response = owner_client.post(
        "/api/v1/bots/", {"name": "Writer", "compaction_treshold": 5000}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"] == {"compaction_treshold": ["Unknown field."]}
    assert not Bot.objects.filter(name="Writer").exists()


def test_patch_with_a_misspelt_setting_is_refused_and_changes_nothing(owner_client, owner):
    bot = BotFactory(owner=owner, name="Helper")
    response = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/",
        {"temperature": 0.2, "memory_index": 0, "recal_enabled": False},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "memory_index": ["Unknown field."],
        "recal_enabled": ["Unknown field."],
    }
    bot.refresh_from_db()
    assert bot.temperature == 0.7
    assert bot.memory_index_size == 50


def test_a_bot_as_read_can_be_sent_back_with_a_change(owner_client, owner):
    bot = BotFactory(owner=owner, name="Helper")
    body = owner_client.get(f"/api/v1/bots/{bot.pk}/").json()
    body["temperature"] = 0.3
    response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", body, format="json")
    assert response.status_code == 200
    assert response.json()["temperature"] == 0.3
    assert response.json()["owner"] == owner.pk
