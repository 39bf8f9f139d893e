"""Run by test_builtin_embed_sqlite.py in a subprocess against a fresh SQLite database (embedded
mode, tasks in-process): migrates, builds the built-in-embedding fixture
(tests/memory/builtin_embed_data.py) with a bot left at its default embedding model, writes one
live message, and prints what was embedded and what search answers, as JSON."""

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

from bots.models import Bot  # noqa: E402
from chat_platform.inprocess import tasks_wait_idle  # noqa: E402
from memory.models import MessageIndex  # noqa: E402
from memory.services import messages_index_written  # noqa: E402
from tests.memory import builtin_embed_data as data  # noqa: E402
from tests.memory import message_search_data as talks  # noqa: E402

call_command("migrate", verbosity=0)
owner = get_user_model().objects.create(username="owner")
bot = Bot.objects.create(owner=owner, name="b")
session = data.build(owner, bot)
# each compaction's hook went to the in-process task threads on commit and embedded its messages
assert tasks_wait_idle(120), "the in-process tasks did not finish"
compacted = MessageIndex.objects.exclude(embedding=None).count()
live = talks.said(session, *data.LIVE, data.TALKS[-1][0])
messages_index_written(message_ids=[live.pk])
assert tasks_wait_idle(120), "the in-process tasks did not finish"
row = MessageIndex.objects.get(message_id=live.pk)
out = {
    "vendor": connection.vendor,
    "default": bot.embedding_model,
    "compacted_embedded": compacted,
    "live": [row.embedding_model, len(bytes(row.embedding or b""))],
    "answers": data.answers(session),
    "live_hits": data.hits(session, data.LIVE_QUESTION, live_before=live.seq + 1),
}
print(json.dumps(out))
