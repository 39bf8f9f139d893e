"""The regular expressions of fact extraction (``compaction.facts``), in priority order, and
the labels and protocol lines that are never facts. Pure: stdlib only."""

from __future__ import annotations

import re

from chat_platform.llm.recall_protocol import ANSWER_HEADER, READ_TOOL, SAVE_TOOL, SEARCH_TOOL
from chat_platform.transcript import NAME, NAMED_SPEAKER, RAW_HEADING, ROLE, STAMP, SUMMARY_HEADING

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
# A room's line is labelled with its speaker's name ("[13] 2024-03-08 13:57Z Research Helper:").
SPEAKER_LABEL = re.compile(
    rf"^[ \t>*_-]*(?:(?:\[\d+\][ \t]*(?:{STAMP}[ \t]+)?)?{ROLE}(?:[ \t]*\([^)\n]*\))?"
    rf"|\[\d+\][ \t]*{NAMED_SPEAKER})[ \t]*:",
    re.IGNORECASE | re.MULTILINE,
)
# A speaker's name after the role label ("[12] user: Ravi: …", a relayed chat) or opening a
# line ("Alice: …"): who spoke, not a fact (a name said in a sentence still is one).
NAME_LABEL = re.compile(
    r"^[ \t>*_-]*\*{0,2}" + NAME + r"\*{0,2}[ \t]*:(?=[ \t])",
    re.MULTILINE,
)
LIST_MARKER = re.compile(r"^[ \t]*\d+[.)](?=[ \t])", re.MULTILINE)
# Tool traffic and talk about the transcript itself are not facts of the conversation: a tool
# line (its result quotes records whose facts are checked where they were said), "(used
# search_records)", "you said in message 32", "messages 12–40".
TOOL_LINE = re.compile(
    rf"^[ \t]*\[\d+\][ \t]*(?:{STAMP}[ \t]+)?tool\b[^\n]*$", re.IGNORECASE | re.MULTILINE
)
TOOL_USE = re.compile(r"\(used [a-z0-9_, ]+\)", re.IGNORECASE)
# The recall tools' names: a transcript that mentions them talks about its own machinery.
TOOL_NAME = re.compile(
    rf"(?<![A-Za-z0-9_])(?:{READ_TOOL}|{SEARCH_TOOL}|{SAVE_TOOL}|read_files)(?![A-Za-z0-9_])",
    re.IGNORECASE,
)
# A transcript line's label with its seq ("[12] 2024-03-08 13:56Z user:"), and the section
# headers of a fusion's input.
SEQ_LABEL = re.compile(
    rf"^[ \t]*\[(?P<seq>\d+)\][ \t]*"
    rf"(?:(?:{STAMP}[ \t]+)?[A-Za-z]+(?:[ \t]*\([^)\n]*\))?|{NAMED_SPEAKER})[ \t]*:"
)
SECTION_HEADER = re.compile(rf"^[ \t]*\[(?:{SUMMARY_HEADING}|{RAW_HEADING}) [^\]\n]*\][ \t]*$")
RECALL_TOOL_LINE = re.compile(
    rf"^[ \t]*\[(?P<seq>\d+)\][ \t]*(?:{STAMP}[ \t]+)?tool[ \t]*"
    rf"\((?:{READ_TOOL}|{SEARCH_TOOL}|{SAVE_TOOL})\)[ \t]*:",
    re.IGNORECASE,
)
RECALL_ANSWER_LINE = re.compile(
    rf"^[ \t]*\[\d+\][ \t]*(?:{STAMP}[ \t]+)?assistant[ \t]*:[ \t]*{re.escape(ANSWER_HEADER)}"
)
QUOTE_LINE = re.compile(r"^[ \t]*>")
# A record's frame in a tool result ("[record snapshot_1_34]"): machinery, even where a fused
# snapshot's own "[Summary of messages …]" header inside the result ended the blanking above.
RECORD_FRAME = re.compile(r"\[(?:record|not found:) ?[a-z0-9_-]{1,80}\]")
MESSAGE_REF = re.compile(
    r"\bmessages?[ \t]+\d+(?:[ \t]*(?:[-\u2013]|to|and)[ \t]*\d+)?", re.IGNORECASE
)


# (pattern, kind) in priority order: a later pattern never takes characters an earlier one took.
FACT_PATTERNS: list[tuple[re.Pattern[str], str]] = [
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

# What each pattern above cannot match without (any one of them, in the text lower-cased): a
# text holding none is not scanned with it. A tool result of thousands of words holds none of
# most (no "@", no "%", no month), and 30 scans of ~10 KB were most of a compaction's fact
# check (docs/performance.md, tool task). Empty: always scanned.
_MONTH_NEEDLES = tuple(m[:3] for m in _MONTHS_FULL.split("|"))
FACT_NEEDLES: list[tuple[str, ...]] = [
    ("://", "www."),  # url
    ("@",),  # email
    ("-",),  # uuid
    ("-",),  # ISO date
    ("/", "."),  # 2024/3/8, 8.3.2024
    ("月",),  # CJK date
    _MONTH_NEEDLES,  # 14th of March
    _MONTH_NEEDLES,  # March 14
    _MONTH_NEEDLES,  # March 2024
    _MONTH_NEEDLES,  # March
    ("day",),  # weekdays
    (":",),  # 13:56
    ("am", "pm", "a.m", "p.m"),  # 9 am
    ("v",),  # v1.2
    (".",),  # 1.2.3
    (":\\",),  # C:\
    ("/",),  # /usr/bin
    ("/",),  # src/app.py
    (".",),  # app.py
    (".",),  # example.com
    ("$", "€", "£", "¥", "₹", "₩"),  # money
    ("%",),  # percent
    ("#",),  # ticket
    ("0x",),  # hex with its prefix
    (),  # hex digits
    ("-", "_", "."),  # compound
    (),  # camelCase
    (),  # ABC123
    (),  # 4o1
    (),  # number
]
assert len(FACT_NEEDLES) == len(FACT_PATTERNS)
