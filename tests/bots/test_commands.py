"""Management commands and the orphan sweep (docs/memory.md, §13)."""

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from bots.models import Bot, ChatSession, Message
from bots.transitions import session_context_recount
from chat_platform.celery_app import app as celery_app
from chat_platform.llm.tokens import count_message_tokens
from tests.factories import message_add

pytestmark = pytest.mark.django_db


def test_seed_demo_refuses_without_debug_or_force(settings, django_user_model):
    settings.DEBUG = False
    with pytest.raises(CommandError, match="refused unless DEBUG or --force"):
        call_command("seed_demo")
    assert not django_user_model.objects.filter(username="demo").exists()


def test_seed_demo_creates_demo_user_and_two_shared_builtin_bots(settings, django_user_model):
    settings.DEBUG = False
    out = StringIO()
    call_command("seed_demo", "--force", stdout=out)
    call_command("seed_demo", "--force", stdout=out)  # idempotent
    demo = django_user_model.objects.get(username="demo")
    assert demo.check_password("demo")
    bots = Bot.objects.filter(owner=demo).order_by("name")
    assert [(b.model, b.is_shared) for b in bots] == [("builtin/recall", True)] * 2
    assert "2 shared bots ready" in out.getvalue()


def test_seed_demo_seeds_only_what_is_missing(settings, django_user_model):
    """`make run` seeds on every start: a user's edits to the demo account and bots stay."""
    settings.DEBUG = True
    call_command("seed_demo", stdout=StringIO())
    demo = django_user_model.objects.get(username="demo")
    demo.set_password("a better password")
    demo.save()
    first, second = Bot.objects.filter(owner=demo).order_by("name")
    Bot.objects.filter(pk=first.pk).update(
        system_prompt="Answer like a pirate.", context_window=6000
    )
    second.delete()
    out = StringIO()
    call_command("seed_demo", stdout=out)
    demo.refresh_from_db()
    assert demo.check_password("a better password")
    first.refresh_from_db()
    assert (first.system_prompt, first.context_window) == ("Answer like a pirate.", 6000)
    assert Bot.objects.filter(owner=demo).count() == 2  # the deleted one is seeded again
    assert "demo user kept; 2 shared bots ready (1 added)" in out.getvalue()


def test_seed_demo_migrates_first_in_its_own_process_when_asked(settings, monkeypatch):
    """`make run` migrates and seeds in one process (one start of Django, not two)."""
    from bots.management.commands import seed_demo

    settings.DEBUG = True
    called = []
    monkeypatch.setattr(seed_demo, "call_command", lambda *args, **kw: called.append((args, kw)))
    call_command("seed_demo", stdout=StringIO())
    assert called == []
    call_command("seed_demo", "--migrate", stdout=StringIO())
    assert called == [(("migrate",), {"interactive": False, "verbosity": 1})]


def _stuck(session, *, minutes: int, content: str, status: str) -> Message:
    message = message_add(session, role="assistant", content=content, status=status, token_count=0)
    Message.objects.filter(pk=message.pk).update(
        updated_at=timezone.now() - timedelta(minutes=minutes)
    )
    return message


def test_sweep_marks_stuck_replies_interrupted_and_keeps_partial_text(
    chat_session, django_capture_on_commit_callbacks
):
    message_add(chat_session, role="user", content="tell me a story")
    old = _stuck(chat_session, minutes=11, content="Once upon a", status="streaming")
    never_started = _stuck(chat_session, minutes=30, content="", status="pending")
    recent = _stuck(chat_session, minutes=5, content="Still going", status="streaming")
    session_context_recount(session_id=chat_session.pk)

    out = StringIO()
    with django_capture_on_commit_callbacks(execute=True):
        call_command("sweep_orphans", stdout=out)
    # ``never_started`` is queued behind ``old`` (replies run one at a time): the sweep ends
    # ``old`` and hands ``never_started`` over, which gets its chance to run...
    assert out.getvalue().strip() == "1 message(s) marked interrupted"

    old.refresh_from_db()
    never_started.refresh_from_db()
    recent.refresh_from_db()
    assert (old.status, old.content) == ("interrupted", "Once upon a")
    assert old.error_code == "interrupted"
    assert old.token_count == count_message_tokens("Once upon a", model="builtin/recall")
    assert (never_started.status, never_started.dispatched_at is not None) == ("pending", True)
    assert recent.status == "streaming"
    # ...and, never started by the next sweep (no worker here), it is ended visibly then.
    out = StringIO()
    call_command("sweep_orphans", stdout=out)
    assert out.getvalue().strip() == "1 message(s) marked interrupted"
    never_started.refresh_from_db()
    assert (never_started.status, never_started.token_count) == ("interrupted", 0)
    # the partial text now counts toward the context, exactly as a recount says
    session = ChatSession.objects.get(pk=chat_session.pk)
    assert session.context_tokens == session_context_recount(session_id=chat_session.pk)[0]
    call_command("sweep_orphans", stdout=StringIO())
    assert Message.objects.filter(status="interrupted").count() == 2


def test_beat_runs_the_sweep_every_minute():
    entry = celery_app.conf.beat_schedule["sweep-orphans"]
    assert (entry["task"], entry["schedule"]) == ("bots.tasks.sweep_orphans", 60.0)
    assert celery_app.conf.task_routes["bots.tasks.*"] == {"queue": "chat"}
    assert celery_app.conf.task_routes["compaction.tasks.*"] == {"queue": "compaction"}


def test_seed_demo_adds_a_room_of_both_demo_bots_once(settings, django_user_model):
    from bots.management.commands.seed_demo import DEMO_ROOM_TITLE
    from bots.models import ChatSession, SessionParticipant

    settings.DEBUG = True
    out = StringIO()
    call_command("seed_demo", stdout=out)
    assert "demo room created" in out.getvalue()
    demo = django_user_model.objects.get(username="demo")
    room = ChatSession.objects.get(user=demo, title=DEMO_ROOM_TITLE)
    assert (room.is_room, room.reply_mode, room.bot.name) == (True, "all", "Recall (built-in)")
    assert list(
        SessionParticipant.objects.filter(session=room)
        .order_by("id")
        .values_list("bot__name", "is_default", "bot__context_window")
    ) == [("Recall (built-in)", True, 0), ("Recall, tight budget (built-in)", False, 2048)]
    ChatSession.objects.filter(pk=room.pk).update(reply_mode="mentioned")

    again = StringIO()
    call_command("seed_demo", stdout=again)
    assert "demo room kept" in again.getvalue()
    assert ChatSession.objects.filter(user=demo, title=DEMO_ROOM_TITLE).count() == 1
    assert ChatSession.objects.get(pk=room.pk).reply_mode == "mentioned"  # the user's change
