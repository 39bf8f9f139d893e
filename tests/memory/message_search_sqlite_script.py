"""Run by test_message_search_sqlite.py in a subprocess against a fresh SQLite database
(embedded mode): migrates, builds the message-search fixture (tests/memory/message_search_data.py)
and prints what search answers, as JSON, with the FTS5 objects it relies on."""

import json
import os
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bots.models import Bot, ChatSession  # noqa: E402
from memory.models import MessageIndex  # noqa: E402
from tests.memory import message_search_data as data  # noqa: E402


def fts_rows():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_message_fts_docsize")
        return cursor.fetchone()[0]


def objects():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT type, name FROM sqlite_master WHERE name LIKE 'memory_message_fts%' "
            "AND type IN ('table', 'trigger') ORDER BY type, name"
        )
        return [list(row) for row in cursor.fetchall()]


from chat_platform.inprocess import tasks_wait_idle  # noqa: E402

call_command("migrate", verbosity=0)
User = get_user_model()
owner, other = User.objects.create(username="owner"), User.objects.create(username="other")
bot = Bot.objects.create(owner=owner, name="b", is_shared=True, embedding_model="")
session, ravi = data.build(owner, bot, other)
# the compactions' hooks went to the in-process task threads on commit: let them finish
assert tasks_wait_idle(120), "the in-process tasks did not finish"
out = {"vendor": connection.vendor, "objects": objects()}
out["answers"] = data.answers(session, ravi)
# the FTS5 table follows the index through a cascade (a session deleted, not via a service)
before = [fts_rows(), MessageIndex.objects.count()]
ChatSession.objects.filter(pk=ravi.pk).delete()
out["cascade"] = [before, [fts_rows(), MessageIndex.objects.count()]]
print(json.dumps(out))
