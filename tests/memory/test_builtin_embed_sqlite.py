"""Search by meaning out of the box in embedded mode (SQLite, tasks in-process; issue 33): the
built-in model embeds compacted and live messages as they are written, and hybrid search gives
the hits it gives on PostgreSQL (tests/memory/test_builtin_embed_search.py), in a subprocess on
a fresh database (tests/memory/builtin_embed_sqlite_script.py)."""

import json

import pytest

from memory import embeddings
from tests.factories import BotFactory
from tests.memory import builtin_embed_data as data
from tests.memory.test_message_search_sqlite import SCRIPT as LEXICAL_SCRIPT
from tests.memory.test_message_search_sqlite import _sqlite

SCRIPT = LEXICAL_SCRIPT.parent / "builtin_embed_sqlite_script.py"


@pytest.mark.timeout(300)  # a fresh process: Django, the model and a migrated SQLite database
@pytest.mark.django_db
def test_sqlite_embeds_as_written_and_gives_the_postgresql_hits(tmp_path_factory, tmp_path, owner):
    session = data.build(owner, BotFactory(owner=owner))
    embeddings.messages_embed_pending(session_id=session.pk)
    postgres = json.loads(json.dumps(data.answers(session)))

    out = _sqlite(tmp_path_factory, tmp_path, script=SCRIPT)

    assert (out["vendor"], out["default"], out["compacted_embedded"]) == (
        "sqlite",
        "builtin/embed",
        8,
    )
    assert out["live"] == ["builtin/embed", 384 * 4]
    assert out["answers"] == postgres
    assert out["answers"]["hybrid"] == dict(data.QUESTIONS)
    assert out["answers"]["lexical"] == {q: [] for q, _ in data.QUESTIONS}
    assert out["live_hits"] == [["(history)", [11]]]
