"""What a model sends to recall, checked and cleaned in one place before anything runs or is
stored (``memory.recall`` describes the rules; docs/memory.md): tool calls and JSON requests
alike become ``ToolCall`` objects, bounded, with storable text only."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from chat_platform.llm.recall_protocol import (
    READ_MAX_NAMES,
    READ_TOOL,
    SAVE_TOOL,
    SEARCH_TOOL,
    json_request,
)
from chat_platform.textcheck import UNSTORABLE_MESSAGE, text_is_storable
from memory.search import QUERY_MAX_CHARS

# Calls that run in one round; the rest are answered NOT_RUN_TEXT.
RECALL_MAX_CALLS = 8
# One call's arguments as the provider sent them (JSON text): a save's body may hold
# MESSAGE_MAX_BYTES (1 MB), whose JSON escapes can take several characters a byte.
ARGUMENTS_MAX_CHARS = 4 * 1024 * 1024
CALL_ID_MAX_CHARS = 64
TOOL_NAME_MAX_CHARS = 100
# A read name past this is never a record name (those are at most 80 characters).
NAME_MAX_CHARS = 100
# The transcript's copy of a call: each text, list and object cut to these sizes.
STORED_TEXT_MAX_CHARS = 1000
STORED_ITEMS_MAX = 16
# Arguments are read this deep; deeper values become null (no tool takes them).
ARGUMENTS_MAX_DEPTH = 4
SAVE_FIELDS = ("name", "description", "body", "scope")
TOOL_NAMES = (READ_TOOL, SEARCH_TOOL, SAVE_TOOL)

NOT_RUN_TEXT = f"[not run: at most {RECALL_MAX_CALLS} tool calls a round]"
BAD_JSON_TEXT = "[not run: the arguments are not valid JSON]"
NOT_AN_OBJECT_TEXT = "[not run: the arguments must be a JSON object]"
ARGUMENTS_TOO_LARGE_TEXT = (
    f"[not run: the arguments are larger than {ARGUMENTS_MAX_CHARS // (1024 * 1024)} MB]"
)
BAD_NAMES_TEXT = "[not read: names must be a list of record names]"
BAD_QUERY_TEXT = "[not searched: query must be text]"


@dataclass(frozen=True)
class ToolCall:
    """One call, checked: ``arguments`` are what the tool uses (storable text; a read's names
    already cut to the first ``READ_MAX_NAMES`` distinct ones, a query to ``QUERY_MAX_CHARS``).
    ``refusal``, when set, is the call's whole result: it does not run. ``note`` is added to
    the result of a call that ran (what of it was left out)."""

    id: str
    name: str
    arguments: dict[str, Any]
    refusal: str = ""
    note: str = ""

    def as_openai(self) -> dict[str, Any]:
        """The call as the transcript keeps it: bounded, and ``{}`` for a call that did not
        run."""
        arguments = {} if self.refusal else _bounded(self.arguments, 0)
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(arguments)},
        }


@dataclass
class ToolResult:
    call: ToolCall
    content: str
    tokens: int = 0


# --- checking and cleaning what the model sent -------------------------------------------------


def storable(text: str) -> str:
    """``text`` without the characters that cannot be stored (NUL, lone surrogates)."""
    if text_is_storable(text):
        return text
    return "".join(ch for ch in text if text_is_storable(ch))


def _clean(value: Any, depth: int) -> tuple[Any, bool]:
    """``value`` with unstorable characters dropped from every text (keys too) and nothing
    deeper than ``ARGUMENTS_MAX_DEPTH``; and whether anything was dropped."""
    if isinstance(value, str):
        clean = storable(value)
        return clean, len(clean) != len(value)
    if isinstance(value, list | dict) and depth >= ARGUMENTS_MAX_DEPTH:
        return None, False
    if isinstance(value, list):
        items = [_clean(item, depth + 1) for item in value]
        return [item for item, _ in items], any(bad for _, bad in items)
    if isinstance(value, dict):
        cleaned: dict[str, Any] = {}
        dropped = False
        for key, item in value.items():
            clean_key, bad_key = _clean(str(key), depth)
            cleaned[clean_key], bad_item = _clean(item, depth + 1)
            dropped = dropped or bad_key or bad_item
        return cleaned, dropped
    return value, False


def _bounded(value: Any, depth: int) -> Any:
    """The transcript's copy of (clean) arguments: texts, lists and objects cut, with a note."""
    if isinstance(value, str):
        if len(value) <= STORED_TEXT_MAX_CHARS:
            return value
        return f"{value[:STORED_TEXT_MAX_CHARS]}… [cut: {len(value):,} characters in all]"
    if isinstance(value, list):
        items = [_bounded(item, depth + 1) for item in value[:STORED_ITEMS_MAX]]
        if len(value) > STORED_ITEMS_MAX:
            items.append(f"… [cut: {len(value):,} items in all]")
        return items
    if isinstance(value, dict):
        pairs = list(value.items())
        bounded = {
            _bounded(key, depth): _bounded(item, depth + 1)
            for key, item in pairs[:STORED_ITEMS_MAX]
        }
        if len(pairs) > STORED_ITEMS_MAX:
            bounded["…"] = f"[cut: {len(pairs):,} keys in all]"
        return bounded
    return value


def _parse_arguments(raw: Any) -> tuple[dict[str, Any] | None, str]:
    """(arguments, "") or (None, the refusal): the provider sends JSON text, maybe an object."""
    if isinstance(raw, dict):
        return raw, ""
    if raw is None or raw == "":
        return {}, ""
    if not isinstance(raw, str):
        return None, NOT_AN_OBJECT_TEXT
    if len(raw) > ARGUMENTS_MAX_CHARS:
        return None, ARGUMENTS_TOO_LARGE_TEXT
    try:
        arguments = json.loads(raw)
    except (ValueError, RecursionError):  # bad JSON; nested past the parser's stack
        return None, BAD_JSON_TEXT
    if not isinstance(arguments, dict):
        return None, NOT_AN_OBJECT_TEXT
    return arguments, ""


def _read_names(arguments: dict[str, Any]) -> tuple[list[str] | None, int]:
    """The first READ_MAX_NAMES distinct names (long ones cut) and how many more were asked;
    None when ``names`` is not a name or a list of them."""
    names = arguments.get("names")
    if isinstance(names, str):
        names = [names]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None, 0
    cut = (n if len(n) <= NAME_MAX_CHARS else f"{n[:NAME_MAX_CHARS]}…" for n in names)
    distinct = list(dict.fromkeys(cut))
    return distinct[:READ_MAX_NAMES], max(0, len(distinct) - READ_MAX_NAMES)


def _checked_call(
    *, index: int, call_id: str, name: str, raw_arguments: Any, taken: set[str]
) -> ToolCall:
    """The one check of a call (tool call or JSON request): id, name and arguments cleaned,
    each tool's argument types checked. ``taken``: the ids used so far this round."""
    call_id = storable(call_id)[:CALL_ID_MAX_CHARS]
    if not call_id or call_id in taken:
        call_id = f"call_{index}"
    taken.add(call_id)
    name = storable(name)[:TOOL_NAME_MAX_CHARS]
    if index >= RECALL_MAX_CALLS:
        return ToolCall(id=call_id, name=name, arguments={}, refusal=NOT_RUN_TEXT)
    if name not in TOOL_NAMES:
        refusal = (
            f"[unknown tool: {name}; the tools are {READ_TOOL}, {SEARCH_TOOL} and {SAVE_TOOL}]"
        )
        return ToolCall(id=call_id, name=name, arguments={}, refusal=refusal)
    parsed, refusal = _parse_arguments(raw_arguments)
    if parsed is None:
        return ToolCall(id=call_id, name=name, arguments={}, refusal=refusal)
    arguments: dict[str, Any] = {}
    unstorable: list[str] = []
    for key, value in parsed.items():
        clean_key, bad_key = _clean(str(key), 0)
        arguments[clean_key], bad_value = _clean(value, 1)
        if bad_key or bad_value:
            unstorable.append(clean_key)
    if name == READ_TOOL:
        names, more = _read_names(arguments)
        if names is None:
            return ToolCall(id=call_id, name=name, arguments={}, refusal=BAD_NAMES_TEXT)
        note = f"[not read: {more} more names; at most {READ_MAX_NAMES} names a call]"
        return ToolCall(
            id=call_id, name=name, arguments={"names": names}, note=note if more else ""
        )
    if name == SEARCH_TOOL:
        query = arguments.get("query")
        if not isinstance(query, str):
            return ToolCall(id=call_id, name=name, arguments={}, refusal=BAD_QUERY_TEXT)
        return ToolCall(id=call_id, name=name, arguments={"query": query[:QUERY_MAX_CHARS]})
    bad_fields = [f for f in SAVE_FIELDS if f in unstorable]
    if bad_fields:
        reasons = "; ".join(f"{f}: {UNSTORABLE_MESSAGE}" for f in bad_fields)
        return ToolCall(id=call_id, name=name, arguments={}, refusal=f"[not saved: {reasons}]")
    return ToolCall(
        id=call_id, name=name, arguments={f: arguments[f] for f in SAVE_FIELDS if f in arguments}
    )


def calls_from_completion(tool_calls: Sequence[Any]) -> list[ToolCall]:
    """The model's tool calls (OpenAI shape), checked: every call becomes a ``ToolCall`` —
    the first ``RECALL_MAX_CALLS`` to run, unless refused — so each gets its result."""
    calls = []
    taken: set[str] = set()
    for i, raw in enumerate(tool_calls):
        raw = raw if isinstance(raw, dict) else {}
        function = raw.get("function")
        function = function if isinstance(function, dict) else {}
        calls.append(
            _checked_call(
                index=i,
                call_id=str(raw.get("id") or ""),
                name=str(function.get("name") or ""),
                raw_arguments=function.get("arguments"),
                taken=taken,
            )
        )
    return calls


def calls_from_text(text: str, *, call_id: str) -> list[ToolCall] | None:
    """A reply that is exactly one of the JSON requests of §10, as a checked tool call; else
    None."""
    request = json_request(text)
    if request is None:
        return None
    kind, value = request
    if kind == "read":
        name, arguments = READ_TOOL, {"names": value}
    else:
        name, arguments = SEARCH_TOOL, {"query": value}
    return [
        _checked_call(index=0, call_id=call_id, name=name, raw_arguments=arguments, taken=set())
    ]
