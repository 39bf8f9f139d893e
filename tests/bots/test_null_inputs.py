"""No 500 from input: a null in any field of a bot, a chat or a send, as multipart ("null") or
JSON (null), is answered 4xx, never 5xx (docs/security.md); a refused list of models is not
stored."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory, SessionFactory
from turns.services.bot import BOT_FIELDS

pytestmark = pytest.mark.django_db

FORMATS = {"multipart": "null", "json": None}


def test_nulls_in_every_bot_chat_and_send_field_are_never_a_server_error(owner, owner_client):
    bot = BotFactory(owner=owner)
    session = SessionFactory(user=owner, bot=bot)
    models_before = bot.allowed_models
    answers = []
    for fmt, null in FORMATS.items():
        for field in BOT_FIELDS:
            response = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {field: null}, format=fmt)
            answers.append(("bot", field, fmt, response.status_code))
        for field in ("model", "extra_instruction", "reply_mode"):
            response = owner_client.patch(
                f"/api/v1/sessions/{session.pk}/", {field: null}, format=fmt
            )
            answers.append(("session", field, fmt, response.status_code))
        for field in ("client_id", "reply_as", "attachments", "wait"):
            response = owner_client.post(
                f"/api/v1/sessions/{session.pk}/messages/",
                {"content": "/compact", field: null},
                format=fmt,
            )
            answers.append(("send", field, fmt, response.status_code))
    assert [a for a in answers if a[3] >= 500] == []
    assert ("bot", "allowed_models", "multipart", 400) in answers
    assert ("bot", "allowed_models", "json", 400) in answers
    assert Bot.objects.get(pk=bot.pk).allowed_models == models_before
