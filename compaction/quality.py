"""Summary quality gates (docs/compaction.md). Pure: stdlib only, no I/O.

``summary_gate`` decides whether a summariser's answer may replace the messages it covers:
reasoning blocks are stripped first, then the answer is rejected when it is empty, was cut off
(``finish_reason`` other than ``stop``), leaks tool-call protocol, is too short to carry anything,
or is not shorter than what it replaces.

Fact retention (``extract_facts`` / ``retention_score``) is ``compaction.facts``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

# --- reasoning --------------------------------------------------------------------------------

_REASONING_TAG = r"(?:think|thinking)"
_REASONING_BLOCK = re.compile(
    rf"<(?P<tag>{_REASONING_TAG})\b[^>]*>.*?</(?P=tag)\s*>", re.IGNORECASE | re.DOTALL
)
# A close tag with no open tag: templates that pre-fill "<think>" leave only "…reasoning</think>".
_ORPHAN_CLOSE = re.compile(rf"^.*</{_REASONING_TAG}\s*>", re.IGNORECASE | re.DOTALL)
# An open tag that is never closed: the answer was cut off while still reasoning.
_UNCLOSED_OPEN = re.compile(rf"<{_REASONING_TAG}\b[^>]*>.*\Z", re.IGNORECASE | re.DOTALL)


def strip_reasoning(text: str) -> str:
    """``text`` without reasoning blocks, stripped of surrounding whitespace.

    Removed, in this order: every closed ``<think>…</think>`` / ``<thinking>…</thinking>`` block
    (any case, any number, across lines); everything up to and including a remaining close tag
    whose open tag is missing; everything from a remaining unclosed open tag to the end.
    """
    text = _REASONING_BLOCK.sub("", text or "")
    text = _ORPHAN_CLOSE.sub("", text)
    text = _UNCLOSED_OPEN.sub("", text)
    return text.strip()


# --- tool-call protocol -----------------------------------------------------------------------

_TOOL_NAMES = r"(?:read_records|save_record|read_files)"
_TOOL_MARKUP = re.compile(
    r"""
      </?tool_(?:calls?|use|code|response|result|results|output)\b[^>\n]*>  # <tool_call> …
    | </?function_calls\b                          # <function_calls>
    | <function\s*=                                # <function=name> (Qwen / Llama XML style)
    | </function\s*>
    | <parameter\s*=                               # <parameter=name>
    | <parameter\s+name\s*=                        # <parameter name="…">
    | </?(?:antml:)?invoke\b                       # <invoke name="…">
    | </?antml:[a-z_]+                             # any antml: tag
    | <\|[a-z_]*tool[a-z_]*\|>                     # <|tool_call|>, <|tool_calls_section_begin|>
    | <\|python_tag\|>                             # Llama 3.1 built-in tool call
    | <\uff5ctool[^\uff5c>]*\uff5c>                # DeepSeek <｜tool▁calls▁begin｜>
    | \[TOOL_CALLS\]                               # Mistral
    | ```[ \t]*tool_(?:code|calls?|use)\b          # ```tool_code fences
    | "(?:tool_calls|function_call)"\s*:           # OpenAI message JSON
    | \{\s*"(?:read_files|read_records|save_record)"\s*:   # {"read_files": …}
    | \{\s*"name"\s*:\s*"[^"\n]*"\s*,\s*"(?:arguments|parameters)"\s*:  # truncated call JSON
    """
    + rf"| (?<![\w.]){_TOOL_NAMES}\s*\(  # read_records(…) call syntax",
    re.IGNORECASE | re.VERBOSE,
)
_JSON_OBJECT_START = re.compile(r"\{\s*\"")
_JSON_DECODER = json.JSONDecoder()


def _is_tool_call_object(value: object, depth: int = 0) -> bool:
    if depth > 8:
        return False
    if isinstance(value, list):
        return any(_is_tool_call_object(item, depth + 1) for item in value)
    if not isinstance(value, dict):
        return False
    keys = set(value)
    if keys & {"tool_calls", "function_call", "read_files", "read_records", "save_record"}:
        return True
    if "name" in keys and keys & {"arguments", "parameters"}:
        return True
    if value.get("type") in ("tool_use", "function") and keys & {"name", "function", "input"}:
        return True
    if "tool" in keys and keys & {"args", "arguments", "tool_input", "input", "parameters"}:
        return True
    if "action" in keys and "action_input" in keys:
        return True
    return any(_is_tool_call_object(item, depth + 1) for item in value.values())


def _json_objects(text: str) -> Iterator[object]:
    for match in _JSON_OBJECT_START.finditer(text):
        try:
            value, _end = _JSON_DECODER.raw_decode(text, match.start())
        except ValueError:
            continue
        yield value


def has_tool_syntax(text: str) -> bool:
    """True when tool-call protocol leaked into ``text`` (tags, call JSON, ``read_records(…)``).

    Prose that mentions tools, code fences of ordinary languages, ordinary JSON data and braces
    in prose are not tool syntax.
    """
    if not text:
        return False
    if _TOOL_MARKUP.search(text):
        return True
    return any(_is_tool_call_object(value) for value in _json_objects(text))


# --- the gate ---------------------------------------------------------------------------------

REASON_EMPTY = "empty"
REASON_FINISH = "finish_reason"
REASON_TOOL_SYNTAX = "tool_syntax"
REASON_TOO_SHORT = "too_short"
REASON_NOT_SHORTER = "not_shorter"


@dataclass(frozen=True)
class GateResult:
    ok: bool
    reason: str  # "" when ok, else one of the REASON_* values
    text: str  # the cleaned text (after strip_reasoning)
    tokens: int  # tokens of the cleaned text (by the counter passed in)


def summary_gate(
    *,
    text: str,
    finish_reason: str,
    replaced_tokens: int,
    count: Callable[[str], int],
    min_tokens: int = 10,
) -> GateResult:
    """Accept or reject a summary. Checks run in this order, the first failure wins:
    reasoning stripped -> ``empty`` -> ``finish_reason`` (anything but ``stop``, compared after
    trimming and lower-casing) -> ``tool_syntax`` -> ``too_short`` (``tokens < min_tokens``) ->
    ``not_shorter`` (``tokens >= replaced_tokens``)."""
    cleaned = strip_reasoning(text)
    if not cleaned:
        return GateResult(False, REASON_EMPTY, "", 0)
    tokens = count(cleaned)
    if (finish_reason or "").strip().lower() != "stop":
        return GateResult(False, REASON_FINISH, cleaned, tokens)
    if has_tool_syntax(cleaned):
        return GateResult(False, REASON_TOOL_SYNTAX, cleaned, tokens)
    if tokens < min_tokens:
        return GateResult(False, REASON_TOO_SHORT, cleaned, tokens)
    if tokens >= replaced_tokens:
        return GateResult(False, REASON_NOT_SHORTER, cleaned, tokens)
    return GateResult(True, "", cleaned, tokens)
