"""Record search in embedded mode (SQLite FTS5), in a subprocess with its own SQLite database:
the test session's database is PostgreSQL, and search is chosen by the connection's vendor."""

import json
import subprocess
import sys

from tests.integration.processes import ROOT, process_env, sqlite_copy
from tests.memory.test_queries import INJECTION_SHAPED

SCRIPT = ROOT / "tests" / "memory" / "sqlite_search_script.py"


def test_sqlite_fts5_search_end_to_end(tmp_path_factory, tmp_path):
    # A copy of the migrated template: the script's migrate is a no-op, and its second migrate
    # (after rebuilding the table) still puts the triggers back.
    database = sqlite_copy(tmp_path_factory, tmp_path / "embedded.sqlite3")
    env = process_env(REDIS_URL=None, DEBUG="true", DATABASE_URL=database)
    # The queries travel as ASCII JSON (\u0000, \ud800): argv itself cannot carry them.
    queries = list(INJECTION_SHAPED)
    done = subprocess.run(  # noqa: S603
        [sys.executable, str(SCRIPT), json.dumps(queries)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout.strip().splitlines()[-1])
    triggers = ["memory_record_fts_ad", "memory_record_fts_ai", "memory_record_fts_au"]
    assert out.pop("injection") == {q: [] for q in queries}
    assert out == {
        "vendor": "sqlite",
        "triggers": triggers,
        "ranking": ["porto", "drove"],
        "excerpt": "My sister Ana plays the **cello** in the city orchestra.",
        "all_words": ["car"],
        "any_word": ["sister", "home"],
        "scopes": {
            "here": ["home", "sister"],
            "sibling": ["home"],
            "other_bot": [],
            "other_user": [],
        },
        "after_injection": ["sister"],
        "after_update": [[], ["car"]],
        "fts_rows_after_cascade": [5, 5, 5],
        "lighthouse": [],
        "triggers_after_migrate": triggers,
        "late": ["late"],
    }
