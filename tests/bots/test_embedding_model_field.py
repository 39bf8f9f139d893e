"""A bot's ``embedding_model`` (issue 16 item 5): a model field like the others — in the API, the
bot page's Memory section and the admin — checked by the same provider rules as the chat and
compaction models. Its default is the built-in ``builtin/embed`` (issue 33), the only built-in
model that embeds; blank means words only."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


def test_the_api_takes_and_returns_an_embedding_model(owner_client, settings):
    settings.PROVIDER_API_BASES = ["http://models.internal:8080/v1"]
    created = owner_client.post(
        "/api/v1/bots/",
        {
            "name": "Hybrid",
            "api_base": "http://models.internal:8080/v1",
            "embedding_model": "openai/text-embedding-3-small",
        },
        format="json",
    )

    assert created.status_code == 201, created.json()
    assert created.json()["embedding_model"] == "openai/text-embedding-3-small"
    bot = Bot.objects.get(pk=created.json()["id"])
    assert bot.embedding_model == "openai/text-embedding-3-small"
    cleared = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"embedding_model": ""}, format="json")
    assert (cleared.status_code, cleared.json()["embedding_model"]) == (200, "")


def test_a_new_bot_embeds_with_the_built_in_model(owner_client):
    created = owner_client.post("/api/v1/bots/", {"name": "Plain"}, format="json")

    assert (created.status_code, created.json()["embedding_model"]) == (201, "builtin/embed")
    assert Bot.objects.get(pk=created.json()["id"]).embedding_model == "builtin/embed"
    assert Bot().embedding_model == "builtin/embed"


def test_blank_is_kept_and_means_words_only(owner_client):
    created = owner_client.post(
        "/api/v1/bots/", {"name": "Words", "embedding_model": ""}, format="json"
    )

    assert (created.status_code, created.json()["embedding_model"]) == (201, "")
    assert Bot.objects.get(pk=created.json()["id"]).embedding_model == ""


@pytest.mark.parametrize(
    ("model", "message"),
    [
        (
            "builtin/recall",
            "The only built-in embedding model is builtin/embed: name it or a provider's model.",
        ),
        ("openai/text embedding", "A model name has no spaces."),
    ],
)
def test_a_built_in_or_malformed_embedding_model_is_refused_and_nothing_changes(
    owner_client, owner, model, message
):
    bot = BotFactory(owner=owner, name="keep", embedding_model="")
    created = owner_client.post(
        "/api/v1/bots/", {"name": "b", "embedding_model": model}, format="json"
    )
    patched = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"embedding_model": model}, format="json"
    )

    for response in (created, patched):
        assert response.status_code == 400
        error = response.json()["error"]
        assert (error["code"], error["details"]) == (
            "validation_error",
            {"embedding_model": [message]},
        )
    assert list(Bot.objects.values_list("name", "embedding_model")) == [("keep", "")]


def test_a_non_staff_embedding_model_obeys_the_provider_rules(owner_client):
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "b", "embedding_model": "bedrock/amazon.titan-embed-text-v2"},
        format="json",
    )

    assert response.status_code == 400
    details = response.json()["error"]["details"]
    assert list(details) == ["embedding_model"]
    assert details["embedding_model"][0].startswith("Not a provider your bots may use")
    assert Bot.objects.count() == 0


def test_staff_approve_the_embedding_model_they_set(staff_client):
    response = staff_client.post(
        "/api/v1/bots/",
        {"name": "b", "embedding_model": "bedrock/amazon.titan-embed-text-v2"},
        format="json",
    )

    assert response.status_code == 201
    bot = Bot.objects.get(pk=response.json()["id"])
    assert bot.model_trusted("bedrock/amazon.titan-embed-text-v2")


def test_the_bot_page_shows_it_in_the_memory_section(owner, client):
    client.force_login(owner)
    bot = BotFactory(owner=owner, embedding_model="openai/text-embedding-3-small")

    page = client.get(f"/bots/{bot.pk}/").content.decode()

    memory = page[page.index('id="section-memory"') :]
    memory = memory[: memory.index("</fieldset>")]
    assert 'name="embedding_model"' in memory
    assert 'value="openai/text-embedding-3-small"' in memory
    assert "Embedding model (search by meaning)" in memory


def test_the_admin_lists_it_with_the_memory_fields():
    from django.contrib import admin

    model_admin = admin.site._registry[Bot]
    memory = [fields for name, fields in model_admin.fieldsets if "Memory" in name]

    assert memory == [
        {
            "classes": ["collapse"],
            "fields": ["memory_index_size", "recall_enabled", "embedding_model"],
        }
    ]
