"""The one JSON parse of what clients send: REST bodies (``chat_platform.api.JSONParser``) and
websocket frames (``bots.consumers``).

Python's decoder recurses once per nesting level: a body nested about a thousand levels deep
raises ``RecursionError`` (a 500, or a consumer that dies and closes its socket) instead of an
answer. Nothing the platform accepts nests more than a few levels, so anything deeper than
``MAX_JSON_DEPTH`` is refused with ``JSONTooDeep`` (a ``ValueError``, like any other bad JSON)
before the decoder sees it. The depth is measured without recursion, on the brackets outside
string literals.
"""

import json
import re
from typing import Any

MAX_JSON_DEPTH = 64

# A string literal (escapes included), or one bracket. Brackets inside strings are skipped with
# their string; the unrolled form keeps the match linear on long strings.
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)
_OPENING = frozenset("[{")


class JSONTooDeep(ValueError):
    def __init__(self, max_depth: int = MAX_JSON_DEPTH) -> None:
        self.max_depth = max_depth
        super().__init__(f"The JSON is nested more than {max_depth} levels deep.")


def json_depth_check(text: str, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Raise ``JSONTooDeep`` if arrays and objects in ``text`` nest deeper than ``max_depth``."""
    if text.count("[") + text.count("{") <= max_depth:
        return  # cannot be deeper: the common case costs two counts
    depth = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        if token in _OPENING:
            depth += 1
            if depth > max_depth:
                raise JSONTooDeep(max_depth)
        elif token[0] != '"':
            depth -= 1


def json_loads(text: str | bytes | bytearray, **kwargs: Any) -> Any:
    """``json.loads`` that refuses nesting deeper than ``MAX_JSON_DEPTH`` (``JSONTooDeep``).

    Bytes are decoded as UTF-8 first (JSON's encoding); bytes that are not UTF-8 are a
    ``ValueError`` like any other bad JSON.
    """
    if isinstance(text, bytes | bytearray):
        text = bytes(text).decode("utf-8")
    json_depth_check(text)
    return json.loads(text, **kwargs)
