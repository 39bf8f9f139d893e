"""``builtin/recall`` calls a tool the user names (docs/models.md, "A tool by name").

The built-in model understands no request, so it never decides on its own to use a bot's tools
(a calculator, a clock, a company API served over MCP; docs/tools.md). What it does instead is
deterministic: a question whose first word is the name of an offered tool — the bare name
(``calculate``) or the whole function name (``demo-tools__calculate``), in any case — calls that
tool once, with arguments read from the rest of the message against the tool's input schema:

* the rest is a JSON object: those are the arguments;
* else the schema's string properties (the required ones, or all of them when none is required)
  take the rest in order: each but the last takes one word, the last takes what remains
  (``note_save trip flight JL7079`` -> ``{"key": "trip", "text": "flight JL7079"}``); a number
  or boolean property takes its word as that type; no rest: no arguments.

When the call's result arrives, the answer quotes it (``calculate returned:`` then ``> 126``), a
failure in plain words. The memory tools are not called this way: recall decides those itself.
"""

import json
from collections.abc import Iterable

from chat_platform.llm.builtin.result import content_text
from chat_platform.llm.recall_protocol import MEMORY_TOOLS
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens

FAILED_PREFIX = "[tool failed:"
# The most of a result an answer quotes (the whole result is in the transcript, collapsed).
QUOTE_TOKENS_MAX = 200
QUOTE_LINES_MAX = 12
HINT_NAMES_MAX = 8


def _functions(tools: list[dict] | None) -> Iterable[dict]:
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and isinstance(function.get("name"), str):
            yield function


def _bare(name: str) -> str:
    return name.rsplit("__", 1)[-1]


def _typed(word: str, kind: object) -> object:
    """A word as the schema's type says; the word itself when it does not read as one."""
    try:
        if kind == "integer":
            return int(word)
        if kind == "number":
            return float(word) if any(c in word for c in ".eE") else int(word)
    except ValueError:
        return word
    if kind == "boolean" and word.lower() in ("true", "false", "yes", "no"):
        return word.lower() in ("true", "yes")
    return word


def arguments_from_text(rest: str, parameters: object) -> dict:
    """The arguments of a named call, from the text after the tool's name (module docstring)."""
    rest = rest.strip()
    if not rest:
        return {}
    if rest.startswith("{"):
        try:
            given = json.loads(rest)
        except ValueError:
            given = None
        if isinstance(given, dict):
            return given
    schema = parameters if isinstance(parameters, dict) else {}
    properties = schema.get("properties")
    properties = properties if isinstance(properties, dict) else {}
    required = [p for p in schema.get("required") or [] if p in properties]
    names = required or list(properties)
    if not names:
        return {}
    words = rest.split(maxsplit=len(names) - 1)
    arguments: dict = {}
    for name, word in zip(names, words, strict=False):
        described = properties.get(name)
        kind = described.get("type") if isinstance(described, dict) else None
        arguments[name] = word if kind in (None, "string") else _typed(word, kind)
    return arguments


def _first_word(question: str) -> tuple[str, str]:
    """The question's first word (after any leading ``@mentions`` of a room) and the rest."""
    rest = question.strip()
    while rest.startswith("@"):
        parts = rest.split(maxsplit=1)
        rest = parts[1] if len(parts) > 1 else ""
    parts = rest.split(maxsplit=1)
    if not parts:
        return "", ""
    return parts[0].rstrip(":,").lower(), parts[1] if len(parts) > 1 else ""


def _names(first: str, name: str) -> bool:
    return name not in MEMORY_TOOLS and first in (name.lower(), _bare(name).lower())


def named_call(question: str, tools: list[dict] | None) -> tuple[str, dict] | None:
    """The offered tool the question starts with, and the call's arguments; None when the first
    word names none (or only a memory tool)."""
    first, rest = _first_word(question)
    for function in _functions(tools):
        if first and _names(first, function["name"]):
            return function["name"], arguments_from_text(rest, function.get("parameters"))
    return None


def named_result(messages: list[dict], question: int, text: str) -> tuple[str, str] | None:
    """This turn's call of the tool the question (``text``) names, and its result (the call's
    tool name, the result's text); None before a result. Read from the exchange itself, so the
    answer comes even when the last call offers no tools."""
    first, _ = _first_word(text)
    calls: dict[str, str] = {}
    for message in messages[question + 1 :]:
        if message.get("role") == "assistant":
            for call in message.get("tool_calls") or []:
                name = str((call.get("function") or {}).get("name"))
                if first and _names(first, name):
                    calls[str(call.get("id"))] = name
        elif message.get("role") == "tool" and str(message.get("tool_call_id")) in calls:
            return calls[str(message.get("tool_call_id"))], content_text(message)
    return None


def tools_hint(tools: list[dict] | None) -> str:
    """What a no-match answer adds when the bot has tools of its own: how to call them (their
    bare names, at most ``HINT_NAMES_MAX``); "" without."""
    names = list(
        dict.fromkeys(_bare(f["name"]) for f in _functions(tools) if f["name"] not in MEMORY_TOOLS)
    )
    if not names:
        return ""
    shown = ", ".join(names[:HINT_NAMES_MAX]) + (", …" if len(names) > HINT_NAMES_MAX else "")
    return f" To call one of my tools, start a message with its name: {shown}."


def result_answer(name: str, result: str, *, model: str) -> str:
    """The answer quoting a named call's result: ``<tool> returned:`` and its first lines (at
    most ``QUOTE_TOKENS_MAX`` tokens), or ``<tool> failed: <reason>``."""
    tool = _bare(name)
    text = result.strip()
    if text.startswith(FAILED_PREFIX):
        return f"{tool} failed: {text[len(FAILED_PREFIX) :].rstrip(']').strip()}"
    if not text:
        return f"{tool} returned nothing."
    lines: list[str] = []
    used = 0
    whole = True
    for line in text.splitlines():
        cost = count_tokens(line, model=model)
        if len(lines) == QUOTE_LINES_MAX or (lines and used + cost > QUOTE_TOKENS_MAX):
            whole = False
            break
        if cost > QUOTE_TOKENS_MAX:
            line, whole = truncate_to_tokens(line, QUOTE_TOKENS_MAX, model=model) + "\u2026", False
        lines.append(line)
        used += cost
    quoted = "\n".join(f"> {line}" if line.strip() else ">" for line in lines)
    more = "" if whole else "\n(The whole result is in the tool step.)"
    return f"{tool} returned:\n{quoted}{more}"
