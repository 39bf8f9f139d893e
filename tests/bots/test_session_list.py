"""The chat list the page draws (docs/api.md, sessions): every chat of the user, whatever its
bot, each with its bot's id, slug and name; ``?bot=`` still narrows it; a fixed number of
statements however many chats and bots there are."""

import pytest

from tests.factories import BotFactory, SessionFactory

pytestmark = pytest.mark.django_db


def _listed(client, query=""):
    response = client.get(f"/api/v1/sessions/{query}")
    assert response.status_code == 200
    return [(s["title"], s["bot"], s["bot_info"], s["is_room"]) for s in response.json()]


def test_every_chat_is_listed_with_its_bots_name_and_slug(owner, owner_client, other_user):
    ada = BotFactory(owner=owner, name="Ada")
    shared = BotFactory(owner=other_user, name="Grace Hopper", is_shared=True)
    SessionFactory(user=owner, bot=ada, title="First")
    second = SessionFactory(user=owner, bot=shared, title="Second")
    SessionFactory(user=other_user, bot=shared, title="Not mine")
    ada_info = {"id": ada.pk, "slug": "ada", "name": "Ada"}
    grace_info = {"id": shared.pk, "slug": "grace-hopper", "name": "Grace Hopper"}

    assert _listed(owner_client) == [
        ("Second", shared.pk, grace_info, False),
        ("First", ada.pk, ada_info, False),
    ]
    assert _listed(owner_client, f"?bot={ada.pk}") == [("First", ada.pk, ada_info, False)]
    detail = owner_client.get(f"/api/v1/sessions/{second.pk}/").json()
    assert (detail["bot_info"], detail["is_room"]) == (grace_info, False)


def test_the_list_costs_the_same_statements_for_many_chats_and_bots(
    owner, owner_client, django_assert_num_queries
):
    SessionFactory(user=owner, bot=BotFactory(owner=owner))
    owner_client.get("/api/v1/sessions/")  # the token's first use is not the list's cost
    with django_assert_num_queries(2) as few:
        assert len(owner_client.get("/api/v1/sessions/").json()) == 1
    for _ in range(3):
        bot = BotFactory(owner=owner)
        SessionFactory(user=owner, bot=bot)
        SessionFactory(user=owner, bot=bot)
    with django_assert_num_queries(len(few.captured_queries)):
        assert len(owner_client.get("/api/v1/sessions/").json()) == 7
