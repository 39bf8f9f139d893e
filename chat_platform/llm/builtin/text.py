"""Small, deterministic text helpers shared by the built-in models (no litellm, no Django)."""

import re

from chat_platform.stopwords import QUERY_STOPWORDS, WORD

# Kana, CJK ideographs (incl. extension A and compatibility) and Hangul syllables. These scripts
# do not separate words with spaces, so they are matched by overlapping character bigrams.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
_CJK_RUN = re.compile(f"[{_CJK}]+")

STOPWORDS = QUERY_STOPWORDS

CJK_STOPWORDS = frozenset(
    """
    什么 我们 你们 他们 她们 这个 那个 一个 是什 么是
    我的 你的 的是 了吗 是不 不是 吗？ 请问 告诉 记得
    """.split()  # noqa: SIM905 - a word list reads better as prose
)


_DOUBLED = re.compile(r"([b-df-hjkmnp-rtv-y])\1$")  # planned -> plann -> plan (not "ll", "ss")
STEM_CHARS = 6


# (suffix, replacement, shortest word it applies to); the first that applies wins.
_SUFFIX_RULES = (
    ("ies", "y", 5),
    ("ing", "", 6),
    ("ed", "", 5),
    ("ches", "ch", 5),
    ("shes", "sh", 5),
    ("sses", "ss", 5),
    ("xes", "x", 5),
    ("zes", "z", 5),
    ("ly", "", 5),
    ("ss", "ss", 0),
    ("us", "us", 0),
    ("is", "is", 0),
    ("s", "", 4),
)


def stem(word: str) -> str:
    """A crude, deterministic stemmer: strip a few English suffixes, then keep at most six
    characters, so allergies/allergic, booking/booked and preference/prefer meet."""
    if word.isdigit():
        return word
    word = word.removesuffix("'s").removesuffix("\u2019s")
    for suffix, replacement, shortest in _SUFFIX_RULES:
        if word.endswith(suffix) and len(word) >= shortest:
            word = word[: len(word) - len(suffix)] + replacement
            break
    word = _DOUBLED.sub(r"\1", word)
    return word[:STEM_CHARS]


def terms(text: str) -> list[str]:
    """Normalised content terms of ``text``, in order: lower-cased words minus stopwords
    (stemmed), numbers, and bigrams of CJK runs (a lone CJK character stands for itself)."""
    out: list[str] = []
    for match in WORD.finditer(text.lower()):
        token = match.group()
        if not _CJK_RUN.search(token):
            if token in STOPWORDS or (len(token) == 1 and not token.isdigit()):
                continue
            out.append(stem(token))
            continue
        position = 0
        for run in _CJK_RUN.finditer(token):
            before = token[position : run.start()]
            if before and before not in STOPWORDS and (len(before) > 1 or before.isdigit()):
                out.append(stem(before))
            chars = run.group()
            if len(chars) == 1:
                out.append(chars)
            else:
                out.extend(
                    chars[i : i + 2]
                    for i in range(len(chars) - 1)
                    if chars[i : i + 2] not in CJK_STOPWORDS
                )
            position = run.end()
        after = token[position:]
        if after and after not in STOPWORDS and (len(after) > 1 or after.isdigit()):
            out.append(stem(after))
    return out


_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=\S)|(?<=[\u3002\uff01\uff1f])")


# A title or a Latin short form before its period ends no sentence: "Dr. Okafor", "e.g. this".
_ABBREVIATION = re.compile(r"(?<![\w.])(?:Mr|Mrs|Ms|Mx|Dr|Prof|Sr|Jr|St|Mt|vs|e\.g|i\.e|cf)\.$")


def sentences(line: str) -> list[str]:
    """Split one line into sentences on . ! ? followed by space (not after a title such as
    "Dr." or a short form such as "e.g."), and on CJK 。！？."""
    parts: list[str] = []
    start = 0
    for match in _SENTENCE_END.finditer(line):
        if _ABBREVIATION.search(line, max(start, match.start() - 6), match.start()):
            continue
        piece = line[start : match.end()].strip()
        if piece:
            parts.append(piece)
        start = match.end()
    rest = line[start:].strip()
    if rest:
        parts.append(rest)
    return parts


# A word with the blanks around it; text of blanks alone is one piece (``\s+$``: tried first at
# every blank of such a text, ``\s*\S+`` cost the square of its length).
_CHUNK = re.compile(r"\s*\S+\s*|\s+$")


def stream_pieces(text: str) -> list[str]:
    """Word-sized pieces whose concatenation is exactly ``text`` (CJK runs go 4 characters at
    a time, since they have no spaces to split on)."""
    pieces: list[str] = []
    for match in _CHUNK.finditer(text):
        piece = match.group()
        if len(piece) > 12 and _CJK_RUN.search(piece):
            pieces.extend(piece[i : i + 4] for i in range(0, len(piece), 4))
        else:
            pieces.append(piece)
    consumed = "".join(pieces)
    if consumed != text:  # whitespace-only text, or trailing whitespace the pattern missed
        pieces.append(text[len(consumed) :])
    return [p for p in pieces if p]
