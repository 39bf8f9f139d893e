"""Names as facts: runs of capitalised words that are not sentence starts, greetings,
titles or stop words (``compaction.facts``). Pure: stdlib only."""

from __future__ import annotations

import re
from dataclasses import dataclass

from chat_platform.stopwords import STOPWORDS


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


def names_in(text: str, masked: str) -> list[tuple[int, str]]:
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
