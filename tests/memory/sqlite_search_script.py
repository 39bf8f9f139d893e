"""Run by test_search_sqlite.py in a subprocess against a fresh SQLite database (embedded mode):
migrates, writes records through the services and prints what the queries answer, as JSON."""

import json
import os
import sys
from pathlib import Path

# The code under test, not whatever checkout the venv's editable install points at: run as a
# script, sys.path[0] is this directory, not the repository.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import django  # noqa: E402

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")
django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bots.models import Bot, ChatSession  # noqa: E402
from memory import queries, services  # noqa: E402
from memory.models import MemoryRecord  # noqa: E402

INJECTION_SHAPED = json.loads(sys.argv[1])


def names(hits):
    return [h.name for h in hits]


def fts_rows():
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM memory_record_fts_docsize")
        return cursor.fetchone()[0]


def triggers():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT name FROM sqlite_master WHERE type = 'trigger' AND name LIKE 'memory_record%'"
        )
        return sorted(row[0] for row in cursor.fetchall())


call_command("migrate", verbosity=0)
out = {"vendor": connection.vendor, "triggers": triggers()}

User = get_user_model()
owner, other = User.objects.create(username="owner"), User.objects.create(username="other")
bot = Bot.objects.create(owner=owner, name="b", is_shared=True)
other_bot = Bot.objects.create(owner=owner, name="b2")
here = ChatSession.objects.create(user=owner, bot=bot)
sibling = ChatSession.objects.create(user=owner, bot=bot)
elsewhere = ChatSession.objects.create(user=owner, bot=other_bot)
intruder = ChatSession.objects.create(user=other, bot=bot)


def save(session, name, body, description=None, scope=None):
    services.record_save(
        session=session,
        name=name,
        description=description or f"About {name}",
        body=body,
        scope=scope,
    )


save(here, "drove", "We once drove past Porto on the way south.")
save(here, "porto", "Notes.", description="Porto: the flat, Porto: the street")
save(here, "sister", "My sister Ana plays the cello in the city orchestra.")
save(here, "home", "I live by the river Douro.", description="Where I live", scope="bot")
save(here, "car", "The car is a blue Volvo, plate XY-12-CD.")

out["ranking"] = names(queries.records_search(session=here, query="porto"))
(cello,) = queries.records_search(session=here, query="cello")
out["excerpt"] = cello.excerpt
out["all_words"] = names(queries.records_search(session=here, query="blue volvo"))
out["any_word"] = names(
    queries.records_search(session=here, query="Where do I live and what does my sister play?")
)
out["scopes"] = {
    label: sorted(names(queries.records_search(session=s, query="cello river")))
    for label, s in [
        ("here", here),
        ("sibling", sibling),
        ("other_bot", elsewhere),
        ("other_user", intruder),
    ]
}
out["injection"] = {
    q: names(queries.records_search(session=here, query=q)) for q in INJECTION_SHAPED
}
out["after_injection"] = names(queries.records_search(session=here, query="cello"))

# The triggers keep FTS5 in step with updates and deletes, cascades included.
services.record_update(session=here, name="car", body="Now a red Fiat.")
out["after_update"] = [
    names(queries.records_search(session=here, query="volvo")),
    names(queries.records_search(session=here, query="fiat")),
]
before = fts_rows()
doomed = ChatSession.objects.create(user=owner, bot=bot)
save(doomed, "doomed", "A record about lighthouses.")
doomed.delete()  # CASCADE, not through a service
out["fts_rows_after_cascade"] = [before, fts_rows(), MemoryRecord.objects.count()]
out["lighthouse"] = names(queries.records_search(session=here, query="lighthouses"))

# A later migration that rebuilds the table drops its triggers; migrate puts them back.
with connection.cursor() as cursor:
    cursor.execute("DROP TRIGGER memory_record_fts_ai")
call_command("migrate", verbosity=0)
out["triggers_after_migrate"] = triggers()
save(here, "late", "Saved after the rebuild: a harpsichord.")
out["late"] = names(queries.records_search(session=here, query="harpsichord"))

print(json.dumps(out))
