"""A ``builtin/…`` model name names a built-in model that does that job (docs/models.md): the
chat models ``builtin/recall`` and ``builtin/extractive``, the embedding model ``builtin/embed``.
Any other was saved and then failed every turn (``model_unavailable``), or fell back quietly."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db

CHAT = "the built-in ones are builtin/recall and builtin/extractive."


@pytest.mark.parametrize(
    ("field", "value", "error"),
    [
        ("model", "builtin/embed", f"Not a built-in chat model: {CHAT}"),
        ("model", "builtin/nope", f"Not a built-in chat model: {CHAT}"),
        ("allowed_models", ["builtin/nope"], f"builtin/nope: not a built-in chat model: {CHAT}"),
        ("compaction_model", "builtin/embed", f"Not a built-in summariser: {CHAT}"),
        (
            "embedding_model",
            "BUILTIN/RECALL",
            "The only built-in embedding model is builtin/embed: name it or a provider's model.",
        ),
        (
            "embedding_model",
            "Builtin/Nope",
            "The only built-in embedding model is builtin/embed: name it or a provider's model.",
        ),
    ],
)
def test_a_built_in_name_that_does_not_do_the_job_is_refused(owner_client, field, value, error):
    created = owner_client.post("/api/v1/bots/", {"name": "B", field: value}, format="json")

    assert created.status_code == 400
    assert created.json()["error"]["details"] == {field: [error]}
    assert not Bot.objects.filter(name="B").exists()


def test_a_built_in_name_in_other_letters_is_that_model(owner_client, owner):
    created = owner_client.post(
        "/api/v1/bots/",
        {
            "name": "Caps",
            "model": "BUILTIN/RECALL",
            "allowed_models": ["Builtin/Extractive"],
            "compaction_model": "builtin/EXTRACTIVE",
            "embedding_model": "Builtin/Embed",
        },
        format="json",
    )

    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["model"], body["allowed_models"]) == ("builtin/recall", ["builtin/extractive"])
    assert (body["compaction_model"], body["embedding_model"]) == (
        "builtin/extractive",
        "builtin/embed",
    )


def test_an_edit_is_held_to_the_same_rule(owner_client, owner):
    bot = BotFactory(owner=owner, name="Kept")
    edited = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"model": "builtin/embed"}, format="json"
    )

    assert edited.status_code == 400
    assert edited.json()["error"]["details"] == {"model": [f"Not a built-in chat model: {CHAT}"]}
    bot.refresh_from_db()
    assert bot.model == "builtin/recall"
