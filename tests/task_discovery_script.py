"""Run by test_task_discovery.py in a fresh process (task modules not yet discovered, as in a web
process before its first dispatch): threads look tasks up by name at the same moment through
the platform's call sites, then read them as Celery's ``apply`` does; prints what failed."""

import json
import os
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "chat_platform.settings")

import django  # noqa: E402

django.setup()

from attachments.services import EXTRACT_TASK  # noqa: E402
from chat_platform.celery_app import app, task_named  # noqa: E402
from turns import dispatch  # noqa: E402

LOOKUPS = {
    "bots.tasks.turn_run": lambda: dispatch._task(dispatch.TURN_TASK),  # a first send
    "bots.tasks.turns_watchdog": lambda: task_named("bots.tasks.turns_watchdog"),  # the beat
    EXTRACT_TASK: lambda: task_named(EXTRACT_TASK),  # an upload
}
barrier = threading.Barrier(len(LOOKUPS))
failed: dict[str, str] = {}


def look(name: str) -> None:
    barrier.wait()
    try:
        found = LOOKUPS[name]()
        app._tasks[found.name]  # what Task.apply reads: NotRegistered if discovery raced
    except Exception as exc:  # noqa: BLE001 - reported, not raised
        failed[name] = repr(exc)


threads = [threading.Thread(target=look, args=(name,)) for name in LOOKUPS]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({"looked_up": sorted(LOOKUPS), "failed": failed}))
