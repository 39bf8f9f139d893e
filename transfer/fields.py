"""Checking the fields of an import file: each check names where it failed (``messages[3].role``)
and what it wanted, so a bad file gets an error a person can act on."""

from datetime import datetime
from typing import Any

from django.conf import settings
from django.utils.dateparse import parse_datetime

from chat_platform.textcheck import text_is_storable
from transfer.streaming import refused

INT_MAX = 2**31 - 1


def obj(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise refused(f"{where}: must be an object, not {type_name(value)}.")
    return value


def type_name(value: Any) -> str:
    if value is None:
        return "null"
    return {
        bool: "true/false",
        int: "a number",
        float: "a number",
        str: "text",
        list: "a list",
        dict: "an object",
    }.get(type(value), type(value).__name__)


def text(value: Any, where: str, *, max_bytes: int | None = None, allow_null: bool = False) -> str:
    if value is None and allow_null:
        return ""
    if not isinstance(value, str):
        raise refused(f"{where}: must be text, not {type_name(value)}.")
    limit = settings.MESSAGE_MAX_BYTES if max_bytes is None else max_bytes
    if len(value) > limit or len(value.encode("utf-8", "surrogatepass")) > limit:
        raise refused(f"{where}: longer than {limit:,} bytes.")
    if not text_is_storable(value):
        raise refused(
            f"{where}: holds a NUL character or a lone surrogate, which cannot be stored."
        )
    return value


def integer(
    value: Any, where: str, *, minimum: int = 0, maximum: int = INT_MAX, allow_null: bool = False
) -> int | None:
    if value is None and allow_null:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise refused(f"{where}: must be a whole number, not {type_name(value)}.")
    if not minimum <= value <= maximum:
        raise refused(f"{where}: must be between {minimum} and {maximum:,}, not {value}.")
    return value


def number(value: Any, where: str, *, minimum: float, maximum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise refused(f"{where}: must be a number, not {type_name(value)}.")
    if not minimum <= value <= maximum:
        raise refused(f"{where}: must be between {minimum} and {maximum}, not {value}.")
    return float(value)


def boolean(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise refused(f"{where}: must be true or false, not {type_name(value)}.")
    return value


def choice(value: Any, where: str, choices: list[str] | tuple[str, ...]) -> str:
    if value not in choices:
        raise refused(f"{where}: must be one of {', '.join(choices)}, not {value!r:.60}.")
    return str(value)


def when(value: Any, where: str, *, allow_null: bool = False) -> datetime | None:
    if value is None and allow_null:
        return None
    parsed = None
    if isinstance(value, str) and len(value) <= 40:
        try:
            parsed = parse_datetime(value)
        except ValueError:
            parsed = None
    if parsed is None or parsed.tzinfo is None:
        raise refused(
            f"{where}: must be an ISO 8601 time with its zone, e.g. 2024-03-08T13:56:00Z."
        )
    return parsed


def listing(value: Any, where: str, *, max_items: int = 10_000) -> list[Any]:
    if not isinstance(value, list):
        raise refused(f"{where}: must be a list, not {type_name(value)}.")
    if len(value) > max_items:
        raise refused(f"{where}: more than {max_items:,} items.")
    return value
