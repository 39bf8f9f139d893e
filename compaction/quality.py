"""Summary quality gates and fact retention (docs/compaction.md). Pure: stdlib only, no I/O.

``summary_gate`` decides whether a summariser's answer may replace the messages it covers:
reasoning blocks are stripped first, then the answer is rejected when it is empty, was cut off
(``finish_reason`` other than ``stop``), leaks tool-call protocol, is too short to carry anything,
or is not shorter than what it replaces.

``extract_facts`` / ``retention_score`` measure how many of the source's names, numbers, dates and
identifiers a summary kept. Extraction is a deterministic set of regular expressions applied in a
fixed priority order; each character of the source belongs to at most one fact, facts come out in
source order, de-duplicated case-insensitively (and with number formatting ignored).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from chat_platform.llm.recall_protocol import ANSWER_HEADER, READ_TOOL, SAVE_TOOL, SEARCH_TOOL
from chat_platform.stopwords import STOPWORDS
from chat_platform.transcript import NAME, RAW_HEADING, ROLE, STAMP, SUMMARY_HEADING

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


# --- facts ------------------------------------------------------------------------------------

_L = r"(?<![A-Za-z0-9_])"  # ASCII word boundaries: CJK characters are \w, so \b fails there
_R = r"(?![A-Za-z0-9_])"
_MONTHS_FULL = (
    "january|february|march|april|may|june|july|august|september|october|november|december"
)
_MONTH_ABBR = "jan|feb|mar|apr|jun|jul|aug|sept|sep|oct|nov|dec"
_MONTH = rf"(?:{_MONTHS_FULL}|{_MONTH_ABBR})"  # used case-insensitively
# Month-first dates need a capital ("March 14", not "may 2000 users").
_MONTH_CAP = (
    "(?:" + "|".join(m.capitalize() for m in f"{_MONTHS_FULL}|{_MONTH_ABBR}".split("|")) + ")"
)
_AM_PM = r"(?:[AaPp]\.[Mm]\.|[AaPp][Mm](?![A-Za-z]))"
_ORDINAL = r"(?:st|nd|rd|th)?"
_FILE_EXT = (
    "py|pyi|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|md|rst|txt|csv|tsv|"
    "log|sql|sh|bash|zsh|ps1|bat|html|htm|css|scss|xml|pdf|docx?|xlsx?|pptx?|png|jpe?g|gif|svg|"
    "webp|zip|tar|gz|tgz|go|rs|java|kt|rb|php|c|h|cpp|hpp|cs|swift|lock|whl|exe|dll|so|dmg|iso"
)
_TLD = "com|org|net|io|dev|ai|app|co|uk|de|fr|cn|jp|eu|gov|edu|info|biz|cloud|sh|me|us"

# A speaker label, time stamp included (chat_platform.transcript): no fact of the transcript.
_SPEAKER_LABEL = re.compile(
    rf"^[ \t>*_-]*(?:\[\d+\][ \t]*(?:{STAMP}[ \t]+)?)?{ROLE}"
    r"(?:[ \t]*\([^)\n]*\))?[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)
# A speaker's name after the role label ("[12] user: Ravi: …", a relayed chat) or opening a
# line ("Alice: …"): who spoke, not a fact (a name said in a sentence still is one).
_NAME_LABEL = re.compile(
    r"^[ \t>*_-]*\*{0,2}" + NAME + r"\*{0,2}[ \t]*:(?=[ \t])",
    re.MULTILINE,
)
_LIST_MARKER = re.compile(r"^[ \t]*\d+[.)](?=[ \t])", re.MULTILINE)
# Tool traffic and talk about the transcript itself are not facts of the conversation: a tool
# line (its result quotes records whose facts are checked where they were said), "(used
# search_records)", "you said in message 32", "messages 12–40".
_TOOL_LINE = re.compile(
    rf"^[ \t]*\[\d+\][ \t]*(?:{STAMP}[ \t]+)?tool\b[^\n]*$", re.IGNORECASE | re.MULTILINE
)
_TOOL_USE = re.compile(r"\(used [a-z0-9_, ]+\)", re.IGNORECASE)
# The recall tools' names: a transcript that mentions them talks about its own machinery.
_TOOL_NAME = re.compile(
    rf"(?<![A-Za-z0-9_])(?:{READ_TOOL}|{SEARCH_TOOL}|{SAVE_TOOL}|read_files)(?![A-Za-z0-9_])",
    re.IGNORECASE,
)
# A transcript line's label with its seq ("[12] 2024-03-08 13:56Z user:"), and the section
# headers of a fusion's input.
_SEQ_LABEL = re.compile(
    rf"^[ \t]*\[(?P<seq>\d+)\][ \t]*(?:{STAMP}[ \t]+)?[A-Za-z]+(?:[ \t]*\([^)\n]*\))?[ \t]*:"
)
_SECTION_HEADER = re.compile(rf"^[ \t]*\[(?:{SUMMARY_HEADING}|{RAW_HEADING}) [^\]\n]*\][ \t]*$")
_RECALL_TOOL_LINE = re.compile(
    rf"^[ \t]*\[(?P<seq>\d+)\][ \t]*(?:{STAMP}[ \t]+)?tool[ \t]*"
    rf"\((?:{READ_TOOL}|{SEARCH_TOOL}|{SAVE_TOOL})\)[ \t]*:",
    re.IGNORECASE,
)
_RECALL_ANSWER_LINE = re.compile(
    rf"^[ \t]*\[\d+\][ \t]*(?:{STAMP}[ \t]+)?assistant[ \t]*:[ \t]*{re.escape(ANSWER_HEADER)}"
)
_QUOTE_LINE = re.compile(r"^[ \t]*>")
# A record's frame in a tool result ("[record snapshot_1_34]"): machinery, even where a fused
# snapshot's own "[Summary of messages …]" header inside the result ended the blanking above.
_RECORD_FRAME = re.compile(r"\[(?:record|not found:) ?[a-z0-9_-]{1,80}\]")
_MESSAGE_REF = re.compile(
    r"\bmessages?[ \t]+\d+(?:[ \t]*(?:[-\u2013]|to|and)[ \t]*\d+)?", re.IGNORECASE
)


# (pattern, kind) in priority order: a later pattern never takes characters an earlier one took.
_FACT_PATTERNS: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"(?<![\w/])(?:(?:https?|ftp)://|www\.)[^\s<>\"'`]+", re.IGNORECASE), "url"),
    (
        re.compile(_L + r"[A-Za-z0-9._%+-]+@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}" + _R),
        "email",
    ),
    (
        re.compile(
            _L + r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}" + _R
        ),
        "uuid",
    ),
    # dates
    (
        re.compile(
            r"(?<![\d.:-])\d{4}-\d{2}-\d{2}"
            r"(?:T\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?(?:Z|[+-]\d{2}:?\d{2})?)?(?![\d:])"
        ),
        "date",
    ),
    (
        re.compile(
            r"(?<![\d/])(?<!\d\.)(?:\d{4}/\d{1,2}/\d{1,2}|\d{1,2}[/.]\d{1,2}[/.]\d{4})"
            r"(?![\d/])(?!\.\d)"
        ),
        "date",
    ),
    (
        re.compile(
            r"(?<!\d)(?:\d{4}\s*年\s*\d{1,2}\s*月(?:\s*\d{1,2}\s*[日号])?"
            r"|\d{1,2}\s*月\s*\d{1,2}\s*[日号])"
        ),
        "date",
    ),
    (
        re.compile(
            rf"(?<![\d.,]){_L}\d{{1,2}}{_ORDINAL}\s+(?:of\s+)?{_MONTH}{_R}(?:,?\s+\d{{4}}(?!\d))?",
            re.IGNORECASE,
        ),
        "date",
    ),
    (
        re.compile(
            rf"{_L}{_MONTH_CAP}\.?\s+\d{{1,2}}{_ORDINAL}(?![\d:]){_R}(?:,?\s+\d{{4}}(?!\d))?"
        ),
        "date",
    ),
    (re.compile(rf"{_L}{_MONTH_CAP}\.?,?\s+\d{{4}}(?!\d)"), "date"),
    # a capitalised month on its own ("in March"); "May" alone is too often the verb
    (
        re.compile(
            r"(?<![A-Za-z])(?:January|February|March|April|June|July|August|September|October"
            r"|November|December)(?![A-Za-z])"
        ),
        "date",
    ),
    (
        re.compile(
            r"(?<![A-Za-z])(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday)(?![A-Za-z])",
            re.IGNORECASE,
        ),
        "date",
    ),
    (
        re.compile(rf"(?<![\d:.])\d{{1,2}}:\d{{2}}(?::\d{{2}})?(?:\s?{_AM_PM})?(?![\d:])"),
        "time",
    ),
    (re.compile(rf"(?<![\d.:])\d{{1,2}}\s?{_AM_PM}"), "time"),
    # identifiers
    (re.compile(_L + r"v\d+(?:\.\d+)*(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?" + _R), "version"),
    (
        re.compile(r"(?<![\w.])\d+(?:\.\d+){2,}(?:-[0-9A-Za-z]+(?:\.[0-9A-Za-z]+)*)?(?![\w.])"),
        "version",
    ),
    (re.compile(r"(?<![\w\\])[A-Za-z]:\\[^\s\"'<>|]+"), "path"),
    (re.compile(r"(?:(?<=[\s(\"'`])|^)(?:~|\.{1,2})?/[\w.@+-]+(?:/[\w.@+-]+)*/?"), "path"),
    (re.compile(r"(?<![\w./-])[\w.-]+(?:/[\w.-]+)+\.[A-Za-z0-9]{1,8}" + _R), "path"),
    (re.compile(rf"(?<![\w./-])[A-Za-z0-9_][\w-]*\.(?:{_FILE_EXT}){_R}", re.IGNORECASE), "file"),
    (
        re.compile(
            rf"(?<![\w.@-])(?:[A-Za-z0-9-]+\.)+(?:{_TLD})(?![\w-]|\.[A-Za-z])", re.IGNORECASE
        ),
        "domain",
    ),
    (
        re.compile(
            r"(?:US|CA|AU|NZ|HK|S)?[$€£¥₹₩]\s?(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+)?"
            r"(?:[kKmM]|bn|BN)?(?![A-Za-z0-9])"
        ),
        "money",
    ),
    (re.compile(r"(?<![\d.,])\d+(?:[.,]\d+)?\s?%"), "percent"),
    (re.compile(r"(?<![\w&#])#\d+" + _R), "ticket"),
    (re.compile(_L + r"0x[0-9a-fA-F]+" + _R), "hex"),
    (
        re.compile(
            _L + r"(?:(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,64}"
            r"|(?=[0-9A-F]*[A-F])(?=[0-9A-F]*\d)[0-9A-F]{7,64})" + _R
        ),
        "hex",
    ),
    # eu-west-1, INV-2024-001, gpt-4.1-mini, snake_case (kept only with a letter and a digit or _)
    (
        re.compile(r"(?<![A-Za-z0-9_.-])[A-Za-z0-9]+(?:(?:[-_]+|\.(?=\d))[A-Za-z0-9]+)+" + _R),
        "compound",
    ),
    (re.compile(_L + r"[a-z]+[A-Z][A-Za-z0-9]*" + _R), "camel"),  # camelCase, iPhone
    (re.compile(_L + r"[A-Za-z]+\d[A-Za-z0-9]*" + _R), "alnum"),  # ABC123, S3, gpt4
    (re.compile(r"(?<![\dA-Za-z_])\d+[A-Za-z]+\d[A-Za-z0-9]*" + _R), "alnum"),  # 4o1, 3b1
    (
        re.compile(r"(?<![\dA-Za-z_])(?:\d{1,3}(?:,\d{3})+(?!\d)|\d+)(?:\.\d+(?![.\d]))?"),
        "number",
    ),
]


def _split(words: str) -> list[str]:
    return words.split()


# Words that start sentences, greet, hedge or instruct: never facts when capitalised at the
# start of a run of capitalised words (so never facts on their own, anywhere).
_STOP_WORDS = frozenset(
    _split(
        """
    a an the this that these those there here it its i i'm i've i'll i'd me my mine myself we
    we're we've we'll we'd us our ours you you're you've you'll you'd your yours he he's she
    she's him her hers his they they're they've they'll them their theirs it's let's that's
    there's here's what's who's
    and or but so if then than because when whenever while where what which who whom whose why
    how after before since until also just only even still yet however although though both
    either neither not no yes yeah yep nope ok okay sure thanks thank please hi hello hey dear
    great good fine well oh ah alright right cool nice sorry welcome sounds perfect exactly
    indeed actually basically anyway otherwise meanwhile finally first second third next last
    now today tomorrow yesterday tonight later soon again as at by for from in into of on onto
    to with without within about above below over under per via around across through
    is are was were be been being am do does did done don't doesn't didn't can can't cannot could
    couldn't would wouldn't should shouldn't will won't shall may might must have has had haven't
    hasn't isn't aren't wasn't weren't
    let make use using check call send book find show tell give take get put add remove delete
    update create set keep note remember see look try run go write read summarize summarise
    explain list confirm ensure need want ask help start stop open close move change fix review
    schedule plan agree agreed decide decided done ready thanks thank
    all any each every some many much more most other another such same own everything
    everyone everybody something someone somebody nothing nobody anything anyone anybody
    overall
    summary summaries note notes decision decisions todo fyi re subject question questions answer
    answers step steps result results context conversation transcript message messages
    user assistant system tool bot human
    ps am pm asap eta important warning error urgent info
    """
    )
)
# Lower-case words allowed inside a multi-word name ("Bank of America", "Ludwig van Beethoven").
_NAME_CONNECTORS = frozenset(_split("of de da di du del della der den van von la le y"))
_NAME_GAPS = (" ", "\t", " & ")
# A word: letters of alphabetic scripts (CJK, kana and hangul excluded, so "我和Alice在" holds the
# word "Alice"), not glued to ASCII letters/digits before it ("5GB" holds no word).
_LETTER = r"[^\W\d_\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]"
_WORD = re.compile(rf"(?<![0-9A-Za-z_]){_LETTER}(?:{_LETTER}|\d|['\u2019-](?={_LETTER}))*")
_TITLES = frozenset(_split("mr mrs ms dr prof sr jr st"))
# Words after which a sentence-initial capitalised word reads as a name ("Alice said").
_NAME_FOLLOWERS = frozenset(
    _split(
        """
    said says asked asks wants wanted prefers preferred likes liked thinks thought agreed agrees
    decided confirmed mentioned told called works worked lives lived joined sent paid owns owned
    """
    )
)
_POSSESSIVE = re.compile(r"['\u2019]s$")
_ABBREVIATIONS = frozenset(
    _split("mr mrs ms dr prof st sr jr vs etc e.g i.e inc ltd corp co no approx dept est fig")
)
_SENTENCE_END = ".!?\u3002\uff01\uff1f"


def _norm(text: str) -> str:
    """Comparison form: case-folded, one space, no thousands separators, no space before %."""
    text = text.casefold().replace("\u2019", "'")
    text = re.sub(r"(?<=\d)[,_\u202f\u00a0](?=\d{3}(?!\d))", "", text)
    text = re.sub(r"\s+", " ", text)
    return re.sub(r"(?<=\d) (?=%)", "", text).strip()


def _claim(taken: bytearray, start: int, end: int) -> bool:
    """Mark ``start:end`` as one fact's characters unless any of them already belongs to one."""
    if any(taken[start:end]):
        return False
    taken[start:end] = b"\x01" * (end - start)
    return True


def _trim_url(value: str) -> str:
    value = value.rstrip(".,;:!?'\"")
    while value.endswith(")") and value.count(")") > value.count("("):
        value = value[:-1].rstrip(".,;:!?'\"")
    return value


# A whole number of one or two digits with nothing around it ("1", "32": a count, a list item,
# a seq) is no fact a reader could check a summary for; longer ones (4471, 2025), decimals,
# money, percentages, times and identifiers are.
_BARE_NUMBER = re.compile(r"\d{1,2}")


def _keep_pattern_match(kind: str, value: str) -> bool:
    if kind == "compound":
        has_letter = re.search(r"[A-Za-z]", value) is not None
        return has_letter and ("_" in value or re.search(r"\d", value) is not None)
    if kind == "number":
        return _BARE_NUMBER.fullmatch(value) is None
    return True


def _is_sentence_start(text: str, position: int) -> bool:
    """Whether the word at ``position`` starts a sentence, line, list item or labelled line."""
    index = position - 1
    while index >= 0 and text[index] in " \t\"'\u201c\u201d\u2018\u2019([{*_\u2022>#-":
        index -= 1
    if index < 0 or text[index] in "\n\r:":
        return True
    if text[index] in _SENTENCE_END:
        if text[index] in ".":
            before = re.search(r"([\w.]+)\.$", text[max(0, index - 12) : index + 1])
            if before and before.group(1).casefold().rstrip(".") in _ABBREVIATIONS:
                return False
        return True
    return False


@dataclass
class _Word:
    start: int
    end: int  # end of the word without a possessive
    text: str
    possessive: bool
    sentence_start: bool

    @property
    def capitalised(self) -> bool:
        return self.text[0].isupper()

    @property
    def marked(self) -> bool:
        """Has capitals after the first letter (NASA, OpenAI): a name even at sentence start."""
        return any(ch.isupper() for ch in self.text[1:])


def _words(masked: str) -> list[_Word]:
    words = []
    for match in _WORD.finditer(masked):
        raw = match.group().rstrip("-'\u2019")
        possessive = bool(_POSSESSIVE.search(raw)) and len(raw) > 2
        if possessive:
            raw = _POSSESSIVE.sub("", raw)
        if not raw:
            continue
        start = match.start()
        words.append(
            _Word(start, start + len(raw), raw, possessive, _is_sentence_start(masked, start))
        )
    return words


def _joined(masked: str, previous: _Word, word: _Word) -> bool:
    """Whether ``word`` directly continues a name ending in ``previous``."""
    gap = masked[previous.end : word.start]
    if previous.possessive:
        # "Arthur's Seat" is one name (its "Seat" alone is a fragment); "Alice's order" is not.
        return masked[previous.end : previous.end + 2] in ("'s", "\u2019s") and (
            gap[2:] == " " and word.capitalised
        )
    return gap in _NAME_GAPS or (gap == ". " and previous.text.casefold() in _TITLES)


def _name_runs(masked: str, words: list[_Word]) -> list[tuple[int, int]]:
    """Runs of capitalised words (with connectors between them) as ``(first, last)`` indexes."""
    runs: list[tuple[int, int]] = []
    index = 0
    while index < len(words):
        if not words[index].capitalised:
            index += 1
            continue
        first = last = index
        while last + 1 < len(words) and _joined(masked, words[last], words[last + 1]):
            word = words[last + 1]
            if word.capitalised:
                last += 1
                continue
            if (
                word.text.casefold() in _NAME_CONNECTORS
                and last + 2 < len(words)
                and words[last + 2].capitalised
                and _joined(masked, word, words[last + 2])
            ):
                last += 2
                continue
            break
        runs.append((first, last))
        index = last + 1
    return runs


def _is_stop(word: _Word) -> bool:
    return word.text.casefold().replace("\u2019", "'") in _STOP_WORDS


def _names(text: str, masked: str) -> list[tuple[int, str]]:
    """Capitalised words and multi-word names. A run that starts a sentence loses its first word
    when that word is an ordinary one (a stop word, or written in lower case elsewhere in the
    text): "Maybe Alice" is "Alice". A lone capitalised word that starts a sentence is
    only a name when something says so: capitals inside it (NASA, OpenAI), a possessive, the
    same word capitalised mid-sentence elsewhere, or a following word that names take
    ("Alice said", "Paris is"); otherwise it is taken for an ordinary sentence-initial word."""
    words = _words(masked)
    # Words this text also writes in lower case: ordinary words, whatever case a sentence's
    # start gives them ("Honestly Bob was late … I honestly think so").
    lower_here = {word.text.casefold() for word in words if not word.capitalised}

    def ordinary_opener(index: int, first: int, last: int) -> bool:
        word = words[index]
        key = word.text.casefold().replace("\u2019", "'")
        return (
            index == first
            and index < last
            and word.sentence_start
            and not word.marked
            and (key in STOPWORDS or key in lower_here)
        )

    candidates: list[tuple[int, int, bool]] = []  # (first, last, lone sentence-initial word)
    for first, last in _name_runs(masked, words):
        start = first
        while start <= last and (
            _is_stop(words[start])
            or not words[start].capitalised
            or ordinary_opener(start, first, last)
        ):
            start += 1
        end = last
        while end >= start and not words[end].capitalised:
            end -= 1
        if start > end:
            continue
        lone_initial = start == first == end and words[first].sentence_start
        candidates.append((start, end, lone_initial))
    seen_mid_sentence = {
        words[index].text.casefold()
        for start, end, lone_initial in candidates
        if not lone_initial
        for index in range(start, end + 1)
    }
    names = []
    for start, end, lone_initial in candidates:
        if lone_initial:
            word = words[start]
            following = words[start + 1] if start + 1 < len(words) else None
            followed_like_a_name = (
                following is not None
                and masked[word.end : following.start] == " "
                and following.text.casefold() in _NAME_FOLLOWERS
            )
            if not (
                word.marked
                or word.possessive
                or word.text.casefold() in seen_mid_sentence
                or followed_like_a_name
            ):
                continue
        first_word, last_word = words[start], words[end]
        names.append(
            (first_word.start, re.sub(r"\s+", " ", text[first_word.start : last_word.end]))
        )
    return names


def _recall_traffic(text: str) -> str:
    """``text`` with the recall machinery's copies blanked out (same length): a recall tool's
    whole result — the records it quotes, up to the next transcript line with a later seq or a
    fusion section — and the ``> …`` quotes of builtin/recall's answers. What they repeat is
    checked where it was said (the extractive summariser skips them too)."""
    lines = text.splitlines(keepends=True)
    tool_seq: int | None = None  # inside the result of the recall tool call of this seq
    quoting = False  # inside a builtin/recall answer, after its header line
    out: list[str] = []
    for line in lines:
        if tool_seq is not None:
            label = _SEQ_LABEL.match(line)
            if _SECTION_HEADER.match(line) or (label and int(label.group("seq")) > tool_seq):
                tool_seq = None
        if tool_seq is None:
            tool = _RECALL_TOOL_LINE.match(line)
            if tool:
                tool_seq = int(tool.group("seq"))
        if tool_seq is None:
            if _RECALL_ANSWER_LINE.match(line):
                quoting = True
            elif quoting and not _QUOTE_LINE.match(line):
                quoting = False
        blank = tool_seq is not None or (quoting and _QUOTE_LINE.match(line) is not None)
        out.append(re.sub(r"[^\n]", " ", line) if blank else line)
    return "".join(out)


def extract_facts(text: str) -> list[str]:
    """Names, numbers, dates/times and identifiers of ``text``: ordered by first appearance,
    de-duplicated case-insensitively (``1,200`` and ``1200`` are one fact)."""
    if not text:
        return []
    # Speaker labels ("user:", "[12] tool (read_records):") and list markers are not facts;
    # blank them out (same length, so positions stay valid).
    masked = _recall_traffic(text)
    # (A name label is looked for once the role label before it is blank.)
    noises = (
        _TOOL_LINE,
        _TOOL_USE,
        _TOOL_NAME,
        _MESSAGE_REF,
        _RECORD_FRAME,
        _SPEAKER_LABEL,
        _NAME_LABEL,
    )
    for noise in (*noises, _LIST_MARKER):
        masked = noise.sub(lambda m: " " * len(m.group()), masked)
    taken = bytearray(len(masked))
    found: list[tuple[int, str]] = []
    for pattern, kind in _FACT_PATTERNS:
        for match in pattern.finditer(masked):
            value = match.group()
            if kind == "url":
                value = _trim_url(value)
            value = value.strip()
            if not value or not _keep_pattern_match(kind, value):
                continue
            start = match.start() + (len(match.group()) - len(match.group().lstrip()))
            if _claim(taken, start, start + len(value)):
                found.append((start, value))
    # Names are looked for in what no other fact took.
    # Taken characters become "0": never part of a word, and no word starts right after one.
    unclaimed = "".join("0" if flag else ch for ch, flag in zip(masked, taken, strict=True))
    found.extend(_names(text, unclaimed))
    found.sort(key=lambda item: item[0])
    facts: list[str] = []
    keys: set[str] = set()
    for _start, value in found:
        key = _norm(value)
        if key and key not in keys:
            keys.add(key)
            facts.append(value)
    return facts


# --- retention --------------------------------------------------------------------------------

_CURRENCY_PREFIX = re.compile(r"^(?:US|CA|AU|NZ|HK|S)?[$€£¥₹₩]\s?", re.IGNORECASE)
_LATIN_LETTER = r"A-Za-z\u00c0-\u024f"


def _variants(fact: str) -> list[str]:
    """Accepted spellings of a fact in a summary (all already in comparison form)."""
    base = _norm(fact)
    variants = [base]
    bare = _norm(_CURRENCY_PREFIX.sub("", fact))
    if bare != base:
        variants.append(bare)  # "$1,200.50" kept as "1200.50 dollars"
    if base.startswith("#") and base[1:].isdigit():
        variants.append(base[1:])  # "#4471" kept as "ticket 4471"
    if base.endswith("%"):
        variants.append(base[:-1] + " percent")
    return variants


def _fact_pattern(variant: str) -> re.Pattern[str]:
    before, after = "", ""
    if variant[0].isdigit():
        before = r"(?<!\d)(?<!\d[.,])"
    elif variant[0].isalpha() and re.match(rf"[{_LATIN_LETTER}]", variant[0]):
        before = rf"(?<![{_LATIN_LETTER}0-9])"
    if variant[-1].isdigit():
        after = r"(?!\d)(?![.,]\d)"
    elif variant[-1].isalpha() and re.match(rf"[{_LATIN_LETTER}]", variant[-1]):
        after = rf"(?![{_LATIN_LETTER}0-9])"
    return re.compile(before + re.escape(variant) + after)


def _present(fact: str, haystack: str) -> bool:
    return any(
        variant in haystack and _fact_pattern(variant).search(haystack) is not None
        for variant in _variants(fact)
    )


def retention_score(source: str, summary: str) -> tuple[float, list[str]]:
    """Share of ``extract_facts(source)`` found in ``summary`` (rounded to 4 decimals) and the
    missing facts in source order. A source without facts scores 1.0.

    Matching is case-insensitive on whole tokens (``12`` is not found inside ``2012``), ignores
    thousands separators and a space before ``%``, and accepts money without its currency sign,
    ``#4471`` as ``4471`` and ``15%`` as ``15 percent``.
    """
    facts = extract_facts(source)
    if not facts:
        return 1.0, []
    haystack = _norm(summary or "")
    missing = [fact for fact in facts if not _present(fact, haystack)]
    return round((len(facts) - len(missing)) / len(facts), 4), missing
