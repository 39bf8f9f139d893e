"""Hybrid search in embedded mode (SQLite) gives the same hits as on PostgreSQL (issue 16 item 5):
the fixture is built, embedded and searched here on PostgreSQL, and in a subprocess on a fresh
SQLite database (tests/memory/hybrid_search_sqlite_script.py), each with its own fake provider."""

import json

import pytest

from memory import embeddings
from tests.factories import BotFactory
from tests.memory import hybrid_search_data as data
from tests.memory.test_message_search_sqlite import SCRIPT as LEXICAL_SCRIPT
from tests.memory.test_message_search_sqlite import _sqlite

SCRIPT = LEXICAL_SCRIPT.parent / "hybrid_search_sqlite_script.py"


@pytest.mark.timeout(300)  # a fresh process: Django, litellm and a migrated SQLite database
@pytest.mark.django_db
def test_sqlite_and_postgresql_give_the_same_hybrid_hits(
    tmp_path_factory, tmp_path, owner, other_user, fake_openai
):
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        embedding_model=data.EMBEDDING_MODEL,
        is_shared=True,
    )
    session, foreign = data.build(owner, bot, other_user)
    for chat in (session, *foreign):
        embeddings.messages_embed_pending(session_id=chat.pk)
    postgres = json.loads(json.dumps(data.answers(session)))

    out = _sqlite(tmp_path_factory, tmp_path, script=SCRIPT)

    # embedded mode: each compaction's hook ran in-process on commit and embedded its messages
    # (8 + 2 + 2), so nothing was left for the explicit run
    assert (out["vendor"], out["embedded"], out["vectors"]) == ("sqlite", [0, 0, 0], 12)
    sqlite = out["answers"]
    assert sqlite == postgres
    assert sqlite["hybrid"] == {
        "How did I get hurt?": [["snapshot_1_4", [1]]],
        # 5 by its thread: the user's message between the kayak (3) and the boat club (7)
        "When did we go out on the boat?": [["snapshot_5_8", [5, 7]], ["snapshot_1_4", [3]]],
        "Which instrument is she learning?": [["snapshot_5_8", [5]]],
    }
    assert sqlite["lexical"] == {
        "How did I get hurt?": [],
        "When did we go out on the boat?": [["snapshot_5_8", [7]]],
        "Which instrument is she learning?": [],
    }
    assert [seq for seq, _ in sqlite["vector"]] == [7, 3, 5]
