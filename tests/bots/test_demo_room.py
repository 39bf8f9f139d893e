"""The seeded demo room as a newcomer meets it (docs/rooms.md "Demo and bench"): "hello" gets
one plain answer from each built-in bot, and nothing else — no quote of the room header, no
"mentioned itself" line, no hand-over set off by an echo."""

from io import StringIO

import pytest
from django.core.management import call_command

from bots.management.commands.seed_demo import DEMO_ROOM_TITLE
from bots.models import ChatSession, Message
from chat_platform.llm.builtin.recall import NO_MATCH_TEXT, NOTED_TEXT
from tests.conftest import _client_for

pytestmark = pytest.mark.django_db(transaction=True)


def test_the_demo_rooms_first_exchanges_are_clean(
    settings, django_user_model, eager_tasks, django_capture_on_commit_callbacks
):
    settings.DEBUG = True
    call_command("seed_demo", stdout=StringIO())
    demo = django_user_model.objects.get(username="demo")
    room = ChatSession.objects.get(user=demo, title=DEMO_ROOM_TITLE)
    client = _client_for(demo)
    for text in ("hello", "My name is Ann and I like green tea."):
        with django_capture_on_commit_callbacks(execute=True):
            sent = client.post(
                f"/api/v1/sessions/{room.pk}/messages/",
                {"content": text, "wait": True},
                format="json",
            )
        assert sent.status_code == 201, sent.json()
    roomy, tight = "recall-built-in", "recall-tight-budget-built-in"
    assert [
        (m.seq, m.role, m.kind, m.bot.slug if m.bot else None, m.content, m.status)
        for m in Message.objects.filter(session=room).select_related("bot").order_by("seq")
    ] == [
        (1, "user", "chat", None, "hello", "complete"),
        (2, "assistant", "chat", roomy, NO_MATCH_TEXT, "complete"),
        (3, "assistant", "chat", tight, NO_MATCH_TEXT, "complete"),
        (4, "user", "chat", None, "My name is Ann and I like green tea.", "complete"),
        (5, "assistant", "chat", roomy, NOTED_TEXT, "complete"),
        (6, "assistant", "chat", tight, NOTED_TEXT, "complete"),
    ]
