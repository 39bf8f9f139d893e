"""``builtin/recall``: answers by quoting the context it is given. Not a language model.

What it reads (the shapes the context pipeline renders; CONTRACT §7, §10):

* **The question** is the last ``user`` message that is not recalled data (does not contain a
  ``[record <name>]`` frame).
* **Bot instructions**: when the first message is a ``system`` message, its lines up to the first
  ``[…]`` header or record frame are the bot's system prompt and are never quoted (so the
  pipeline may render summaries into that same message, or into messages of their own).
* **Labelled system blocks**: a ``system`` message whose first line is a header — ``[…]``,
  ``# …`` or a short line ending in ``:`` (e.g. ``[Summary of messages 1–40]``) — is quoted with
  that header as its source label. Any other system block is labelled ``context``.
* **Memory index**: lines ``- <name> (<kind>, messages <first>–<last>): <description>`` inside a
  system message. They are never quoted; they are what recall may ask for.
* **Recalled records**: a message (``tool`` role, or a ``system`` block) containing a line that
  starts with ``[record <name>]``. Every line after that frame, up to the next frame, belongs to
  record ``<name>`` (text after the frame on the same line too) and is labelled ``record <name>``.
  A record with a frame anywhere in the context counts as already present. ``[not found: <name>]``
  lines are not quoted and mark ``<name>`` as already asked for.
* **History**: earlier ``user`` / ``assistant`` messages, labelled ``user`` / ``assistant``.
  Its own earlier quotes (lines starting ``>``) and recall requests are not quoted again.

What it does:

1. If an index record matches the question's words (name or description) and is not present
   (no ``[record <name>]`` or ``[not found: <name>]`` in context), it asks for up to 5 such
   records: a tool call ``read_records({"names": [...]})`` when a ``read_records`` function is
   offered (and ``tool_choice`` is not ``"none"``), else exactly
   ``{"read_files": {"files": [...]}}``.
   It asks at most once per question (after a ``read_records`` call or a ``read_files`` reply
   following the question, it answers), so a turn needs at most one recall round.
2. Otherwise it quotes the best few matching lines (word overlap weighted by rarity, questions
   count a third, ties go to the newer line), in context order, each with its source.
3. With nothing matching it says so plainly.
"""

import hashlib
import json
import math
import re
from dataclasses import dataclass

from chat_platform.llm.builtin.result import BuiltinResult, content_text, prompt_tokens
from chat_platform.llm.builtin.text import sentences, stem, terms
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens

MODEL = "builtin/recall"
RECALL_TOOL = "read_records"
MAX_RECORDS_PER_REQUEST = 5
MAX_QUOTES = 4
# A quote must score at least this share of the best quote's score.
QUOTE_MIN_SHARE = 0.5
# Lines longer than this are quoted sentence by sentence.
LONG_LINE_CHARS = 300

ANSWER_HEADER = "From earlier in our conversation:"
NO_MATCH_TEXT = (
    "I am the built-in recall model, not a language model: I can only quote what this "
    "conversation already holds, and I found nothing in it that matches your message."
)

RECORD_FRAME = re.compile(r"\[record ([a-z0-9_-]{1,80})\]")
NOT_FOUND = re.compile(r"\[not found: ([a-z0-9_-]{1,80})\]")
INDEX_LINE = re.compile(
    r"^\s*-\s+(?P<name>[a-z0-9_-]{1,80})\s+\((?P<kind>[\w-]+),\s*messages\s+"
    r"(?P<first>\d+)\s*[\u2013\u2014-]\s*(?P<last>\d+)\)\s*:\s*(?P<description>.*?)\s*$"
)
_HEADER = re.compile(r"^\s*(?:\[(?P<bracket>[^\[\]\n]{1,160})\]|#{1,6}\s+(?P<hash>.{1,160}?))\s*$")
_BLOCK_START = re.compile(r"^\s*\[(?!not found:)[^\[\]\n]{1,160}\]")
_COLON_HEADER = re.compile(r"^\s*(?P<colon>[^:\n]{1,80}):\s*$")
# Words of index boilerplate that say nothing about a record's topic.
_INDEX_NOISE = frozenset(stem(w) for w in ("snapshot", "pre", "compaction", "messages"))


@dataclass(frozen=True)
class IndexEntry:
    name: str
    kind: str
    description: str
    position: int


@dataclass(frozen=True)
class Unit:
    position: int
    label: str
    text: str


def _header(line: str) -> str | None:
    match = _HEADER.match(line)
    if match and not RECORD_FRAME.fullmatch(line.strip()):
        return (match.group("bracket") or match.group("hash")).strip()
    match = _COLON_HEADER.match(line)
    if match and len(match.group("colon").split()) <= 8:
        return match.group("colon").strip()
    return None


def _find_question(messages: list[dict]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and not RECORD_FRAME.search(content_text(message)):
            return index
    return None


def _requested_after(messages: list[dict], question: int) -> set[str]:
    names: set[str] = set()
    for message in messages[question + 1 :]:
        if message.get("role") != "assistant":
            continue
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            if function.get("name") != RECALL_TOOL:
                continue
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except ValueError:
                continue
            names.update(n for n in arguments.get("names") or [] if isinstance(n, str))
        files = read_files_request(content_text(message))
        if files:
            names.update(files)
    return names


def read_files_request(text: str) -> list[str] | None:
    """The names in a ``{"read_files": {"files": [...]}}`` reply, or ``None`` if it is not one."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    files = data.get("read_files", {}).get("files") if isinstance(data, dict) else None
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return files


def _index_entries(messages: list[dict]) -> list[IndexEntry]:
    entries: list[IndexEntry] = []
    for message in messages:
        if message.get("role") != "system":
            continue
        for line in content_text(message).splitlines():
            match = INDEX_LINE.match(line)
            if match:
                entries.append(
                    IndexEntry(
                        name=match.group("name"),
                        kind=match.group("kind"),
                        description=match.group("description"),
                        position=len(entries),
                    )
                )
    return entries


def _records_to_request(messages: list[dict], question: int, question_terms: set[str]) -> list[str]:
    present: set[str] = set()
    for index, message in enumerate(messages):
        if index != question:
            text = content_text(message)
            present.update(RECORD_FRAME.findall(text))
            present.update(NOT_FOUND.findall(text))
    if _requested_after(messages, question):
        return []  # one recall round per question: now answer from what arrived
    scored: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for entry in _index_entries(messages):
        if entry.name in present or entry.name in seen:
            continue
        seen.add(entry.name)
        record_terms = set(terms(re.sub(r"[_-]", " ", entry.name) + " " + entry.description))
        score = len((record_terms - _INDEX_NOISE) & question_terms)
        if score:
            scored.append((-score, entry.position, entry.name))
    scored.sort()
    return [name for _, _, name in scored[:MAX_RECORDS_PER_REQUEST]]


def _is_own_output(line: str) -> bool:
    stripped = line.strip()
    return stripped.startswith(">") or stripped in (ANSWER_HEADER, NO_MATCH_TEXT)


def _units(messages: list[dict], question: int) -> list[Unit]:
    units: list[Unit] = []

    def add(label: str, line: str) -> None:
        line = line.strip()
        if not line or INDEX_LINE.match(line) or NOT_FOUND.search(line):
            return
        pieces = sentences(line) if len(line) > LONG_LINE_CHARS else [line]
        units.extend(
            Unit(position=len(units) + i, label=label, text=p) for i, p in enumerate(pieces)
        )

    for index, message in enumerate(messages):
        if index == question:
            continue
        role = message.get("role")
        text = content_text(message)
        if not text.strip():
            continue
        lines = text.splitlines()
        if role in ("user", "assistant") and not RECORD_FRAME.search(text):
            if role == "assistant" and read_files_request(text) is not None:
                continue
            for line in lines:
                if role == "assistant" and _is_own_output(line):
                    continue
                add(role, line)
            continue
        # system and tool messages (and any message carrying record frames)
        if index == 0 and role == "system":
            # The bot's own instructions come first and are not quoted. They end at the first
            # [bracketed] header or record frame, in case everything shares one system message.
            start = next((i for i, line in enumerate(lines) if _BLOCK_START.match(line)), None)
            if start is None:
                continue
            lines = lines[start:]
        first = next((line for line in lines if line.strip()), "")
        header = _header(first)
        label = header or ("tool result" if role == "tool" else "context")
        in_record = False
        for line in lines:
            if NOT_FOUND.search(line):
                continue
            frame = RECORD_FRAME.search(line)
            if frame and line.strip().startswith(frame.group()):
                label, in_record = f"record {frame.group(1)}", True
                add(label, line.strip()[len(frame.group()) :])
                continue
            line_header = _header(line)
            if line_header is not None:
                if not in_record:  # inside a record, its own headings are just its text
                    label = line_header
                continue
            add(label, line)
    return units


def _choose_quotes(units: list[Unit], question_terms: set[str]) -> list[Unit]:
    unit_terms = [set(terms(u.text)) for u in units]
    document_frequency: dict[str, int] = {}
    for found in unit_terms:
        for term in found & question_terms:
            document_frequency[term] = document_frequency.get(term, 0) + 1
    total = len(units)
    scored: list[tuple[float, int, Unit]] = []
    for unit, found in zip(units, unit_terms, strict=True):
        matched = found & question_terms
        if not matched:
            continue
        score = sum(math.log(1 + (total + 1) / document_frequency[t]) for t in matched)
        if unit.text.rstrip().endswith(("?", "\uff1f")):
            score /= 3  # an earlier question rarely holds the answer
        scored.append((round(score, 9), unit.position, unit))
    if not scored:
        return []
    scored.sort(key=lambda item: (-item[0], -item[1]))
    best = scored[0][0]
    chosen: list[Unit] = []
    seen_text: set[str] = set()
    for score, _, unit in scored:
        if len(chosen) == MAX_QUOTES or score < best * QUOTE_MIN_SHARE:
            break
        key = " ".join(unit.text.lower().split())
        if key in seen_text:
            continue
        seen_text.add(key)
        chosen.append(unit)
    return sorted(chosen, key=lambda u: u.position)


def _answer(quotes: list[Unit], max_tokens: int | None) -> tuple[str, str]:
    if not quotes:
        text = NO_MATCH_TEXT
    else:
        lines = [ANSWER_HEADER]
        for quote in quotes:
            candidate = [*lines, f"> {quote.text} \u2014 {quote.label}"]
            too_long = (
                max_tokens is not None
                and len(lines) > 1
                and count_tokens("\n".join(candidate), model=MODEL) > max_tokens
            )
            if too_long:
                break
            lines = candidate
        text = "\n".join(lines)
    if max_tokens is not None and count_tokens(text, model=MODEL) > max_tokens:
        return truncate_to_tokens(text, max_tokens, model=MODEL), "length"
    return text, "stop"


def _tool_call(names: list[str]) -> dict:
    arguments = json.dumps({"names": names})
    digest = hashlib.sha256(arguments.encode()).hexdigest()[:24]
    return {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": RECALL_TOOL, "arguments": arguments},
    }


def _offers_recall_tool(tools: list[dict] | None, tool_choice: object) -> bool:
    if tool_choice == "none":
        return False
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == RECALL_TOOL:
            return True
    return False


def respond(
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    tool_choice: object = None,
    max_tokens: int | None = None,
) -> BuiltinResult:
    prompt = prompt_tokens(messages, model=MODEL)
    question = _find_question(messages)
    question_terms = set(terms(content_text(messages[question]))) if question is not None else set()

    if question is not None and question_terms:
        names = _records_to_request(messages, question, question_terms)
        if names:
            if _offers_recall_tool(tools, tool_choice):
                call = _tool_call(names)
                return BuiltinResult(
                    text="",
                    finish_reason="tool_calls",
                    prompt_tokens=prompt,
                    completion_tokens=count_tokens(
                        RECALL_TOOL + call["function"]["arguments"], model=MODEL
                    ),
                    tool_calls=[call],
                )
            text = json.dumps({"read_files": {"files": names}})
            return BuiltinResult(
                text=text,
                finish_reason="stop",
                prompt_tokens=prompt,
                completion_tokens=count_tokens(text, model=MODEL),
            )

    quotes: list[Unit] = []
    if question is not None and question_terms:
        quotes = _choose_quotes(_units(messages, question), question_terms)
    text, finish_reason = _answer(quotes, max_tokens)
    return BuiltinResult(
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=prompt,
        completion_tokens=count_tokens(text, model=MODEL),
    )
