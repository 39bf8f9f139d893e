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
_CONTAINERS = (dict, list)


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
    if text.count("[") + text.count("{") <= MAX_JSON_DEPTH:
        return json.loads(text, **kwargs)  # cannot be too deep: the common case
    # Parsed first, then measured: the C decoder refuses past the recursion limit by itself
    # (RecursionError, never a crash), and walking the parsed containers costs far less than
    # matching every string and bracket of the text in Python (a 1,000-message request to
    # the OpenAI-compatible API holds thousands).
    try:
        value = json.loads(text, **kwargs)
    except RecursionError:
        raise JSONTooDeep(MAX_JSON_DEPTH) from None
    _value_depth_check(value, MAX_JSON_DEPTH)
    return value


def _value_depth_check(value: Any, max_depth: int) -> None:
    """``JSONTooDeep`` if parsed arrays and objects nest deeper than ``max_depth`` (an empty
    one is a level too, as its brackets are in the text). Iterative: no recursion."""
    if not isinstance(value, _CONTAINERS):
        return
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        node, depth = stack.pop()
        for child in node.values() if isinstance(node, dict) else node:
            if isinstance(child, _CONTAINERS):
                if depth >= max_depth:
                    raise JSONTooDeep(max_depth)
                stack.append((child, depth + 1))
