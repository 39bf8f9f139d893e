"""Run by test_import_steps.py in a subprocess against a SQLite database (embedded mode):
imports a lossless chat of several MB and, each time the import reports progress (every MB
read), tries to take SQLite's write lock from another connection waiting at most 50 ms, as
another user's send would. Prints how many tries there were and how many got the lock."""

import io
import json
import os
import sqlite3
import sys
from pathlib import Path

import django

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
django.setup()

from django.conf import settings  # noqa: E402
from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402

from bots.models import Bot, Message  # noqa: E402
from transfer.services import chats_import  # noqa: E402

call_command("migrate", verbosity=0)
owner = get_user_model().objects.create(username="owner")
bot = Bot.objects.create(owner=owner, name="b", embedding_model="")
filler = "word " * 400
data = {
    "format": "chat-platform.session",
    "version": 1,
    "session": {"title": "Long", "created_at": "2024-03-08T13:56:00Z"},
    "messages": [
        {
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": f"message {seq} {filler}",
            "created_at": "2024-03-08T13:56:00Z",
        }
        for seq in range(1, 3_001)
    ],
}
raw = json.dumps(data).encode()
tries = {"tries": 0, "locked": 0}


def another_writer(done: int) -> None:
    tries["tries"] += 1
    other = sqlite3.connect(settings.DATABASES["default"]["NAME"], timeout=0.05)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute("ROLLBACK")
    except sqlite3.OperationalError:
        tries["locked"] += 1
    finally:
        other.close()


result = chats_import(
    user=owner, bot_id=bot.pk, raw=io.BytesIO(raw), size=len(raw), on_progress=another_writer
)
print(
    json.dumps(
        {
            **tries,
            "megabytes": len(raw) // (1024 * 1024),
            "messages": Message.objects.count(),
            "imported": result.imported[0]["messages"],
        }
    )
)
