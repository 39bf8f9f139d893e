"""Tasks looked up by name by several threads of a fresh process at once (the embedded beat's
first round, a first send, an upload) are all found: discovery runs once, the others wait for it
(``chat_platform.celery_app.task_named``). Before, each call site discovered on its own and one
of two racing threads got ``NotRegistered`` (6 runs in 6); its reply waited for the watchdog."""

import json
import subprocess
import sys

from tests.integration.processes import ROOT, process_env

SCRIPT = ROOT / "tests" / "task_discovery_script.py"


def test_threads_looking_tasks_up_at_once_all_find_them(tmp_path):
    env = process_env(
        REDIS_URL=None, DEBUG="true", DATABASE_URL=f"sqlite:///{tmp_path / 'unused.sqlite3'}"
    )
    for _ in range(3):  # each run a fresh process: discovery has not happened yet
        done = subprocess.run(  # noqa: S603
            [sys.executable, str(SCRIPT)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout.strip().splitlines()[-1]) == {
            "looked_up": [
                "attachments.tasks.extract",
                "bots.tasks.turn_run",
                "bots.tasks.turns_watchdog",
            ],
            "failed": {},
        }
