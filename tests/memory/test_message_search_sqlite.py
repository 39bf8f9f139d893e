"""Message search in embedded mode (SQLite FTS5) gives the same hits as PostgreSQL on the same
fixture (issue 16, Tests: "SQLite and PostgreSQL give the same hits"): the fixture is built and
searched here on PostgreSQL, and in a subprocess on a fresh SQLite database
(tests/memory/message_search_sqlite_script.py), like tests/memory/test_search_sqlite.py."""

import json
import subprocess
import sys

import pytest

from tests.integration.processes import ROOT, process_env, sqlite_copy

SCRIPT = ROOT / "tests" / "memory" / "message_search_sqlite_script.py"


def _sqlite(tmp_path_factory, tmp_path, script=SCRIPT):
    """Run ``script`` on a copy of the migrated SQLite template (its own migrate is then a
    no-op); returns the JSON of its last line."""
    database = sqlite_copy(tmp_path_factory, tmp_path / "embedded.sqlite3")
    env = process_env(REDIS_URL=None, DEBUG="true", DATABASE_URL=database)
    done = subprocess.run(  # noqa: S603
        [sys.executable, str(script)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.django_db
def test_sqlite_and_postgresql_give_the_same_hits(
    tmp_path_factory, tmp_path, owner, bot, other_user
):
    from tests.memory import message_search_data as data

    bot.is_shared = True
    bot.embedding_model = ""  # words only on both sides: this compares the two full-text engines
    bot.save(update_fields=["is_shared", "embedding_model"])
    session, ravi = data.build(owner, bot, other_user)
    postgres = json.loads(json.dumps(data.answers(session, ravi)))

    out = _sqlite(tmp_path_factory, tmp_path)

    assert out["vendor"] == "sqlite"
    assert out["objects"] == [
        ["table", "memory_message_fts"],
        ["table", "memory_message_fts_config"],
        ["table", "memory_message_fts_data"],
        ["table", "memory_message_fts_docsize"],
        ["table", "memory_message_fts_idx"],
        ["trigger", "memory_message_fts_ad"],
        ["trigger", "memory_message_fts_ai"],
    ]
    # 22 + 2 live + 10 (ravi) + 2 + 2 (foreign); then ravi's session is deleted
    assert out["cascade"] == [[38, 38], [28, 28]]
    sqlite = out["answers"]
    # every hit, message excerpts included, and every BM25 score are the same
    assert sqlite == postgres
    # and they are the expected ones
    # (the info record boat_name ranks with the messages on its "boat")
    assert sqlite["hits"]["When did we take the boat out to the lake?"] == [
        ["snapshot_1_8", [1], data.line(1)],
        ["boat_name", [], ""],
        ["snapshot_9_16", [12], data.line(12)],
        ["snapshot_17_22", [21], data.line(21)],
    ]
    assert sqlite["hits"]["What pets do I have?"] == [
        ["snapshot_9_16", [13], data.line(13)],
        ["snapshot_1_8", [7], data.line(7)],
    ]
    assert sqlite["hits"]["zanzibar"] == []
    assert [seq for seq, _ in sqlite["ravi_ranked"]][:1] == [6]
    assert [h[:2] for h in sqlite["after_fusion"] if h[0] != "boat_name"] == [
        ["snapshot_1_8", [1]],
        ["snapshot_17_22", [21]],
        ["snapshot_1_16", []],
    ]
    # live history below the request's first shown seq: one history hit, on both databases
    assert [h[:2] for h in sqlite["live"]["null"] if h[0] != "boat_name"] == [
        ["snapshot_1_8", [1]],
        ["snapshot_17_22", [21]],
    ]
    assert [h[:2] for h in sqlite["live"]["25"] if h[0] != "boat_name"][:1] == [
        ["(history)", [23, 24]]
    ]
    assert [h[:2] for h in sqlite["live"]["24"] if h[0] != "boat_name"][:1] == [["(history)", [23]]]
