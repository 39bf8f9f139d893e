"""``builtin/extractive``: a fact-preserving extractive summariser (deterministic, offline).

Input (what the compaction engine sends; docs/compaction.md):

* a ``system`` message with instructions (ignored, except a ``Focus: <text>`` line), and
* a ``user`` message holding the transcript — optionally inside ``<transcript>…</transcript>``,
  optionally preceded by instructions, optionally with a ``Focus: <text>`` line. Transcript lines
  start with a speaker label (``user: …``, ``assistant: …``, ``[12] user: …``,
  ``assistant (#13): …``, a room's ``[12] 2024-03-08 13:56Z Dana: …``, or a capitalised name
  such as ``Alice: …``); unlabelled lines continue the previous speaker. A whole-line ``[…]``
  header (``[Summary of messages 1–40]``) starts a section whose unlabelled lines stand alone
  (earlier summaries being fused). Text before the first label or header is instructions.

Output: the sentences that carry facts — numbers, dates, identifiers, names, decisions,
preferences, requests, and the focus words — each turn's kept sentences on one line behind the
turn's original speaker label, in original order. Within the output budget (``max_tokens``,
default 4096) and strictly fewer tokens than the transcript, dropping the weakest (then oldest)
sentences first. A tool's result offers only its head (``TOOL_RESULT_TOKENS``): the pass's
snapshot keeps the whole. ``finish_reason`` is always ``stop``.
"""

import re
from dataclasses import dataclass
from functools import lru_cache

from chat_platform.llm.builtin.recall_context import is_echo
from chat_platform.llm.builtin.result import BuiltinResult, content_text, prompt_tokens
from chat_platform.llm.builtin.text import sentences as split_sentences
from chat_platform.llm.builtin.text import terms
from chat_platform.llm.tokens import count_tokens, tokens_and_head, truncate_to_tokens
from chat_platform.transcript import (
    HEADER,
    NAME,
    RAW_SECTION,
    ROLE,
    SPEAKER_NAME,
    STAMP,
    SUMMARY_SECTION,
    date_only,
)

MODEL = "builtin/extractive"
DEFAULT_MAX_TOKENS = 4096
# Below this many tokens a summary says too little (the compaction gate wants >= 10), so the
# newest fact-free sentences are added until it is reached.
MIN_OUTPUT_TOKENS = 16
# A sentence longer than this is chatter next to a short line of the same weight: short
# fact-dense lines are kept first.
LONG_SENTENCE_TOKENS = 24
# The most of its input a summary keeps (from inputs of SHARE_FROM_TOKENS up).
MAX_SHARE_PERCENT = 60
SHARE_FROM_TOKENS = 128
# Fusing earlier summaries ("[Summary of messages …]" sections, maybe with raw snapshots beside
# them): the result keeps at most this share of those summaries, so the frontier shrinks hard,
# fusion stays rare and summary levels stay small. Detail left out lives on in the snapshots.
FUSION_SHARE_PERCENT = 50
# A tool's result keeps its head in a summary: what the call got, its status line and first
# facts. The whole result is in the pass's snapshot, readable by name (docs/tools.md).
TOOL_RESULT_TOKENS = 128
# A tool result's label as transcripts write it ("[14] 2024-03-08 tool (lookup)", "tool"): the
# word right after the label's number and date, never inside a name ("[3] … «Ann tool (x)»").
_TOOL_TURN = re.compile(
    rf"^(?:\[[^\]\n]{{1,40}}\]\s*(?:{STAMP}\s+)?|#\d+\s+|\d+[.)]\s+)?tool(?:\s*\(|$)",
    re.IGNORECASE,
)
_SAME = re.compile(r"[\W_]+")

# "[12] 2024-03-08 13:56Z user" (chat_platform.transcript), "[12] user", "#13 assistant", …
_ROLE_LABEL = re.compile(
    rf"^\s*(?P<label>(?:\[[^\]\n]{{1,40}}\]\s*(?:{STAMP}\s+)?|#\d+\s+|\d+[.)]\s+)?"
    rf"{ROLE}"
    r"(?:\s*[(\[][^)\]\n]{0,40}[)\]])*)\s*:(?:\s+|$)(?P<text>.*)$",
    re.IGNORECASE,
)
_NAME_LABEL = re.compile(r"^\s*(?P<label>" + NAME + r")\s*:\s+(?P<text>\S.*)$")
# A room's transcript line, whose speaker is a person's or a bot's name as chosen
# ("[12] 2024-03-08 13:56Z Dana: …", "[13] 2024-03-08 13:57Z gpt helper: …"): dated, so that a
# line of a message that merely starts with "[1] Step one:" is not taken for one.
_ROOM_LABEL = re.compile(
    rf"^\s*(?P<label>\[\d+\]\s*{STAMP}\s+{SPEAKER_NAME})\s*:(?:\s+|$)(?P<text>.*)$"
)
_SECTION = re.compile(rf"^\s*{HEADER}\s*$")
_SUMMARY_SECTION = re.compile(rf"^\s*{SUMMARY_SECTION}\s*$")
# Results of the recall tools are copies of records: the records keep them.
_RAW_SECTION = re.compile(rf"^\s*{RAW_SECTION}\s*$")
_SEQ = re.compile(r"\[(\d+)\]|#(\d+)")
_RECALL_TOOL_LABEL = re.compile(r"\btool\s*\((?:read_records|search_records|save_record)\)")
# Blanks within the line only (``[ \t]``): ``\s*`` at a line start ran on through every following
# newline, and a text of many blank lines cost the square of their number.
_FOCUS = re.compile(
    r"^[ \t]*focus[ \t]*:[ \t]*(?P<focus>.+?)[ \t\r]*$", re.IGNORECASE | re.MULTILINE
)
_TRANSCRIPT = re.compile(r"<transcript>(?P<body>.*?)</transcript>", re.DOTALL | re.IGNORECASE)

_CALENDAR = (
    "january february march april may june july august september october november december "
    "jan feb mar apr jun jul aug sep sept oct nov dec monday tuesday wednesday thursday friday "
    "saturday sunday"
)
_DATE_WORD = re.compile(rf"\b(?:{'|'.join(_CALENDAR.split())})\b", re.IGNORECASE)
_RELATIVE_DAY = re.compile(r"\b(?:today|tomorrow|yesterday|tonight|weekend)\b", re.IGNORECASE)
_DIGIT = re.compile(r"\d")
# Bounded where a scan could backtrack over a whole run of non-blanks: an address is at most
# 64 characters before its @ and 253 after it, a mixed identifier at most 80. Unbounded, a
# message of 5,000 "@" took 80 s of one core to scan (cubic), one of "a." pairs grew as the
# square of its length; every alternative is now linear in the text.
_IDENTIFIER = re.compile(
    r"`[^`]+`|https?://\S+|[^\s@]{1,64}@[^\s@]{1,253}\.\w+|#\w+"
    # letters and digits mixed: INV-2041, v2; not an ordinal ("3rd", "21st"), which is a number
    r"|\b(?!\d+(?i:st|nd|rd|th)\b)(?=[\w.-]{0,80}[A-Za-z])(?=[\w.-]{0,80}\d)[\w.-]{2,80}\b"
    r"|\b\w+_\w+\b"  # snake_case
    r"|\b[a-z]+[A-Z]\w*\b"  # camelCase
    r"|\b[A-Z]{2,}\b"  # acronyms, codes
)
_KEYWORDS = frozenset(
    """
    decide decided decides decision agreed agree agrees agreement prefer prefers preferred
    preference always never must deadline due plan plans planned will want wants need needs
    remember important require requires required requirement choose chose chosen confirm
    confirmed approve approved favorite favourite like likes love loves hate hates dislike
    dislikes allergic promise promised commit committed please should won't don't cannot can't
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
_WORD = re.compile(r"[\w'\u2019]+")
_CJK_END = ("\u3002", "\uff01", "\uff1f")
_QUESTION_END = ("?", "\uff1f")
_CAPITALISED = re.compile(r"(?<![.!?]\s)(?<!^)\b[A-Z](?:[a-z\u00c0-\u024f]|-(?=[a-z]))+\b")


@dataclass(frozen=True)
class Turn:
    label: str | None
    lines: list[str]


@dataclass(frozen=True)
class Sentence:
    turn: int
    position: int
    text: str
    score: int


def _label_of(line: str) -> tuple[str, str] | None:
    match = _ROLE_LABEL.match(line) or _ROOM_LABEL.match(line) or _NAME_LABEL.match(line)
    if match is None:
        return None
    return match.group("label").strip(), match.group("text").strip()


def _seq_of(label: str) -> int | None:
    match = _SEQ.search(label)
    return int(match.group(1) or match.group(2)) if match else None


def parse_transcript(text: str) -> tuple[list[Turn], str]:
    """(turns, the transcript proper) of ``text``; see the module docstring."""
    lines = [line for line in text.splitlines() if not _FOCUS.match(line)]
    starts = [i for i, line in enumerate(lines) if _label_of(line) or _SECTION.match(line)]
    if starts:
        lines = lines[starts[0] :]  # anything before the first label is instructions
    body = "\n".join(lines)
    turns: list[Turn] = []
    current: Turn | None = None
    in_section = False
    # Inside a recall tool's result (a copy of records, which keep it): skipped up to the next
    # transcript line, i.e. a speaker label with a later message number, or a summary section.
    skip_after: int | None = None
    for line in lines:
        if not line.strip():
            continue
        labelled = _label_of(line)
        if skip_after is not None:
            seq = _seq_of(labelled[0]) if labelled else None
            if not (_SUMMARY_SECTION.match(line) or _RAW_SECTION.match(line)) and (
                seq is None or seq <= skip_after
            ):
                continue
            skip_after = None
        if _SECTION.match(line):
            current, in_section = None, True
            continue
        if labelled:
            label, rest = labelled
            if _RECALL_TOOL_LABEL.search(label):
                current, skip_after = None, _seq_of(label) or 0
                continue
            rest = "" if is_echo(rest) else rest
            # A kept line keeps the day it was said (not the minute: summaries stay short).
            current = Turn(label=date_only(label), lines=[rest] if rest else [])
            turns.append(current)
            continue
        if is_echo(line):
            continue
        if current is not None and (current.label is not None or not in_section):
            current.lines.append(line.strip())
        else:
            turns.append(Turn(label=None, lines=[line.strip()]))
    return turns, body


def summary_section_tokens(body: str) -> int:
    """Tokens of the ``[Summary of messages …]`` sections of a transcript (headers included):
    what a fusion replaces."""
    inside = False
    kept: list[str] = []
    for line in body.splitlines():
        if _SECTION.match(line):
            inside = _SUMMARY_SECTION.match(line) is not None
        if inside:
            kept.append(line)
    return count_tokens("\n".join(kept), model=MODEL) if kept else 0


# A speaker's name opening a sentence ("Ravi: Always." in a relayed chat): who spoke, and what
# follows it starts the sentence (so "Always" is no name).
_INLINE_NAME_LABEL = re.compile(r"^\s*" + NAME + r"\s*:\s+")


# Verbs after which a sentence's first capitalised word reads as a name ("Kenji asked me …").
_NAME_FOLLOWERS = frozenset(
    """
    said says asked asks wants wanted prefers preferred likes liked thinks thought agreed agrees
    decided confirmed mentioned told called works worked lives lived joined sent paid owns owned
    """.split()  # noqa: SIM905 - a word list reads better as prose
)
_FIRST_NAME = re.compile(r"^\s*(?P<name>[A-Z][a-z\u00c0-\u024f]+)\s+(?P<next>[a-z]+)\b")


def _names(text: str) -> set[str]:
    text = _INLINE_NAME_LABEL.sub("", text, count=1)
    names = {m.group() for m in _CAPITALISED.finditer(text)} - {"I"}
    first = _FIRST_NAME.match(text)
    if first and first.group("next") in _NAME_FOLLOWERS:
        names.add(first.group("name"))
    return names


# A run of word characters, apostrophes, dots and hyphens; it is a unit when it holds a digit.
# (One pattern with the digit inside, ``[…]*\d[…]*``, tried every start of a run without one:
# the square of the run's length.)
_UNIT_RUN = re.compile(r"[\w'\u2019.-]+")


@lru_cache(maxsize=4096)
def fact_units(text: str) -> frozenset[str]:
    """What a sentence tells that another might tell too: its names, numbers, date words and
    identifiers (lower-cased). A sentence whose units were all kept already adds none. Cached:
    one summary asks it of the same sentence several times (docs/performance.md, tool task)."""
    units = {run.lower() for m in _UNIT_RUN.finditer(text) if _DIGIT.search(run := m.group())}
    units |= {m.group().lower() for m in _DATE_WORD.finditer(text)}
    units |= {m.group().lower() for m in _IDENTIFIER.finditer(text)}
    units |= {name.lower() for name in _names(text)}
    return frozenset(units)


def _score(text: str, focus_terms: set[str]) -> int:
    score = 0
    if _DIGIT.search(text) or _DATE_WORD.search(text):
        score += 2
    elif _RELATIVE_DAY.search(text):
        score += 1
    if _IDENTIFIER.search(text):
        score += 2
    score += min(2, len(_names(text)))
    words = {w.lower().replace("\u2019", "'") for w in _WORD.findall(text)}
    if words & _KEYWORDS:
        score += 2
    if focus_terms and focus_terms & set(terms(text)):
        score += 3
    units = fact_units(text)
    if text.rstrip().endswith(_QUESTION_END) and not units:
        # A question states little, unless it carries facts of its own (then it is kept with
        # its answer, or not at all).
        score -= 1
    if not units and count_tokens(text, model=MODEL) > LONG_SENTENCE_TOKENS:
        score -= 1  # long chatter ("I really love …, I always want …") below a name or a city
    return max(0, score)


def _render(turns: list[Turn], chosen: list[Sentence]) -> str:
    by_turn: dict[int, list[Sentence]] = {}
    for sentence in sorted(chosen, key=lambda s: s.position):
        by_turn.setdefault(sentence.turn, []).append(sentence)
    lines = []
    for turn_index in sorted(by_turn):
        body = ""
        for sentence in by_turn[turn_index]:
            # CJK sentences end in full-width punctuation and are written without spaces.
            joiner = "" if not body or body.endswith(_CJK_END) else " "
            body += joiner + sentence.text
        label = turns[turn_index].label
        lines.append(f"{label}: {body}" if label else body)
    return "\n".join(lines)


def _limit(body: str, max_tokens: int | None, summaries: int) -> int:
    """The summary's token bound for a transcript whose body is ``body`` and whose summary
    sections count ``summaries`` tokens (``summary_section_tokens``)."""
    # A summary that keeps nearly everything frees nothing once it is labelled and stored: keep
    # at most MAX_SHARE_PERCENT of the input (and always strictly less than all of it).
    # (Inputs under SHARE_FROM_TOKENS are too small for a share to mean anything: there it is
    # only "strictly shorter".)
    body_tokens = count_tokens(body, model=MODEL)
    share = body_tokens * MAX_SHARE_PERCENT // 100
    limit = min(
        max_tokens if max_tokens is not None else DEFAULT_MAX_TOKENS,
        share if body_tokens >= SHARE_FROM_TOKENS else body_tokens - 1,
    )
    if summaries:
        limit = min(limit, summaries * FUSION_SHARE_PERCENT // 100)
    return limit


def _adds_little(units: frozenset[str], covered: set[str]) -> bool:
    """Whether a sentence with these fact units adds nothing, or next to nothing (at most a
    quarter of four or more units new), to those of the kept sentences."""
    new = len(units - covered)
    return new == 0 or (len(units) >= 4 and new * 4 <= len(units))


def _key_of(sentence: Sentence) -> str:
    return _SAME.sub(" ", sentence.text.lower()).strip()


class _Picker:
    """The sentences kept so far, within ``limit`` tokens, each question with its answer."""

    def __init__(self, turns: list[Turn], sentences: list[Sentence], limit: int) -> None:
        self.turns = turns
        self.limit = limit
        self.chosen: list[Sentence] = []
        self.opened: set[int] = set()
        self.used = 0
        self.said: set[str] = set()
        self.covered: set[str] = set()  # fact units of the kept sentences
        # A question kept only with its answer: the first sentence of the next turn that says
        # anything (a question alone tells a reader nothing; its answer carries the fact).
        first_of_turn: dict[int, Sentence] = {}
        for sentence in sentences:
            first_of_turn.setdefault(sentence.turn, sentence)
        turn_order = sorted(first_of_turn)
        next_turn = dict(zip(turn_order, turn_order[1:], strict=False))
        self.answer_of = {
            s.position: first_of_turn[next_turn[s.turn]]
            for s in sentences
            if s.text.rstrip().endswith(_QUESTION_END) and s.turn in next_turn
        }
        # answer position -> question position, for pairs taken together
        self.paired: dict[int, int] = {}

    def cost(self, sentence: Sentence, opened: set[int]) -> int:
        tokens = count_tokens(" " + sentence.text, model=MODEL)
        if sentence.turn not in opened:
            label = self.turns[sentence.turn].label
            tokens += 1 + (count_tokens(label + ":", model=MODEL) if label else 0)
        return tokens

    def add(self, sentence: Sentence) -> None:
        self.used += self.cost(sentence, self.opened)
        self.said.add(_key_of(sentence))
        self.covered.update(fact_units(sentence.text))
        self.chosen.append(sentence)
        self.opened.add(sentence.turn)

    def take(
        self, candidates: list[Sentence], stop_at: int, deferred: list[Sentence] | None
    ) -> None:
        for sentence in candidates:
            if self.used >= stop_at:
                return
            if _key_of(sentence) in self.said:  # a fact said word for word: once (the newest)
                continue
            units = fact_units(sentence.text)
            if deferred is not None and units and _adds_little(units, self.covered):
                deferred.append(sentence)  # "Note 4: <Note 3's paragraph>": if room is left
                continue
            needed = self.cost(sentence, self.opened)
            answer = self.answer_of.get(sentence.position)
            if answer is not None and answer not in self.chosen:
                answer_cost = self.cost(answer, self.opened | {sentence.turn})
                if _key_of(answer) in self.said or self.used + needed + answer_cost > self.limit:
                    continue
                self.add(sentence)
                self.add(answer)
                self.paired[answer.position] = sentence.position
            elif self.used + needed <= self.limit:
                self.add(sentence)


def _fitted(turns: list[Turn], picker: _Picker) -> str:
    """The kept sentences rendered within the limit."""
    chosen, limit = picker.chosen, picker.limit
    text = _render(turns, chosen)
    # Per-piece costs are an estimate of the joined text's tokens; enforce the real bound by
    # dropping the weakest kept sentence until it holds.
    priority = {id(s): rank for rank, s in enumerate(chosen)}
    while count_tokens(text, model=MODEL) > limit and len(chosen) > 1:
        dropped = max(chosen, key=lambda s: priority[id(s)])
        chosen.remove(dropped)
        question = picker.paired.get(dropped.position)  # the question goes with its answer
        if len(chosen) > 1:
            chosen[:] = [s for s in chosen if s.position != question]
        text = _render(turns, chosen)
    if count_tokens(text, model=MODEL) > limit:
        text = truncate_to_tokens(text, limit, model=MODEL)
    return text


def _turn_sentences(turn: Turn) -> list[str]:
    """The sentences of a turn a summary may keep: all of a message's; of a tool's result, its
    head (``TOOL_RESULT_TOKENS``)."""
    texts = [text for line in turn.lines for text in split_sentences(line)]
    if turn.label is None or not _TOOL_TURN.search(turn.label):
        return texts
    head: list[str] = []
    room = TOOL_RESULT_TOKENS
    for text in texts:
        tokens, within = tokens_and_head(text, room, model=MODEL)  # one encoding, not two
        if tokens > room:
            cut = within.rstrip()
            if cut:
                head.append(cut + " …")
            break
        head.append(text)
        room -= tokens
    return head


def summarise(transcript: str, *, focus: str = "", max_tokens: int | None = None) -> str:
    """The extractive summary of ``transcript`` (see the module docstring)."""
    turns, body = parse_transcript(transcript)
    focus_terms = set(terms(focus))
    sentences: list[Sentence] = []
    for turn_index, turn in enumerate(turns):
        for text in _turn_sentences(turn):
            sentences.append(Sentence(turn_index, len(sentences), text, _score(text, focus_terms)))
    summaries = summary_section_tokens(body)
    limit = _limit(body, max_tokens, summaries)
    if limit <= 0 or not sentences:
        return ""
    picker = _Picker(turns, sentences, limit)
    # Strongest facts first (a name or a city weighs like a number); of equal weight, a short
    # line before a long one (a name, a city, a date before a paragraph of chatter); then the
    # newer sentence (later statements supersede).
    facts = sorted(
        (s for s in sentences if s.score > 0),
        key=lambda s: (
            -s.score,
            # Fusing summaries (a hard squeeze: half of them) a name or a number goes before a
            # bare "I need …" of the same weight.
            bool(summaries) and not fact_units(s.text),
            count_tokens(s.text, model=MODEL) > LONG_SENTENCE_TOKENS,
            -s.position,
        ),
    )
    repeats: list[Sentence] = []
    picker.take(facts, limit, repeats)
    picker.take(repeats, limit, None)
    if picker.used < MIN_OUTPUT_TOKENS and len(picker.chosen) == len(facts):  # no more facts
        rest = sorted((s for s in sentences if s.score == 0), key=lambda s: -s.position)
        picker.take(rest, MIN_OUTPUT_TOKENS, None)

    if not picker.chosen:  # not even one sentence fits: cut the best one down to the budget
        best = min(sentences, key=lambda s: (-s.score, -s.position))
        label = turns[best.turn].label
        prefix = f"{label}:" if label else ""
        cut = truncate_to_tokens(f"{prefix} {best.text}".strip(), limit, model=MODEL).strip()
        return cut if len(cut) > len(prefix) else ""  # a bare label says nothing
    return _fitted(turns, picker)


def _source(messages: list[dict]) -> tuple[str, str]:
    """(transcript, focus) from the messages."""
    users = [m for m in messages if m.get("role") == "user"]
    if users:
        text = content_text(users[-1])
    else:
        text = "\n".join(content_text(m) for m in messages if m.get("role") != "system")
    focus = " ".join(
        match.group("focus")
        for message in messages
        if message.get("role") in ("system", "user")
        for match in _FOCUS.finditer(content_text(message))
    )
    match = _TRANSCRIPT.search(text)
    if match:
        text = match.group("body")
    return text, focus


def respond(messages: list[dict], *, max_tokens: int | None = None) -> BuiltinResult:
    transcript, focus = _source(messages)
    text = summarise(transcript, focus=focus, max_tokens=max_tokens)
    return BuiltinResult(
        text=text,
        finish_reason="stop",
        prompt_tokens=prompt_tokens(messages, model=MODEL),
        completion_tokens=count_tokens(text, model=MODEL),
    )
