"""Deleting a bot (docs/bots.md "Deleting a bot"): the owner's chats with it go with it; other
people's chats with a shared bot are theirs and stay, readable, with the bot retired (it answers
no more, and no one can find it); a room it sat in keeps going without it."""

import pytest
from django.test import Client

from bots.models import Bot, ChatSession, Message, SessionParticipant
from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db


def test_a_shared_bots_deletion_leaves_other_peoples_chats_and_rooms(
    owner, owner_client, other_user, other_client
):
    shared = BotFactory(owner=owner, name="Helper", slug="helper", is_shared=True)
    own = SessionFactory(user=owner, bot=shared)
    theirs = SessionFactory(user=other_user, bot=shared)
    message_add(theirs, role="user", content="Where is the spare key?")
    message_add(theirs, role="assistant", content="Under the blue pot.", bot=shared)
    # A room of the other user's where the shared bot is the default, beside their own bot.
    mine = BotFactory(owner=other_user, name="Mine", slug="mine")
    room = SessionFactory(user=other_user, bot=shared)
    joined = other_client.post(
        f"/api/v1/sessions/{room.pk}/participants/", {"bot": mine.pk}, format="json"
    )
    assert joined.status_code == 201, joined.json()

    deleted = owner_client.delete(f"/api/v1/bots/{shared.pk}/")

    assert deleted.status_code == 204
    assert not ChatSession.objects.filter(pk=own.pk).exists()  # the owner's own chat, as before
    # The other user's chat is still theirs, word for word; the bot answers no more.
    listed = other_client.get(f"/api/v1/sessions/{theirs.pk}/messages/")
    assert listed.status_code == 200
    assert [m["content"] for m in listed.json()] == [
        "Where is the spare key?",
        "Under the blue pot.",
    ]
    # It keeps its handle, as every bot answer shows one (it was "", which no slug may be).
    assert listed.json()[1]["bot"] == {"id": shared.pk, "slug": "helper", "name": "Helper"}
    sent = other_client.post(
        f"/api/v1/sessions/{theirs.pk}/messages/", {"content": "And the car key?"}, format="json"
    )
    assert sent.status_code == 404
    assert (sent.json()["error"]["code"], sent.json()["error"]["message"]) == (
        "not_found",
        "This chat's bot is no longer available to you.",
    )
    assert Message.objects.filter(session=theirs).count() == 2
    # Nobody finds the bot any more, its owner included; its slug is free again.
    for client in (owner_client, other_client):
        assert client.get(f"/api/v1/bots/{shared.pk}/").status_code == 404
        assert shared.pk not in [b["id"] for b in client.get("/api/v1/bots/").json()]
    again = owner_client.post("/api/v1/bots/", {"name": "Helper"}, format="json")
    assert again.status_code == 201 and again.json()["slug"] == "helper"
    # The room goes on with the other user's own bot as its default; the retired one has left.
    room.refresh_from_db()
    assert room.bot_id == mine.pk
    rows = SessionParticipant.objects.filter(session=room).order_by("id")
    assert [(p.bot_id, p.is_default, p.removed_at is not None) for p in rows] == [
        (shared.pk, False, True),
        (mine.pk, True, False),
    ]
    retired = Bot.objects.get(pk=shared.pk)
    assert (retired.is_shared, retired.slug, retired.retired_at is not None) == (
        False,
        "helper",
        True,
    )


def test_a_bot_no_one_else_uses_is_deleted_outright(owner, owner_client):
    bot = BotFactory(owner=owner, is_shared=True)
    chat = SessionFactory(user=owner, bot=bot)
    assert owner_client.delete(f"/api/v1/bots/{bot.pk}/").status_code == 204
    assert not Bot.objects.filter(pk=bot.pk).exists()
    assert not ChatSession.objects.filter(pk=chat.pk).exists()


def test_deleting_the_default_bot_of_the_owners_own_room_keeps_the_room(owner, owner_client):
    """The owner's room with two bots lost both bots' conversation when its default bot was
    deleted: the room goes on with the other bot as its default (docs/bots.md)."""
    first = BotFactory(owner=owner, name="First", slug="first")
    second = BotFactory(owner=owner, name="Second", slug="second")
    alone = SessionFactory(user=owner, bot=first)
    room = SessionFactory(user=owner, bot=first)
    joined = owner_client.post(
        f"/api/v1/sessions/{room.pk}/participants/", {"bot": second.pk}, format="json"
    )
    assert joined.status_code == 201, joined.json()
    message_add(room, role="user", content="Plan the trip.")
    message_add(room, role="assistant", content="Lisbon on Friday.", bot=second)
    browser = Client()
    browser.force_login(owner)
    page = browser.get(f"/bots/{first.pk}/delete/")
    assert "your 1 chat with it" in page.content.decode()

    assert owner_client.delete(f"/api/v1/bots/{first.pk}/").status_code == 204

    assert not ChatSession.objects.filter(pk=alone.pk).exists()
    room.refresh_from_db()
    assert room.bot_id == second.pk
    listed = owner_client.get(f"/api/v1/sessions/{room.pk}/messages/").json()
    assert [m["content"] for m in listed] == ["Plan the trip.", "Lisbon on Friday."]
    rows = SessionParticipant.objects.filter(session=room).order_by("id")
    assert [(p.bot_id, p.is_default, p.removed_at is not None) for p in rows] == [
        (first.pk, False, True),
        (second.pk, True, False),
    ]
    assert owner_client.get(f"/api/v1/bots/{first.pk}/").status_code == 404
