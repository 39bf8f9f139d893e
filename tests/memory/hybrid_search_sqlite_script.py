"""Run by test_hybrid_search_sqlite.py in a subprocess against a fresh SQLite database
(embedded mode): migrates, builds the hybrid-search fixture (tests/memory/hybrid_search_data.py)
with a bot whose embedding model is the fake provider's, embeds it, and prints what search
answers, as JSON."""

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
from memory import embeddings  # noqa: E402
from memory.models import MessageIndex  # noqa: E402
from tests.fakeopenai import FakeOpenAI  # noqa: E402
from tests.memory import hybrid_search_data as data  # noqa: E402

call_command("migrate", verbosity=0)
User = get_user_model()
owner, other = User.objects.create(username="owner"), User.objects.create(username="other")
with FakeOpenAI() as fake:
    bot = Bot.objects.create(
        owner=owner,
        name="b",
        is_shared=True,
        model="openai/fake-model",
        api_base=fake.url,
        api_base_approved=fake.url,
        embedding_model=data.EMBEDDING_MODEL,
        models_approved=f"openai/fake-model\n{data.EMBEDDING_MODEL}",
    )
    session, foreign = data.build(owner, bot, other)
    # the compactions' hooks went to the in-process task threads on commit: let them finish
    assert tasks_wait_idle(120), "the in-process tasks did not finish"
    embedded = [embeddings.messages_embed_pending(session_id=s.pk) for s in (session, *foreign)]
    out = {
        "vendor": connection.vendor,
        "embedded": embedded,
        "vectors": MessageIndex.objects.exclude(embedding=None).count(),
        "answers": data.answers(session),
    }
print(json.dumps(out))
