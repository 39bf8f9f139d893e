"""How ``builtin/recall`` reads its context: the question, what this turn already did, the memory
index, and the quotable sentences (units) with their attributions. The shapes are described in
``chat_platform.llm.builtin.recall``'s docstring (docs/compaction.md, §10)."""

import re
from dataclasses import dataclass, field

from chat_platform.llm.builtin.result import content_text
from chat_platform.llm.builtin.text import sentences, stem, terms
from chat_platform.llm.recall_protocol import (
    ANSWER_HEADER,
    INDEX_HEADER,
    READ_TOOL,
    SAVE_TOOL,
    SEARCH_TOOL,
    json_request,
)
from chat_platform.transcript import HEADER, RAW_HEADING, SPEAKER_NAME, STAMP, SUMMARY_HEADING

MAX_RECORDS_PER_REQUEST = 3

NO_MATCH_TEXT = (
    "I am the built-in recall model, not a language model: I can only quote what this "
    "conversation already holds, and I found nothing in it that matches your message."
)

RECORD_FRAME = re.compile(r"\[record ([a-z0-9_-]{1,80})\]")
# A search result's live-history hit (memory's HISTORY_HEADER): recalled data, like a record.
HISTORY_FRAME = re.compile(r"\[chat history: [^\]\n]*\]")
NOT_FOUND = re.compile(r"\[not found: ([a-z0-9_-]{1,80})\]")
_RESULT_LINE = re.compile(
    r"^\s*\[(?:not found(?:: [^\]]*)?|no matches|saved: [^\]]*|not saved: [^\]]*)\]\s*$"
)
# Blanks within the line only: ``\s*`` at a line start ran on through every following newline
# (the square of a run of blank lines), and so did a leading ``\s+`` tried at every blank of a
# run; the patterns below start a run of blanks only where it starts (``(?<!\s)``).
SAVED = re.compile(r"^[ \t]*\[saved: (?P<name>[a-z0-9_-]{1,80})\][ \t\r]*$", re.MULTILINE)
NOT_SAVED = re.compile(r"^[ \t]*\[not saved: (?P<reason>[^\]\n]*)\][ \t\r]*$", re.MULTILINE)
INDEX_LINE = re.compile(
    r"^\s*-\s+(?P<name>[a-z0-9_-]{1,80})\s+\((?P<kind>[\w-]+)"
    r"(?:,\s*messages\s+(?P<first>\d+)\s*[\u2013\u2014-]\s*(?P<last>\d+))?\)\s*:"
    r"\s*(?P<description>.*?)\s*$"
)
_SUMMARY_HEADER = re.compile(rf"^\s*\[{SUMMARY_HEADING} (?P<range>\d+\s*[\u2013\u2014-]\s*\d+)\]")
_BRACKET_LINE = re.compile(rf"^\s*{HEADER}\s*$")
_BLOCK_START = re.compile(rf"^\s*{HEADER}")
# "[12] 2024-03-08 13:56Z user: " (chat_platform.transcript), "[12] 2024-03-08 user: ",
# "[12] user: ", "user: ", "assistant (#13): ", "[14] tool (read_records): "
_SPEAKER = re.compile(
    r"^\s*(?:\[(?P<seq>\d+)\]\s*(?:(?P<date>\d{4}-\d{2}-\d{2})(?:[ T]\d{2}:\d{2}Z?)?\s+)?)?"
    r"(?P<role>user|assistant|tool|system)"
    r"(?:\s*\((?P<extra>[^)\n]{0,60})\))?\s*:(?:\s+|$)",
    re.IGNORECASE,
)
# A room's line names its speaker, after the date ("[13] 2024-03-08 13:57Z Dana: ",
# chat_platform.transcript.NAMED_SPEAKER): quoted as that speaker's.
_NAMED_SPEAKER = re.compile(
    rf"^\s*\[(?P<seq>\d+)\]\s*(?P<date>\d{{4}}-\d{{2}}-\d{{2}})(?:[ T]\d{{2}}:\d{{2}}Z?)?\s+"
    rf"(?P<name>{SPEAKER_NAME})\s*:(?:\s+|$)"
)
# The role ``_speaker`` gives a named line: this prefix, then the name.
_NAMED = "named:"
# Echoes of earlier answers and summaries: the fact lives in its source already.
_ECHO = re.compile(
    rf"^\s*>|{SUMMARY_HEADING} \d|\[{RAW_HEADING} \d|^\s*\(used [\w, ]+\)\s*$|"
    + re.escape(ANSWER_HEADER),
)
_OWN_LINE = re.compile(
    r"^\s*(?:Saved as [a-z0-9_-]{1,80}\.|I could not save that: .*|Noted\.)\s*$|"
    + re.escape(NO_MATCH_TEXT)
)
# "remember …", after any leading @mentions (a room's message to one bot names it first).
REMEMBER = re.compile(r"^\s*(?:@[\w.-]+[\s,:;]*)*remember\b[\s,:;-]*(?:that\b\s*)?", re.IGNORECASE)
# A speaker label inside a line (search excerpts run several transcript lines together).
_INLINE_SPEAKER = re.compile(
    rf"(?<!\s)\s+(?=\[\d+\]\s*(?:{STAMP}\s+)?(?:user|assistant|tool|system)\b)", re.IGNORECASE
)
_HIGHLIGHT = re.compile(r"\*\*")
_FRAGMENTS = re.compile(r"(?<!\s)\s+\u2026\s+")
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


@dataclass
class Exchange:
    """What this turn already did after the question."""

    kinds: set[str] = field(default_factory=set)  # read | search | save
    saved: str | None = None
    not_saved: str | None = None


# --- reading the context ----------------------------------------------------------------------


def _is_record_data(text: str) -> bool:
    first = next((line for line in text.splitlines() if line.strip()), "")
    return (
        RECORD_FRAME.match(first.strip()) is not None
        or HISTORY_FRAME.match(first.strip()) is not None
        or _RESULT_LINE.match(first) is not None
    )


def find_question(messages: list[dict]) -> int | None:
    """The last ``user`` message that is neither recalled data nor another bot's turn in a
    room (in a room every bot answers the person's message, not the bot before it)."""
    bots = room_bots(messages)
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if (
            message.get("role") == "user"
            and message.get("name") not in bots
            and not _is_record_data(content_text(message))
        ):
            return index
    return None


def read_files_request(text: str) -> list[str] | None:
    """The names in a ``{"read_files": {"files": [...]}}`` reply, or ``None`` if it is not one."""
    request = json_request(text)
    if request is None or request[0] != "read":
        return None
    names = request[1]
    assert isinstance(names, list)
    return names


_TOOL_KIND = {READ_TOOL: "read", SEARCH_TOOL: "search", SAVE_TOOL: "save"}


def exchange(messages: list[dict], question: int) -> Exchange:
    done = Exchange()
    for message in messages[question + 1 :]:
        role = message.get("role")
        text = content_text(message)
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                kind = _TOOL_KIND.get(str((call.get("function") or {}).get("name")))
                if kind:
                    done.kinds.add(kind)
            request = json_request(text)
            if request is not None:
                done.kinds.add(request[0])
        elif role in ("tool", "user", "system"):
            saved = SAVED.search(text)
            if saved:
                done.saved = saved.group("name")
            not_saved = NOT_SAVED.search(text)
            if not_saved:
                done.not_saved = not_saved.group("reason").strip()
    return done


def index_entries(messages: list[dict]) -> list[IndexEntry]:
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


def json_requests_invited(messages: list[dict]) -> bool:
    """Whether the context invites JSON recall requests: an index block that explains them (the
    pipeline leaves the invitation out when recall is closed — disabled, or its rounds used up —
    so a request would reach the user as text)."""
    for message in messages:
        if message.get("role") == "system":
            text = content_text(message)
            if text.lstrip().startswith(INDEX_HEADER) and '"read_files"' in text:
                return True
    return False


def _present_records(messages: list[dict], question: int) -> set[str]:
    present: set[str] = set()
    for index, message in enumerate(messages):
        if index != question:
            text = content_text(message)
            present.update(RECORD_FRAME.findall(text))
            present.update(NOT_FOUND.findall(text))
    return present


def records_to_request(messages: list[dict], question: int, question_terms: set[str]) -> list[str]:
    present = _present_records(messages, question)
    scored: list[tuple[int, int, str]] = []
    seen: set[str] = set()
    for entry in index_entries(messages):
        if entry.name in present or entry.name in seen:
            continue
        seen.add(entry.name)
        record_terms = set(terms(re.sub(r"[_-]", " ", entry.name) + " " + entry.description))
        score = len((record_terms - _INDEX_NOISE) & question_terms)
        if score:
            scored.append((-score, entry.position, entry.name))
    if not scored:
        return []
    scored.sort()
    best = scored[0][0]
    return [name for score, _, name in scored if score == best][:MAX_RECORDS_PER_REQUEST]


def _clean(text: str) -> str:
    return " ".join(_without_end_ellipses(_HIGHLIGHT.sub("", text)).split())


def _without_end_ellipses(text: str) -> str:
    """``text`` without the ellipses (``…``, ``...``) and blanks it starts or ends with. One
    walk from each end: a pattern anchored at the end was tried from every blank and dot of a
    long run of them (the square of its length)."""
    start, end = 0, len(text)
    while True:
        while start < end and text[start].isspace():
            start += 1
        if text.startswith("\u2026", start, end):
            start += 1
        elif text.startswith("...", start, end):
            start += 3
        else:
            break
    while True:
        while end > start and text[end - 1].isspace():
            end -= 1
        if text.endswith("\u2026", start, end):
            end -= 1
        elif text.endswith("...", start, end):
            end -= 3
        else:
            break
    return text[start:end]


def _speaker(line: str) -> tuple[str | None, str | None, str | None, str]:
    """(role, seq, date, rest) of a line with a speaker label, else (None, None, None, line)."""
    match = _SPEAKER.match(line)
    if match is not None:
        role = match.group("role").lower()
        return role, match.group("seq"), match.group("date"), line[match.end() :]
    named = _NAMED_SPEAKER.match(line)
    if named is not None:
        role = _NAMED + named.group("name")
        return role, named.group("seq"), named.group("date"), line[named.end() :]
    return None, None, None, line


def _said(role: str, seq: str | None, fallback: str, date: str | None = None) -> str | None:
    """The attribution of a labelled line; ``None`` for lines never quoted (tool, system).
    A dated line says the day too, so "when" questions get their answer."""
    if role.startswith(_NAMED):  # a room's user or another bot, by name
        who = f"{role.removeprefix(_NAMED)} said"
    elif role not in ("user", "assistant"):
        return None
    else:
        who = "you said" if role == "user" else "I said"
    if seq:
        return f"{who} in message {seq}" + (f", on {date}" if date else "")
    if fallback.startswith("summary of "):
        return f"{who} in {fallback.removeprefix('summary of ')}"
    return who


def is_echo(text: str) -> bool:
    """Whether ``text`` only echoes earlier quotes, summaries or this model's own answers,
    requests and confirmations (the fact, if any, lives in its source already)."""
    return bool(_ECHO.search(text) or _OWN_LINE.search(text) or json_request(text))


_is_echo = is_echo


class _Collector:
    def __init__(self) -> None:
        self.units: list[Unit] = []
        # The attribution of the last labelled line of a record or a search hit: the next lines
        # without a label of their own are the rest of that message (a code block, an
        # attached file's text), not the tool's words ("def f(x): — tool result").
        self.speaker: str | None = None

    def add(self, label: str, text: str) -> None:
        for fragment in _FRAGMENTS.split(text):
            for piece in sentences(_clean(fragment)):
                if piece and not _is_echo(piece) and terms(piece):
                    self.units.append(Unit(position=len(self.units), label=label, text=piece))

    def line(self, line: str, label: str) -> None:
        """A line of a summary or record: its speaker label, if any, becomes the attribution."""
        if _is_echo(line):
            return
        segments = _INLINE_SPEAKER.split(line)
        if len(segments) > 1:
            for segment in segments:
                self.line(segment, label)
            return
        stripped = line.strip()
        if (
            not stripped
            or _BRACKET_LINE.match(stripped)
            or INDEX_LINE.match(stripped)
            or _is_echo(stripped)
        ):
            return
        role, seq, date, rest = _speaker(stripped)
        if role is None:
            self.add(self.speaker or label, stripped)
            return
        said = _said(role, seq, label, date)
        if not label.startswith("summary of "):  # a summary's own prose is the summary's
            self.speaker = said
        if said is not None and not _is_echo(rest):
            self.add(said, REMEMBER.sub("", rest) if role == "user" else rest)


def _block_lines(lines: list[str], label: str, collector: _Collector) -> None:
    """Lines of a system/tool block: record frames switch the label to ``record <name>``."""
    collector.speaker = None
    for line in lines:
        stripped = line.strip()
        frame = RECORD_FRAME.match(stripped)
        if frame:
            label = f"record {frame.group(1)}"
            collector.speaker = None
            collector.line(stripped[frame.end() :], label)
            continue
        if HISTORY_FRAME.match(stripped):
            label, collector.speaker = "chat history", None
            continue
        summary = _SUMMARY_HEADER.match(stripped)
        if summary:
            label = f"summary of messages {summary.group('range')}"
            collector.speaker = None
            continue
        if stripped.startswith(INDEX_HEADER):
            label = "memory index"
            continue
        if _RESULT_LINE.match(stripped):
            continue
        if label == "memory index":
            continue
        collector.line(stripped, label)


# A room's speaker label: the pipeline starts every turn of someone else with ``Name: `` and
# sets ``name`` (docs/rooms.md, "Each bot's view").
_ROOM_LABEL = re.compile(r"^[^\n:]{1,120}: ")


# A room's header names each other bot as ``Name (@handle)``; their turns carry the handle as
# ``name`` (compaction/seats.py writes both).
_ROOM_HEADER = re.compile(r"^You are .* in a group chat with ")
_ROOM_BOT = re.compile(r"\(@([a-z0-9-]{1,60})\)")


def room_bots(messages: list[dict]) -> frozenset[str]:
    """The handles of the room's bots, from its header (none outside a room)."""
    for message in messages:
        if message.get("role") != "system":
            break
        text = content_text(message)
        if _ROOM_HEADER.match(text):
            return frozenset(_ROOM_BOT.findall(text))
    return frozenset()


def spoken_text(message: dict) -> str:
    """A message's text without a room's speaker label: the label is who spoke, not what was
    said (a room's user says "hello", not "demo: hello")."""
    text = content_text(message)
    if message.get("role") == "user" and message.get("name"):
        return _ROOM_LABEL.sub("", text, count=1)
    return text


def units_of(messages: list[dict], question: int) -> list[Unit]:
    collector = _Collector()
    # The leading system messages before any [bracketed] block are instructions: the bot's
    # prompt, the chat's instruction, a room's header, an API client's system message.
    instructions = True
    bots = room_bots(messages)
    for index, message in enumerate(messages):
        if index == question:
            continue
        role = message.get("role")
        text = spoken_text(message)
        if role != "system":
            instructions = False
        if not text.strip():
            continue
        lines = text.splitlines()
        if role == "user" and not _is_record_data(text):
            said = "you said"
            if message.get("name") in bots:  # another bot's turn: "Planner said"
                said = content_text(message)[: -len(text) or None].rstrip(": ") + " said"
            for line in lines:
                if not _is_echo(line):
                    collector.add(said, REMEMBER.sub("", line))
            continue
        if role == "assistant":
            if message.get("tool_calls") or _is_own_answer(text):
                continue
            for line in lines:
                if not _is_echo(line):
                    collector.add("I said", line)
            continue
        if instructions and role == "system":
            # The instructions are not quoted. They end at the first [bracketed] header, in
            # case everything shares one system message.
            start = next((i for i, line in enumerate(lines) if _BLOCK_START.match(line)), None)
            if start is None:
                continue
            instructions = False
            lines = lines[start:]
        _block_lines(lines, "tool result" if role == "tool" else "context", collector)
    return collector.units


def _search_result(messages: list[dict], question: int) -> str | None:
    """The text of this turn's latest search result: the ``tool`` message answering a
    ``search_records`` call, or the message after a ``{"search_records": …}`` reply."""
    found: str | None = None
    waiting: set[str] = set()  # ids of search calls not answered yet
    json_asked = False
    for message in messages[question + 1 :]:
        role = message.get("role")
        text = content_text(message)
        if role == "assistant":
            for call in message.get("tool_calls") or []:
                if (call.get("function") or {}).get("name") == SEARCH_TOOL:
                    waiting.add(str(call.get("id")))
            request = json_request(text)
            json_asked = request is not None and request[0] == "search"
            continue
        if json_asked or (role == "tool" and str(message.get("tool_call_id")) in waiting):
            found = text
        json_asked = False
    return found


def search_hits(messages: list[dict], question: int) -> list[list[Unit]]:
    """The quotable sentences of this turn's latest search result, one list per hit, best hit
    first as the search ranked them (hits are separated by a blank line, each led by its
    ``[record <name>]`` or history header)."""
    text = _search_result(messages, question)
    if text is None:
        return []
    hits: list[list[Unit]] = []
    for block in re.split(r"\n\s*\n", text):
        collector = _Collector()
        _block_lines(block.splitlines(), "tool result", collector)
        if collector.units:
            hits.append(collector.units)
    return hits


def _is_own_answer(text: str) -> bool:
    stripped = text.strip()
    return (
        stripped.startswith(ANSWER_HEADER)
        or _OWN_LINE.fullmatch(stripped) is not None
        or json_request(stripped) is not None
    )
