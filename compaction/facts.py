"""Fact retention (docs/compaction.md). Pure: stdlib only, no I/O.

``extract_facts`` / ``retention_score`` measure how many of the source's names, numbers, dates and
identifiers a summary kept. Extraction is a deterministic set of regular expressions applied in a
fixed priority order (``compaction.fact_patterns``, names by ``compaction.fact_names``); each
character of the source belongs to at most one fact, facts come out in source order,
de-duplicated case-insensitively (and with number formatting ignored).
"""

from __future__ import annotations

import re

from compaction.fact_names import names_in
from compaction.fact_patterns import (
    FACT_NEEDLES,
    FACT_PATTERNS,
    LIST_MARKER,
    MESSAGE_REF,
    NAME_LABEL,
    QUOTE_LINE,
    RECALL_ANSWER_LINE,
    RECALL_TOOL_LINE,
    RECORD_FRAME,
    SECTION_HEADER,
    SEQ_LABEL,
    SPEAKER_LABEL,
    TOOL_LINE,
    TOOL_NAME,
    TOOL_USE,
)


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


_CLAIMED_RUN = re.compile(rb"\x01+")


def _claimed_zeroed(text: str, taken: bytearray) -> str:
    """``text`` with every claimed character replaced by "0", run by run (not character by
    character: a tool result of thousands of identifiers is ~10 KB)."""
    parts: list[str] = []
    end = 0
    for run in _CLAIMED_RUN.finditer(taken):
        parts.append(text[end : run.start()])
        parts.append("0" * (run.end() - run.start()))
        end = run.end()
    parts.append(text[end:])
    return "".join(parts)


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
            label = SEQ_LABEL.match(line)
            if SECTION_HEADER.match(line) or (label and int(label.group("seq")) > tool_seq):
                tool_seq = None
        if tool_seq is None:
            tool = RECALL_TOOL_LINE.match(line)
            if tool:
                tool_seq = int(tool.group("seq"))
        if tool_seq is None:
            if RECALL_ANSWER_LINE.match(line):
                quoting = True
            elif quoting and not QUOTE_LINE.match(line):
                quoting = False
        blank = tool_seq is not None or (quoting and QUOTE_LINE.match(line) is not None)
        out.append(re.sub(r"[^\n]", " ", line) if blank else line)
    return "".join(out)


def _without_tool_lines(text: str, masked: str) -> tuple[str, str]:
    """``text`` and ``masked`` (the same length) with each tool result's line (``TOOL_LINE``)
    cut down to one space: its facts are the tool's, not the conversation's, and a long result
    would be most of what every pattern reads (a pass of a tool task, docs/performance.md).
    Blanked, as it was before, it matched nothing either; only the facts' order is read from
    positions, and it is kept."""
    spans = [match.span() for match in TOOL_LINE.finditer(masked)]
    if not spans:
        return text, masked
    texts: list[str] = []
    maskeds: list[str] = []
    end = 0
    for start, stop in spans:
        texts += (text[end:start], " ")
        maskeds += (masked[end:start], " ")
        end = stop
    texts.append(text[end:])
    maskeds.append(masked[end:])
    return "".join(texts), "".join(maskeds)


def extract_facts(text: str) -> list[str]:
    """Names, numbers, dates/times and identifiers of ``text``: ordered by first appearance,
    de-duplicated case-insensitively (``1,200`` and ``1200`` are one fact)."""
    if not text:
        return []
    # Speaker labels ("user:", "[12] tool (read_records):") and list markers are not facts;
    # blank them out (same length, so positions stay valid).
    masked = _recall_traffic(text)
    text, masked = _without_tool_lines(text, masked)
    # (A name label is looked for once the role label before it is blank.)
    noises = (
        TOOL_USE,
        TOOL_NAME,
        MESSAGE_REF,
        RECORD_FRAME,
        SPEAKER_LABEL,
        NAME_LABEL,
    )
    for noise in (*noises, LIST_MARKER):
        masked = noise.sub(lambda m: " " * len(m.group()), masked)
    taken = bytearray(len(masked))
    found: list[tuple[int, str]] = []
    lowered = masked.lower()
    for (pattern, kind), needles in zip(FACT_PATTERNS, FACT_NEEDLES, strict=True):
        if needles and not any(needle in lowered for needle in needles):
            continue  # it cannot match here (fact_patterns.FACT_NEEDLES)
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
    unclaimed = _claimed_zeroed(masked, taken)
    found.extend(names_in(text, unclaimed))
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
