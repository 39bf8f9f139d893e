"""The bot API shows a bot's slug and its owner may set it (docs/bots.md): the model's rule
(lowercase ``[a-z0-9-]``, 1–60, unique per owner), refused with ``validation_error``."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


def test_get_shows_the_slug(owner_client, owner):
    bot = BotFactory(owner=owner, name="Research Helper")
    body = owner_client.get(f"/api/v1/bots/{bot.pk}/").json()
    assert body["slug"] == "research-helper"
    listed = owner_client.get("/api/v1/bots/").json()
    assert [b["slug"] for b in listed if b["id"] == bot.pk] == ["research-helper"]


def test_create_takes_a_slug_or_fills_it_from_the_name(owner_client):
    given = owner_client.post("/api/v1/bots/", {"name": "A", "slug": "writer-2"}, format="json")
    assert given.status_code == 201
    assert given.json()["slug"] == "writer-2"
    derived = owner_client.post("/api/v1/bots/", {"name": "Code Buddy"}, format="json")
    assert derived.json()["slug"] == "code-buddy"


def test_patch_sets_the_slug(owner_client, owner):
    bot = BotFactory(owner=owner, name="Helper")
    response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"slug": "aide"}, format="json")
    assert response.status_code == 200
    assert response.json()["slug"] == "aide"
    bot.refresh_from_db()
    assert bot.slug == "aide"


@pytest.mark.parametrize("value", ["Bad Slug", "UPPER", "a_b", "x" * 61, "-lead", "é"])
def test_patch_refuses_a_bad_slug_and_changes_nothing(owner_client, owner, value):
    bot = BotFactory(owner=owner, name="Helper")
    response = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"slug": value, "name": "Renamed"}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert list(error["details"]) == ["slug"]
    bot.refresh_from_db()
    assert (bot.slug, bot.name) == ("helper", "Helper")


def test_patch_refuses_a_slug_another_of_the_owners_bots_has(owner_client, owner, other_user):
    BotFactory(owner=owner, name="Writer")
    bot = BotFactory(owner=owner, name="Helper")
    response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"slug": "writer"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": response.json()["error"]["message"],
        "details": {"slug": ["Another of your bots already has the slug 'writer'."]},
    }
    bot.refresh_from_db()
    assert bot.slug == "helper"
    # Unique per owner only: another user's bot may share it.
    BotFactory(owner=other_user, name="Other")
    theirs = Bot.objects.get(owner=other_user)
    assert theirs.slug == "other"
    own = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"slug": "other"}, format="json")
    assert own.status_code == 200
    assert own.json()["slug"] == "other"


def test_create_refuses_a_taken_slug(owner_client, owner):
    BotFactory(owner=owner, name="Writer")
    response = owner_client.post("/api/v1/bots/", {"name": "B", "slug": "writer"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "slug": ["Another of your bots already has the slug 'writer'."]
    }
    assert Bot.objects.filter(owner=owner).count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_slug_taken_between_the_check_and_the_save_is_the_same_field_error(
    owner_client, owner, monkeypatch
):
    """Two requests may both pass the check; the constraint then answers, as a field error."""
    import turns.bot_validation

    BotFactory(owner=owner, name="Writer")
    bot = BotFactory(owner=owner, name="Helper")
    monkeypatch.setattr(turns.bot_validation, "check_bot_slug", lambda *, bot, user=None: None)
    response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"slug": "writer"}, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "slug": ["Another of your bots already has the slug 'writer'."]
    }
    bot.refresh_from_db()
    assert bot.slug == "helper"


@pytest.fixture(params=["postgresql", "sqlite"])
def unique_error_wording(request, monkeypatch):
    """The race tests below, with the database's own error and with SQLite's wording of it
    (embedded mode): it names the columns, not the constraint, and answered 500 there."""
    if request.param == "sqlite":
        from django.db import IntegrityError

        save = Bot.save

        def save_worded_as_sqlite(self, *args, **kwargs):
            try:
                return save(self, *args, **kwargs)
            except IntegrityError:
                raise IntegrityError(
                    "UNIQUE constraint failed: bots_bot.owner_id, bots_bot.slug"
                ) from None

        monkeypatch.setattr(Bot, "save", save_worded_as_sqlite)
    return request.param


@pytest.mark.django_db(transaction=True)
def test_a_derived_slug_another_save_took_meanwhile_is_derived_again(
    owner, monkeypatch, unique_error_wording
):
    """Two bots of one name created at once both derived the same next slug; the one that lost
    the race was refused for a slug its user never typed. The loser derives the next one."""
    from bots import models as bot_models
    from turns.services.bot import bot_create

    BotFactory(owner=owner, name="Zed", slug="zed")
    free = bot_models.bot_slug_free
    answers = iter(["zed"])  # the first derivation saw the slug free: the race

    def raced(**kwargs):
        return next(answers, None) or free(**kwargs)

    monkeypatch.setattr(bot_models, "bot_slug_free", raced)
    bot = bot_create(owner=owner, name="Zed")
    assert bot.slug == "zed-2"
    assert sorted(Bot.objects.filter(owner=owner).values_list("slug", flat=True)) == [
        "zed",
        "zed-2",
    ]


@pytest.mark.django_db(transaction=True)
def test_a_slug_the_user_gave_that_another_save_took_is_still_their_error(
    owner, monkeypatch, unique_error_wording
):
    from chat_platform.errors import ValidationFailed
    from turns import bot_validation
    from turns.services.bot import bot_create

    BotFactory(owner=owner, name="Zed", slug="zed")
    # the race
    monkeypatch.setattr(bot_validation, "check_bot_slug", lambda *, bot, user=None: None)
    with pytest.raises(ValidationFailed) as refused:
        bot_create(owner=owner, name="Other", slug="zed")
    assert refused.value.details == {"slug": ["Another of your bots already has the slug 'zed'."]}


@pytest.mark.parametrize("body_format", ["multipart", "urlencoded"])
def test_a_form_encoded_create_keeps_the_switches_defaults(owner_client, body_format):
    """``curl -d name=…`` left every switch it did not name off: DRF reads a missing form
    checkbox as False. Left out, a switch takes the bot's default, as in a JSON body."""
    if body_format == "multipart":
        created = owner_client.post("/api/v1/bots/", {"name": "Form bot"}, format="multipart")
    else:
        created = owner_client.generic(
            "POST",
            "/api/v1/bots/",
            "name=Form+bot&recall_enabled=false",
            content_type="application/x-www-form-urlencoded",
        )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["compaction_enabled"], body["compaction_fallback_extractive"]) == (True, True)
    assert body["recall_enabled"] is (body_format == "multipart")
    assert body["is_shared"] is False


def test_staff_changing_another_users_slug_is_told_whose_bot_has_it(owner, staff):
    """The clash is with the owner's bots: staff read "Another of your bots", which was not."""
    from rest_framework.test import APIClient

    BotFactory(owner=owner, name="Zed", slug="zed")
    edited = BotFactory(owner=owner, name="Other", slug="other", is_shared=True)
    client = APIClient()
    client.force_authenticate(staff)

    response = client.patch(f"/api/v1/bots/{edited.pk}/", {"slug": "zed"}, format="json")

    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "slug": ["Another bot of owner already has the slug 'zed'."]
    }
