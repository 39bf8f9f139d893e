"""The one way a timestamp leaves the server: ISO 8601 in UTC with a ``Z`` (REST and frames)."""

from datetime import datetime


def iso_utc(value: datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value else None
