"""A client's tools on ``/v1/chat/completions``: its ``tools`` list, the ``tool_calls`` of its
assistant messages and its ``tool`` results, checked into one canonical shape (pure functions).

The platform's own recall tools (``read_records``, ``search_records``, ``save_record``) run
server-side and never reach a client, so a client may not define tools of those names: the
model could not tell the two apart.
"""

import json
import re
from typing import Any

from chat_platform.llm.recall_protocol import READ_TOOL, SAVE_TOOL, SEARCH_TOOL
from chat_platform.textcheck import text_is_storable

RESERVED_NAMES = frozenset({READ_TOOL, SEARCH_TOOL, SAVE_TOOL})
MAX_TOOLS = 128
# OpenAI's own rule for function names.
NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
MAX_CALL_ID_CHARS = 100  # Message.tool_call_id
MAX_DESCRIPTION_CHARS = 4_000
MAX_SCHEMA_BYTES = 64_000


class BadToolPayload(ValueError):
    def __init__(self, message: str, param: str) -> None:
        super().__init__(message)
        self.message, self.param = message, param


def check_tools(value: object) -> list[dict[str, Any]]:
    """The request's ``tools``: ``[{"type": "function", "function": {"name", "description"?,
    "parameters"?, "strict"?}}]``, as sent on to the model (only those fields)."""
    if not isinstance(value, list) or not value:
        raise BadToolPayload("tools must be a non-empty list of function tools.", "tools")
    if len(value) > MAX_TOOLS:
        raise BadToolPayload(f"At most {MAX_TOOLS} tools per request.", "tools")
    tools, names = [], set()
    for i, tool in enumerate(value):
        param = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type") != "function":
            raise BadToolPayload(
                'Each tool must be {"type": "function", "function": {...}}.', param
            )
        function = tool.get("function")
        if not isinstance(function, dict):
            raise BadToolPayload("A tool needs a function object.", f"{param}.function")
        name = function.get("name")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise BadToolPayload(
                "A function name is 1-64 letters, digits, underscores or hyphens.",
                f"{param}.function.name",
            )
        if name in RESERVED_NAMES:
            raise BadToolPayload(
                f"The tool name {name!r} is reserved by the platform's memory tools.",
                f"{param}.function.name",
            )
        if name in names:
            raise BadToolPayload(f"Two tools are named {name!r}.", f"{param}.function.name")
        names.add(name)
        clean: dict[str, Any] = {"name": name}
        description = function.get("description")
        if description is not None:
            if (
                not isinstance(description, str)
                or len(description) > MAX_DESCRIPTION_CHARS
                or not text_is_storable(description)
            ):
                raise BadToolPayload(
                    f"A description is text of at most {MAX_DESCRIPTION_CHARS} characters.",
                    f"{param}.function.description",
                )
            clean["description"] = description
        parameters = function.get("parameters")
        if parameters is not None:
            if not isinstance(parameters, dict):
                raise BadToolPayload(
                    "parameters must be a JSON Schema object.", f"{param}.function.parameters"
                )
            if len(json.dumps(parameters, ensure_ascii=False)) > MAX_SCHEMA_BYTES:
                raise BadToolPayload(
                    f"parameters may hold at most {MAX_SCHEMA_BYTES} bytes.",
                    f"{param}.function.parameters",
                )
            clean["parameters"] = parameters
        strict = function.get("strict")
        if strict is not None:
            if not isinstance(strict, bool):
                raise BadToolPayload("strict must be true or false.", f"{param}.function.strict")
            clean["strict"] = strict
        tools.append({"type": "function", "function": clean})
    return tools


def check_tool_choice(value: object) -> bool:
    """Whether the tools are offered: ``"auto"`` (or left out) yes, ``"none"`` no; forcing a
    call is not supported (the platform's turn decides when its own tools run)."""
    if value is None or value == "auto":
        return True
    if value == "none":
        return False
    raise BadToolPayload('tool_choice may be "auto" or "none".', "tool_choice")


def check_tool_calls(value: object, param: str) -> list[dict[str, Any]]:
    """An assistant message's ``tool_calls``, canonical: ``[{"id", "type": "function",
    "function": {"name", "arguments"}}]``."""
    if not isinstance(value, list) or not value:
        raise BadToolPayload("tool_calls must be a non-empty list.", param)
    calls, ids = [], set()
    for i, call in enumerate(value):
        where = f"{param}[{i}]"
        if not isinstance(call, dict) or call.get("type", "function") != "function":
            raise BadToolPayload('Each tool call must be {"type": "function", ...}.', where)
        call_id = call.get("id")
        if not isinstance(call_id, str) or not call_id_ok(call_id):
            raise BadToolPayload(
                f"A tool call needs an id of 1-{MAX_CALL_ID_CHARS} characters.", f"{where}.id"
            )
        if call_id in ids:
            raise BadToolPayload(f"Two tool calls have the id {call_id!r}.", f"{where}.id")
        ids.add(call_id)
        function = call.get("function")
        if not isinstance(function, dict):
            raise BadToolPayload("A tool call needs a function object.", f"{where}.function")
        name, arguments = function.get("name"), function.get("arguments", "")
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise BadToolPayload("A tool call names its function.", f"{where}.function.name")
        if not isinstance(arguments, str) or not text_is_storable(arguments):
            raise BadToolPayload(
                "A tool call's arguments are a JSON string.", f"{where}.function.arguments"
            )
        calls.append(
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        )
    return calls


def call_id_ok(value: str) -> bool:
    return 0 < len(value) <= MAX_CALL_ID_CHARS and text_is_storable(value)


def calls_key(calls: list[dict[str, Any]]) -> str:
    """What of a message's tool calls its fingerprint covers: ids, names and arguments, in
    order ("" without calls, so a message without them hashes as it always has)."""
    if not calls:
        return ""
    return json.dumps(
        [[c.get("id"), c["function"]["name"], c["function"].get("arguments") or ""] for c in calls],
        ensure_ascii=False,
        separators=(",", ":"),
    )
