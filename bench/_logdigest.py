"""What a bench stack's servers logged at WARNING or above, one line per event with its count.

A smoke run that fails in CI leaves only its printout behind (the stack's log folder is gone
with the machine): this says which refusals, outages or crashes the servers saw, e.g. the
database pool's timeout behind a burst's ``service_unavailable`` frames.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path

LOUD = {"warning", "error", "critical", "exception"}
# Not a server's trouble: Python's warnings (celery's root warning, a missing static folder) and
# Django's line for each 4xx answer (the readiness probe's 401 among them).
QUIET_LOGGERS = {"py.warnings", "django.request"}
EXAMPLE_CHARS = 240


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip()[:EXAMPLE_CHARS] if lines else ""


def log_digest(logs: list[Path], *, limit: int = 12) -> list[str]:
    """Lines: ``<log> <level> <event> x<count>: <an example's error>`` for every JSON event at
    WARNING or above, and for lines outside JSON that look like a traceback's last line."""
    counts: collections.Counter[tuple[str, str, str]] = collections.Counter()
    example: dict[tuple[str, str, str], str] = {}
    for path in logs:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        for line in text.splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                record = None
            if isinstance(record, dict):
                level = str(record.get("level", "")).lower()
                quiet = record.get("logger") in QUIET_LOGGERS and level == "warning"
                if level not in LOUD or quiet:
                    continue
                key = (path.stem, level, str(record.get("event", ""))[:120])
                detail = _last_line(str(record.get("exception") or record.get("error") or ""))
            elif "Error" in line or "Traceback" in line:
                key = (path.stem, "raw", line.strip()[:120])
                detail = ""
            else:
                continue
            counts[key] += 1
            example.setdefault(key, detail)
    lines = []
    for (name, level, event), count in counts.most_common(limit):
        detail = example[(name, level, event)]
        lines.append(f"{name} {level} {event} x{count}" + (f": {detail}" if detail else ""))
    if len(counts) > limit:
        lines.append(f"... and {len(counts) - limit} other kinds")
    return lines
