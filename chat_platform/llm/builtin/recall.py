"""``builtin/recall``: answers by quoting the context it is given. Not a language model.

What it reads (the shapes the context pipeline renders; docs/compaction.md, §10):

* **The question** is the last ``user`` message that is not recalled data (does not start with
  a ``[record <name>]`` frame). Everything after it is this turn's recall exchange.
* **Bot instructions**: when the first message is a ``system`` message, its lines up to the first
  ``[…]`` header are the bot's system prompt and are never quoted.
* **Summaries**: a ``system`` message whose first line is ``[Summary of messages A–B]``. Its lines
  are extractive output (``[12] user: …``, ``user: …`` or plain text); the speaker label becomes
  the attribution (``you said in message 12``), never part of the quote.
* **Memory index**: a ``system`` message whose first line is ``[Memory index: records you can
  read]``, with lines ``- <name> (<kind>, messages <first>–<last>): <description>`` or
  ``- <name> (info): <description>``. Never quoted; they are what recall may ask for.
* **Recalled records**: a message (``tool`` role, a ``system`` block or an injected ``user``
  message) with lines ``[record <name>]`` followed by the record's body or a search excerpt
  (matches wrapped in ``**…**``). ``[not found: <name>]``, ``[no matches]``, ``[saved: <name>]``
  and ``[not saved: <reason>]`` are results, never quoted.
* **History**: earlier ``user`` / ``assistant`` messages (``you said`` / ``I said``). Assistant
  messages may carry ``tool_calls``; ``tool`` messages carry their results.

Never quoted: headers (``[Summary of …]``, ``[Raw messages …]``), speaker labels, lines that
echo earlier quotes (``>``, ``— Summary of messages …``), its own answers, requests and
confirmations.

What it does, for a question:

1. If the context already answers it (a quotable sentence holds at least 60 % of the question's
   content words), it quotes.
2. Otherwise, once per question: if the index lists a matching record that is not in context, it
   asks for it — ``read_records({"names": [...]})`` when that tool is offered, else exactly
   ``{"read_files": {"files": [...]}}``. What was read answers when a sentence holds half of
   the question's content words and every one of them is said somewhere in context or in the
   index; a word neither says (the "flight" of "What is the flight number?" after a read that
   holds only an invoice number) leads to the search.
3. Otherwise, once per question, when memory is in play (an index block, or the search tool is
   offered): ``search_records({"query": "<the question's content words>"})``, else exactly
   ``{"search_records": {"query": "..."}}``.
4. Then it answers: up to three short quotes, best matching first in context order, each with its
   source, at most ``MAX_ANSWER_TOKENS`` tokens; or says plainly that nothing matches.

``tool_choice: "none"`` means answer now: no request of either form.

A user message starting with "remember" is saved: a ``save_record`` tool call (name from the
fact's content words, scope ``bot``) when that tool is offered, then ``Saved as <name>.`` once the
``[saved: <name>]`` result arrives; without the tool it acknowledges.
"""

import hashlib
import json
import math
import re
from dataclasses import dataclass, field

from chat_platform.llm.builtin.result import BuiltinResult, content_text, prompt_tokens
from chat_platform.llm.builtin.text import STOPWORDS, sentences, stem, terms
from chat_platform.llm.recall_protocol import (
    ANSWER_HEADER,
    INDEX_HEADER,
    READ_TOOL,
    SAVE_TOOL,
    SEARCH_TOOL,
    json_request,
)
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from chat_platform.stopwords import WORD
from chat_platform.transcript import HEADER, RAW_HEADING, STAMP, SUMMARY_HEADING

MODEL = "builtin/recall"
MAX_RECORDS_PER_REQUEST = 3
MAX_QUOTES = 3
# A quote must score at least this share of the best quote's score.
QUOTE_MIN_SHARE = 0.5
# A quote that answers another part of the question needs at least this share of the best score.
COVER_MIN_SHARE = 0.3
# The context answers a question when one sentence holds this share of its content words.
ANSWERED_SHARE = 0.6
# ... or half of them once a read brought records in (the search is for when it brought nothing).
ANSWERED_AFTER_READ_SHARE = 0.5
MAX_ANSWER_TOKENS = 120
QUOTE_MAX_TOKENS = 40
MAX_QUERY_WORDS = 8
DESCRIPTION_MAX_CHARS = 140
NAME_MAX_WORDS = 3

NO_MATCH_TEXT = (
    "I am the built-in recall model, not a language model: I can only quote what this "
    "conversation already holds, and I found nothing in it that matches your message."
)
NOTED_TEXT = "Noted."

RECORD_FRAME = re.compile(r"\[record ([a-z0-9_-]{1,80})\]")
NOT_FOUND = re.compile(r"\[not found: ([a-z0-9_-]{1,80})\]")
_RESULT_LINE = re.compile(
    r"^\s*\[(?:not found(?:: [^\]]*)?|no matches|saved: [^\]]*|not saved: [^\]]*)\]\s*$"
)
SAVED = re.compile(r"^\s*\[saved: (?P<name>[a-z0-9_-]{1,80})\]\s*$", re.MULTILINE)
NOT_SAVED = re.compile(r"^\s*\[not saved: (?P<reason>[^\]\n]*)\]\s*$", re.MULTILINE)
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
# Echoes of earlier answers and summaries: the fact lives in its source already.
_ECHO = re.compile(
    rf"^\s*>|{SUMMARY_HEADING} \d|\[{RAW_HEADING} \d|^\s*\(used [\w, ]+\)\s*$|"
    + re.escape(ANSWER_HEADER),
)
_OWN_LINE = re.compile(
    r"^\s*(?:Saved as [a-z0-9_-]{1,80}\.|I could not save that: .*|Noted\.)\s*$|"
    + re.escape(NO_MATCH_TEXT)
)
_REMEMBER = re.compile(r"^\s*remember\b[\s,:;-]*(?:that\b\s*)?", re.IGNORECASE)
# A speaker label inside a line (search excerpts run several transcript lines together).
_INLINE_SPEAKER = re.compile(
    rf"\s+(?=\[\d+\]\s*(?:{STAMP}\s+)?(?:user|assistant|tool|system)\b)", re.IGNORECASE
)
# First words of questions and requests; a message starting otherwise (and not ending in "?")
# is a statement, which is acknowledged, not answered.
_ASKING = frozenset(
    """
    what what's whats when when's where where's which who who's whom whose why how how's
    do does did is are was were am can could would will should shall may might have has had
    tell remind recall show list give find say repeat quote search look check any anything
    please summarise summarize explain describe name
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
_FIRST_WORD = re.compile(r"[^\W\d_]+(?:['\u2019][^\W\d_]+)?")
STATEMENT_MIN_WORDS = 4
FRAGMENT_MAX_WORDS = 3
_HIGHLIGHT = re.compile(r"\*\*")
_ELLIPSIS = re.compile(r"^(?:\s*(?:\u2026|\.\.\.))+\s*|(?:\s*(?:\u2026|\.\.\.))+\s*$")
_FRAGMENTS = re.compile(r"\s+\u2026\s+")
_NAME_WORD = re.compile(r"[a-z0-9]+")
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
    return RECORD_FRAME.match(first.strip()) is not None or _RESULT_LINE.match(first) is not None


def _find_question(messages: list[dict]) -> int | None:
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if message.get("role") == "user" and not _is_record_data(content_text(message)):
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


def _exchange(messages: list[dict], question: int) -> Exchange:
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


def _json_requests_invited(messages: list[dict]) -> bool:
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


def _records_to_request(messages: list[dict], question: int, question_terms: set[str]) -> list[str]:
    present = _present_records(messages, question)
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
    if not scored:
        return []
    scored.sort()
    best = scored[0][0]
    return [name for score, _, name in scored if score == best][:MAX_RECORDS_PER_REQUEST]


def _clean(text: str) -> str:
    text = _HIGHLIGHT.sub("", text)
    text = _ELLIPSIS.sub("", text)
    return " ".join(text.split())


def _speaker(line: str) -> tuple[str | None, str | None, str | None, str]:
    """(role, seq, date, rest) of a line with a speaker label, else (None, None, None, line)."""
    match = _SPEAKER.match(line)
    if match is None:
        return None, None, None, line
    return match.group("role").lower(), match.group("seq"), match.group("date"), line[match.end() :]


def _said(role: str, seq: str | None, fallback: str, date: str | None = None) -> str | None:
    """The attribution of a labelled line; ``None`` for lines never quoted (tool, system).
    A dated line says the day too, so "when" questions get their answer."""
    if role not in ("user", "assistant"):
        return None
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
            self.add(label, stripped)
            return
        said = _said(role, seq, label, date)
        if said is not None and not _is_echo(rest):
            self.add(said, _REMEMBER.sub("", rest) if role == "user" else rest)


def _block_lines(lines: list[str], label: str, collector: _Collector) -> None:
    """Lines of a system/tool block: record frames switch the label to ``record <name>``."""
    for line in lines:
        stripped = line.strip()
        frame = RECORD_FRAME.match(stripped)
        if frame:
            label = f"record {frame.group(1)}"
            collector.line(stripped[frame.end() :], label)
            continue
        summary = _SUMMARY_HEADER.match(stripped)
        if summary:
            label = f"summary of messages {summary.group('range')}"
            continue
        if stripped.startswith(INDEX_HEADER):
            label = "memory index"
            continue
        if _RESULT_LINE.match(stripped):
            continue
        if label == "memory index":
            continue
        collector.line(stripped, label)


def _units(messages: list[dict], question: int) -> list[Unit]:
    collector = _Collector()
    for index, message in enumerate(messages):
        if index == question:
            continue
        role = message.get("role")
        text = content_text(message)
        if not text.strip():
            continue
        lines = text.splitlines()
        if role == "user" and not _is_record_data(text):
            for line in lines:
                if not _is_echo(line):
                    collector.add("you said", _REMEMBER.sub("", line))
            continue
        if role == "assistant":
            if message.get("tool_calls") or _is_own_answer(text):
                continue
            for line in lines:
                if not _is_echo(line):
                    collector.add("I said", line)
            continue
        if index == 0 and role == "system":
            # The bot's own instructions come first and are not quoted. They end at the first
            # [bracketed] header, in case everything shares one system message.
            start = next((i for i, line in enumerate(lines) if _BLOCK_START.match(line)), None)
            if start is None:
                continue
            lines = lines[start:]
        _block_lines(lines, "tool result" if role == "tool" else "context", collector)
    return collector.units


def _is_own_answer(text: str) -> bool:
    stripped = text.strip()
    return (
        stripped.startswith(ANSWER_HEADER)
        or _OWN_LINE.fullmatch(stripped) is not None
        or json_request(stripped) is not None
    )


# --- choosing quotes --------------------------------------------------------------------------


def _is_question(text: str) -> bool:
    return text.rstrip().endswith(("?", "\uff1f"))


def _is_fragment(text: str) -> bool:
    words = text.split()
    return len(words) < FRAGMENT_MAX_WORDS or (
        text[:1].islower() and not text.rstrip().endswith((".", "!", "\u3002"))
    )


def is_statement(text: str) -> bool:
    """A plain statement ("My locker code is 4471."): not a question, not a request, at least
    ``STATEMENT_MIN_WORDS`` words (a few bare words are a lookup, like a search box)."""
    stripped = text.strip()
    if not stripped or _is_question(stripped) or "?" in stripped:
        return False
    words = stripped.split()
    if len(words) < STATEMENT_MIN_WORDS:
        return False
    first = _FIRST_WORD.search(stripped)
    if first is None:
        return False  # no Latin-script words (e.g. CJK): treat as a lookup
    return first.group().lower().replace("\u2019", "'") not in _ASKING


def _choose_quotes(units: list[Unit], question_terms: set[str]) -> tuple[list[Unit], float]:
    """(the quotes, in context order; the share of the question's terms the best statement
    holds)."""
    unit_terms = [set(terms(u.text)) for u in units]
    document_frequency: dict[str, int] = {}
    for found in unit_terms:
        for term in found & question_terms:
            document_frequency[term] = document_frequency.get(term, 0) + 1
    total = len(units)
    scored: list[tuple[float, int, Unit]] = []
    coverage = 0.0
    for unit, found in zip(units, unit_terms, strict=True):
        matched = found & question_terms
        if not matched:
            continue
        score = sum(math.log(1 + (total + 1) / document_frequency[t]) for t in matched)
        if _is_question(unit.text):
            score /= 3  # an earlier question rarely holds the answer
        elif _is_fragment(unit.text):
            score /= 2  # a piece cut out of a sentence (a search excerpt's edge)
        else:
            coverage = max(coverage, len(matched) / len(question_terms))
        scored.append((round(score, 9), unit.position, unit))
    if not scored:
        return [], 0.0
    # A fragment of a sentence quoted whole elsewhere (a search excerpt cut mid-sentence) is
    # left to the whole sentence.
    flat = [(" ".join(u.text.lower().split()), u) for _, _, u in scored]
    scored = [
        item
        for item, (text, unit) in zip(scored, flat, strict=True)
        if not any(text != other and text in other for other, _ in flat)
    ]
    scored.sort(key=lambda item: (-item[0], -item[1]))
    best = scored[0][0]
    chosen: list[Unit] = []
    seen_text: set[str] = set()
    covered: set[str] = set()

    def take(unit: Unit) -> None:
        seen_text.add(" ".join(terms(unit.text)))
        chosen.append(unit)
        if not _is_question(unit.text):
            covered.update(set(terms(unit.text)) & question_terms)

    # First the statements that bring question words no earlier pick covered (a question in two
    # parts gets both answers), then the strongest of the rest.
    for score, _, unit in scored:
        if len(chosen) == MAX_QUOTES or score < best * COVER_MIN_SHARE:
            break
        new = (set(terms(unit.text)) & question_terms) - covered
        if new and not _is_question(unit.text) and " ".join(terms(unit.text)) not in seen_text:
            take(unit)
    for score, _, unit in scored:
        if len(chosen) == MAX_QUOTES or score < best * QUOTE_MIN_SHARE:
            break
        if unit not in chosen and " ".join(terms(unit.text)) not in seen_text:
            take(unit)
    return sorted(chosen, key=lambda u: u.position), coverage


def _unsaid(units: list[Unit], index: list[IndexEntry], question_terms: set[str]) -> set[str]:
    """The question's words that neither a statement in context nor the memory index says
    ("flight" of "What is the flight number?" when what was read says only "the invoice number
    is INV-30017" and its index line only "The invoice number and due date"). A word the index
    line of what was read says ("food" of "Food allergies and diet") was read for."""
    said: set[str] = set()
    for unit in units:
        if not _is_question(unit.text):
            said.update(terms(unit.text))
    for entry in index:
        said.update(terms(re.sub(r"[_-]", " ", entry.name) + " " + entry.description))
    return question_terms - said


def _quote_line(unit: Unit) -> str:
    text = unit.text
    if count_tokens(text, model=MODEL) > QUOTE_MAX_TOKENS:
        text = truncate_to_tokens(text, QUOTE_MAX_TOKENS, model=MODEL).rstrip() + "\u2026"
    return f"> {text} \u2014 {unit.label}"


def _answer(quotes: list[Unit], max_tokens: int | None) -> tuple[str, str]:
    cap = MAX_ANSWER_TOKENS if max_tokens is None else min(max_tokens, MAX_ANSWER_TOKENS)
    if not quotes:
        text = NO_MATCH_TEXT
    else:
        lines = [ANSWER_HEADER]
        for quote in quotes:
            candidate = [*lines, _quote_line(quote)]
            if len(lines) > 1 and count_tokens("\n".join(candidate), model=MODEL) > cap:
                break
            lines = candidate
        text = "\n".join(lines)
        if count_tokens(text, model=MODEL) > cap and (max_tokens is None or cap < max_tokens):
            text = truncate_to_tokens(text, cap, model=MODEL).rstrip() + "\u2026"
    if max_tokens is not None and count_tokens(text, model=MODEL) > max_tokens:
        return truncate_to_tokens(text, max_tokens, model=MODEL), "length"
    return text, "stop"


# --- requests ---------------------------------------------------------------------------------


def _offered(tools: list[dict] | None, name: str) -> bool:
    for tool in tools or []:
        function = tool.get("function") if isinstance(tool, dict) else None
        if isinstance(function, dict) and function.get("name") == name:
            return True
    return False


def _tool_call(name: str, arguments: dict) -> dict:
    encoded = json.dumps(arguments)
    digest = hashlib.sha256(f"{name}{encoded}".encode()).hexdigest()[:24]
    return {
        "id": f"call_{digest}",
        "type": "function",
        "function": {"name": name, "arguments": encoded},
    }


def _call_result(name: str, arguments: dict, prompt: int) -> BuiltinResult:
    call = _tool_call(name, arguments)
    return BuiltinResult(
        text="",
        finish_reason="tool_calls",
        prompt_tokens=prompt,
        completion_tokens=count_tokens(name + call["function"]["arguments"], model=MODEL),
        tool_calls=[call],
    )


def _text_result(text: str, prompt: int, finish_reason: str = "stop") -> BuiltinResult:
    return BuiltinResult(
        text=text,
        finish_reason=finish_reason,
        prompt_tokens=prompt,
        completion_tokens=count_tokens(text, model=MODEL),
    )


def search_query(question: str) -> str:
    """The question's content words, in order, without repeats (at most MAX_QUERY_WORDS)."""
    words: list[str] = []
    seen: set[str] = set()
    for word in WORD.findall(question):
        lower = word.lower()
        if lower in STOPWORDS or (len(lower) == 1 and not lower.isdigit()):
            continue
        key = stem(lower)
        if key in seen:
            continue
        seen.add(key)
        words.append(word)
    return " ".join(words[:MAX_QUERY_WORDS])


# --- "remember …" -----------------------------------------------------------------------------


def is_remember(text: str) -> bool:
    """A user message starting with "remember" that is not a question ("Remember what …?")."""
    return _REMEMBER.match(text) is not None and not _is_question(text)


def remembered_fact(text: str) -> str:
    """``"Remember that my locker code is 4471"`` -> ``"My locker code is 4471."``."""
    fact = " ".join(_REMEMBER.sub("", text.strip(), count=1).split())
    if not fact:
        return ""
    fact = fact[0].upper() + fact[1:]
    return fact if fact.endswith((".", "!", "?", "\u3002")) else fact + "."


def record_name(fact: str) -> str:
    """A record name from the fact's first content words (numbers left out): ``locker_code``."""
    words: list[str] = []
    for match in WORD.finditer(fact.lower()):
        word = re.sub(r"['\u2019]s$", "", match.group())
        if word in STOPWORDS or len(word) < 2 or word.isdigit():
            continue
        ascii_word = "".join(_NAME_WORD.findall(word))
        if ascii_word and not ascii_word.isdigit() and ascii_word not in words:
            words.append(ascii_word)
        if len(words) == NAME_MAX_WORDS:
            break
    if words:
        return "_".join(words)[:80].strip("_")
    return "note_" + hashlib.sha256(fact.encode()).hexdigest()[:8]


def _description(fact: str) -> str:
    if len(fact) <= DESCRIPTION_MAX_CHARS:
        return fact
    return fact[: DESCRIPTION_MAX_CHARS - 1].rstrip() + "\u2026"


def _remember(
    question: str, done: Exchange, tools: list[dict] | None, may_call: bool, prompt: int
) -> BuiltinResult:
    if done.saved:
        return _text_result(f"Saved as {done.saved}.", prompt)
    if done.not_saved is not None:
        return _text_result(f"I could not save that: {done.not_saved}", prompt)
    fact = remembered_fact(question)
    if fact and may_call and "save" not in done.kinds and _offered(tools, SAVE_TOOL):
        arguments = {
            "name": record_name(fact),
            "description": _description(fact),
            "body": fact,
            "scope": "bot",
        }
        return _call_result(SAVE_TOOL, arguments, prompt)
    return _text_result(NOTED_TEXT, prompt)


# --- the model --------------------------------------------------------------------------------


def respond(
    messages: list[dict],
    *,
    tools: list[dict] | None = None,
    tool_choice: object = None,
    max_tokens: int | None = None,
) -> BuiltinResult:
    prompt = prompt_tokens(messages, model=MODEL)
    question = _find_question(messages)
    if question is None:
        return _text_result(NO_MATCH_TEXT, prompt)
    question_text = content_text(messages[question])
    may_call = tool_choice != "none"
    done = _exchange(messages, question)
    if is_remember(question_text):
        return _remember(question_text, done, tools, may_call, prompt)

    if is_statement(question_text):
        return _text_result(NOTED_TEXT, prompt)
    question_terms = set(terms(question_text))
    if not question_terms:
        return _text_result(NO_MATCH_TEXT, prompt)
    units = _units(messages, question)
    quotes, coverage = _choose_quotes(units, question_terms)
    enough = ANSWERED_AFTER_READ_SHARE if "read" in done.kinds else ANSWERED_SHARE
    if "read" in done.kinds and _unsaid(units, _index_entries(messages), question_terms):
        enough = math.inf  # what was read half-matches: the words it lacks may be elsewhere
    if coverage < enough and may_call:
        if "read" not in done.kinds:
            names = _records_to_request(messages, question, question_terms)
            if names:
                if _offered(tools, READ_TOOL):
                    return _call_result(READ_TOOL, {"names": names}, prompt)
                if _json_requests_invited(messages):
                    return _text_result(json.dumps({"read_files": {"files": names}}), prompt)
        query = search_query(question_text)
        searchable = _offered(tools, SEARCH_TOOL) or _json_requests_invited(messages)
        if "search" not in done.kinds and query and searchable:
            if _offered(tools, SEARCH_TOOL):
                return _call_result(SEARCH_TOOL, {"query": query}, prompt)
            return _text_result(json.dumps({"search_records": {"query": query}}), prompt)
    text, finish_reason = _answer(quotes, max_tokens)
    return _text_result(text, prompt, finish_reason)
