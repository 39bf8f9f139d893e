"""Snapshot descriptions that tell one snapshot from the rest of the session (docs/memory.md).

``Pre-compaction snapshot of messages <first>–<last>: <terms>``, at most 140 characters. The terms
are what sets this transcript apart from the session's other records, TF-IDF-like: how often a
term occurs here (a user's turn counts more than a reply, a reply more than a tool result) times
how rare it is among the other records' bodies. A term every other record holds says nothing
about this one and is left out (unless nothing else is left); so is a reply's boilerplate (a term
only the assistant says, in most of its replies). Names, dates and numbers with their context
("Henrik Dahl", "14 March", "2024-03-08", "flight BA117", "1,250 euros") weigh more than plain
words; stop words and chat filler never appear. Pure and deterministic: same inputs, same text.
"""

import math
import re
import threading
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from functools import lru_cache

from chat_platform.stopwords import STOPWORDS
from chat_platform.transcript import SPEAKER_NAME, STAMP

DESCRIPTION_MAX = 140
MAX_TERMS = 6
# What a turn weighs, by its speaker label; unlabelled lines (summary text) weigh OTHER_WEIGHT.
SPEAKER_WEIGHT = {"user": 1.0, "assistant": 0.35, "system": 0.35, "tool": 0.2}
OTHER_WEIGHT = 0.5
KIND_BOOST = {"date": 1.8, "number": 1.5, "name": 1.5, "word": 1.0}
# A term only the assistant says, in at least this share of its replies (of at least 3), is the
# reply's template, not the topic.
BOILERPLATE_SHARE = 0.5
# A term in at least this share of the other records is shared filler.
SHARED_SHARE = 0.8
# A tool's result is read as far as its first TOOL_RESULT_CHARS characters, as a message is
# embedded (memory/embeddings.py) and a summary keeps a result's head: a long result's body
# would cost a pass more than the rest of its description (docs/tools.md).
TOOL_RESULT_CHARS = 2_000

# A speaker label (its time stamp is no fact of the record); a quoted one cut short
# (``[586] assistant`` at a line's end) too.
# (A room names its speakers; one whose name reads as a role is quoted: "«Tool»", never "tool".)
# A room's line names its speaker as chosen, after the date ("[13] 2024-03-08 13:57Z Research
# Helper: …"; chat_platform.transcript.NAMED_SPEAKER).
_LABEL = re.compile(
    rf"^\s*\[\d+\]\s*(?:(?:{STAMP}\s+)?([A-Za-z]+|«[^»\n]{{1,60}}»)(?:\s*\([^)]*\))?(?::\s*|\s*$)"
    rf"|{STAMP}\s+({SPEAKER_NAME})\s*:\s*)"
)
_HEADER = re.compile(r"^\s*\[[^\]\n]*\]\s*$")
_TOKEN = re.compile(r"[^\W_]+(?:['\u2019.,:/-][^\W_]+)*")
_BREAK = re.compile(r"[.!?:;\n]|\s-\s")
_WORD = re.compile(r"[^\W_]+")
_ISO_DATE = re.compile(r"\d{4}-\d{2}-\d{2}$")
_DAY = re.compile(r"(\d{1,2})(?:st|nd|rd|th)?$", re.IGNORECASE)
_YEAR = re.compile(r"(?:19|20)\d{2}$")
_MONTH_NAMES = (
    "january february march april may june july august september october november december"  # noqa: E501
)
MONTHS = {m: m.capitalize() for m in _MONTH_NAMES.split()}
MONTHS |= {m[:3]: full for m, full in list(MONTHS.items())} | {"sept": "September"}


@dataclass(frozen=True)
class _Token:
    text: str
    starts_sentence: bool


@dataclass
class _Term:
    kind: str
    shown: str
    parts: tuple[str, ...]  # lower-case words the term is made of (for document frequency)


def _segments(body: str) -> list[tuple[str | None, str]]:
    """(speaker, text) per message of a transcript; summary text and headers have no speaker."""
    segments: list[tuple[str | None, list[str]]] = []
    for line in body.splitlines():
        label = _LABEL.match(line)
        if label:
            speaker = label.group(1) or label.group(2)
            segments.append((speaker.lower(), [line[label.end() :]]))
        elif _HEADER.match(line):
            segments.append((None, []))
        elif segments:
            segments[-1][1].append(line)
        else:
            segments.append((None, [line]))
    return [(speaker, "\n".join(lines)) for speaker, lines in segments if lines]


def _tokens(text: str) -> list[_Token]:
    tokens: list[_Token] = []
    end = 0
    for match in _TOKEN.finditer(text):
        gap = text[end : match.start()]
        tokens.append(_Token(match.group(), not tokens or bool(_BREAK.search(gap))))
        end = match.end()
    return tokens


def _bare(word: str) -> str:
    """A word without a possessive ("Clara's" -> "Clara")."""
    return word[:-2] if word.endswith(("'s", "\u2019s")) else word


# The transcript's own words (speaker labels, record names), never a topic.
TRANSCRIPT_WORDS = frozenset({"user", "assistant", "tool", "system", "snapshot"})


def _is_content(word: str) -> bool:
    low = word.lower()
    return (
        low.isalpha()
        and len(low) >= 3
        and low not in STOPWORDS
        and low not in MONTHS
        and low not in TRANSCRIPT_WORDS
    )


def _has_digit(word: str) -> bool:
    return not word.isalpha() and any(c.isdigit() for c in word)


def _month(word: str) -> str | None:
    return MONTHS.get(word.lower().rstrip("."))


class _Terms:
    """The terms of one message as they are taken: each word goes to one term at most."""

    def __init__(self, tokens: list[_Token]) -> None:
        self.tokens = tokens
        self.terms: list[_Term] = []
        self.used = [False] * len(tokens)
        self.words = [_bare(t.text) for t in tokens]

    def take(self, i: int, j: int, kind: str, shown: str) -> None:
        for k in range(i, j):
            self.used[k] = True
        word = self.words[i]
        if j == i + 1 and word.isalnum():  # one word, all of it one _WORD: most terms
            parts: tuple[str, ...] = (word.lower(),)
        else:
            parts = tuple(w.lower() for k in range(i, j) for w in _WORD.findall(self.words[k]))
        self.terms.append(_Term(kind, shown, parts))

    def dates(self) -> None:
        """2024-03-08, 14 March (2024), March 14th (2024)."""
        words, used = self.words, self.used
        for i, word in enumerate(words):
            if used[i]:
                continue
            if _ISO_DATE.match(word):
                self.take(i, i + 1, "date", word)
                continue
            month = _month(word)
            if month is None or (word.lower() == "may" and not word[0].isupper()):
                continue
            before = _DAY.match(words[i - 1]) if i > 0 and not used[i - 1] else None
            after = _DAY.match(words[i + 1]) if i + 1 < len(words) else None
            if before and 1 <= int(before.group(1)) <= 31:
                start, end, shown = i - 1, i + 1, f"{int(before.group(1))} {month}"
            elif after and 1 <= int(after.group(1)) <= 31:
                start, end, shown = i, i + 2, f"{month} {int(after.group(1))}"
            else:
                continue
            if end < len(words) and _YEAR.match(words[end]):
                shown, end = f"{shown} {words[end]}", end + 1
            self.take(start, end, "date", shown)

    def _context(self, i: int) -> int | None:
        """The content word just before number ``i`` that says what it is, if any."""
        for k in (i - 1, i - 2):
            if k < 0 or self.used[k] or self.tokens[k + 1].starts_sentence:
                return None
            if _is_content(self.words[k]):
                return k
            if self.words[k].lower() not in STOPWORDS:
                return None
        return None

    def numbers(self) -> None:
        """Numbers and codes, with the content word that says what they are."""
        tokens, words, used = self.tokens, self.words, self.used
        for i, word in enumerate(words):
            if used[i] or not _has_digit(word):
                continue
            code = any(c.isalpha() for c in word)
            context = self._context(i)
            if context is not None:
                for k in range(context, i + 1):
                    used[k] = True
                parts = (words[context].lower(), *(w.lower() for w in _WORD.findall(word)))
                self.terms.append(_Term("number", f"{words[context]} {word}", parts))
                continue
            nxt = words[i + 1] if i + 1 < len(words) else ""
            if (
                not code
                and nxt
                and not used[i + 1]
                and not tokens[i + 1].starts_sentence
                and nxt.islower()
                and _is_content(nxt)
            ):
                self.take(i, i + 2, "number", f"{word} {nxt}")
            elif code or len(re.sub(r"\D", "", word)) >= 3:
                self.take(i, i + 1, "number", word)

    def names(self, proper: set[str]) -> None:
        """Runs of capitalised words that are proper (seen capitalised inside a sentence)."""
        words = self.words
        i = 0
        while i < len(words):
            j = i
            while (
                j < len(words)
                and not self.used[j]
                and words[j][:1].isupper()
                and words[j].isalpha()
                and words[j].lower() in proper
                and (j == i or not self.tokens[j].starts_sentence)
            ):
                j += 1
            if j > i:
                self.take(i, j, "name", " ".join(words[i:j]))
                i = j
            else:
                i += 1

    def plain(self) -> None:
        for i, word in enumerate(self.words):
            if not self.used[i] and _is_content(word) and len(word) >= 4:
                self.take(i, i + 1, "word", word.lower())


def _terms_of(tokens: list[_Token], proper: set[str]) -> list[_Term]:
    """The terms of one message, in order: dates, numbers in context, names, then plain words."""
    found = _Terms(tokens)
    found.dates()
    found.numbers()
    found.names(proper)
    found.plain()
    return found.terms


def _proper_words(tokenised: list[tuple[str | None, list[_Token]]]) -> set[str]:
    """Lower-cased words seen capitalised inside a sentence (so not just a sentence's start)."""
    proper: set[str] = set()
    for _, tokens in tokenised:
        for token in tokens:
            word = _bare(token.text)
            if (
                not token.starts_sentence
                and word[:1].isupper()
                and word.isalpha()
                and word.lower() not in STOPWORDS
            ):
                proper.add(word.lower())
    return proper


@lru_cache(maxsize=128)
def document_words(body: str) -> frozenset[str]:
    """The lower-case words of another record's body, for document frequency. Cached: a long
    reply compacting inside itself describes a snapshot per pass against the same records
    (docs/performance.md, tool task)."""
    return frozenset(w.lower() for w in _WORD.findall(body))


class _DocumentFrequency:
    """How many of a list of documents hold each word: one Counter per process, moved by the
    difference from the last list asked about. A long reply compacting inside itself describes a
    snapshot per pass against the same records and one more (docs/performance.md, tool task):
    counting every word of every record again cost more than the rest of the description.

    Documents are ``document_words`` sets, told apart by identity; the last list's are held, so
    an identity is never reused while it is counted. One lock: answers are read under it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._docs: Counter[int] = Counter()  # id(document) -> how many times it is in the list
        self._held: dict[int, frozenset[str]] = {}
        self._words: Counter[str] = Counter()

    def _move_to(self, docs: list[frozenset[str]]) -> None:
        wanted = Counter(id(d) for d in docs)
        by_id = {id(d): d for d in docs}
        added, removed = wanted - self._docs, self._docs - wanted
        changed = sum(
            len(by_id[i] if i in by_id else self._held[i]) * n for i, n in (added + removed).items()
        )
        if changed > sum(len(d) for d in docs):
            self._words = Counter(w for d in docs for w in d)
        else:
            for i, n in removed.items():
                for _ in range(n):
                    self._words.subtract(self._held[i])
                for word in self._held[i]:
                    if self._words[word] <= 0:
                        del self._words[word]
            for i, n in added.items():
                for _ in range(n):
                    self._words.update(by_id[i])
        self._docs, self._held = wanted, by_id

    def frequencies(
        self, wanted: dict[str, frozenset[str]], docs: list[frozenset[str]]
    ) -> dict[str, int]:
        with self._lock:
            self._move_to(docs)
            counts = self._words
            return {
                key: counts[next(iter(parts))]
                if len(parts) == 1
                else sum(1 for d in docs if parts <= d)
                for key, parts in wanted.items()
            }


_DOCUMENT_FREQUENCY = _DocumentFrequency()


def _frequencies(wanted: dict[str, frozenset[str]], docs: list[frozenset[str]]) -> dict[str, int]:
    """How many of ``docs`` hold every one of each key's words: single words from the
    document frequencies (``_DocumentFrequency``), word groups checked document by document."""
    return _DOCUMENT_FREQUENCY.frequencies(wanted, docs)


def distinctive_terms(body: str, others: Iterable[str], *, limit: int = MAX_TERMS) -> list[str]:
    """The terms that set ``body`` apart from ``others`` (the session's other records), best
    first (ties: first seen)."""
    tokenised = [
        (speaker, _tokens(text[:TOOL_RESULT_CHARS] if speaker == "tool" else text))
        for speaker, text in _segments(body)
    ]
    proper = _proper_words(tokenised)
    docs = [document_words(o) for o in others]
    weight: dict[str, float] = defaultdict(float)
    shown: dict[str, dict[str, int]] = defaultdict(dict)
    info: dict[str, _Term] = {}
    first_seen: dict[str, int] = {}
    speakers: dict[str, set[str | None]] = defaultdict(set)
    in_replies: dict[str, int] = defaultdict(int)
    replies = 0
    for speaker, tokens in tokenised:
        replies += speaker == "assistant"
        seen_here: set[str] = set()
        for term in _terms_of(tokens, proper):
            key = term.shown.lower()
            weight[key] += SPEAKER_WEIGHT.get(speaker or "", OTHER_WEIGHT)
            shown[key][term.shown] = shown[key].get(term.shown, 0) + 1
            info.setdefault(key, term)
            first_seen.setdefault(key, len(first_seen))
            speakers[key].add(speaker)
            if speaker == "assistant" and key not in seen_here:
                in_replies[key] += 1
            seen_here.add(key)
    n = len(docs)
    frequency = _frequencies(
        {
            key: frozenset(set(term.parts) - STOPWORDS or set(term.parts))
            for key, term in info.items()
        },
        docs,
    )
    scored: list[tuple[float, int, str, bool]] = []
    for key, w in weight.items():
        term = info[key]
        df = frequency[key]
        shared = n > 0 and df >= max(1, math.ceil(SHARED_SHARE * n))
        boilerplate = (
            speakers[key] == {"assistant"}
            and replies >= 3
            and in_replies[key] >= BOILERPLATE_SHARE * replies
        )
        if boilerplate:
            continue
        idf = math.log(1 + (n + 1) / (df + 1))
        score = math.log1p(w) * idf * KIND_BOOST[term.kind]
        scored.append((score, first_seen[key], key, shared))
    distinct = [s for s in scored if not s[3]] or scored
    distinct.sort(key=lambda s: (-s[0], s[1]))
    chosen: list[str] = []
    for _, _, key, _ in distinct:
        if len(chosen) >= limit:
            break
        if any(set(key.split()) <= set(c.lower().split()) for c in chosen):
            continue
        forms = shown[key]
        chosen.append(min(forms, key=lambda f: (-forms[f], f)))
    return chosen


def snapshot_description(first_seq: int, last_seq: int, body: str, others: Iterable[str]) -> str:
    """docs/memory.md's description: the prefix, then as many distinctive terms as fit in 140."""
    description = f"Pre-compaction snapshot of messages {first_seq}–{last_seq}"
    separator = ": "
    for topic in distinctive_terms(body, others):
        candidate = f"{description}{separator}{topic}"
        if len(candidate) <= DESCRIPTION_MAX:
            description, separator = candidate, ", "
    return description[:DESCRIPTION_MAX]
