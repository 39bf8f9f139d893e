"""Text that cannot be stored: NUL (PostgreSQL text refuses it) and lone surrogates (not valid
Unicode; UTF-8 cannot encode them). Every text field a user controls is checked with these, so
such input is a ``validation_error`` 400 everywhere, never a database or encoding 500."""

import re
from typing import Any

from django.core.exceptions import ValidationError

_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")

UNSTORABLE_MESSAGE = "Text may not contain NUL characters or unpaired surrogates."


def text_is_storable(value: str) -> bool:
    return _UNSTORABLE.search(value) is None


def validate_storable_text(value: Any) -> None:
    """Django validator for model and serializer fields."""
    if isinstance(value, str) and not text_is_storable(value):
        raise ValidationError(UNSTORABLE_MESSAGE, code="unstorable_text")


_SURROGATE = re.compile("[\ud800-\udfff]")


def text_made_storable(value: str) -> str:
    """Provider text made storable: NUL dropped, each lone surrogate replaced by U+FFFD. Users'
    text is refused instead (``validate_storable_text``); a model's cannot be sent back."""
    if _UNSTORABLE.search(value) is None:
        return value
    return _SURROGATE.sub("\ufffd", value.replace("\x00", ""))


def json_made_storable(value: Any) -> Any:
    """``value`` (JSON) with every string, keys too, made storable (``text_made_storable``):
    a NUL or a lone surrogate anywhere made the database refuse the whole value."""
    if isinstance(value, str):
        return text_made_storable(value)
    if isinstance(value, dict):
        return {json_made_storable(str(k)): json_made_storable(v) for k, v in value.items()}
    if isinstance(value, list):
        return [json_made_storable(v) for v in value]
    return value
