# ruff: noqa: E501 - the corpus is prose: one turn or question a line reads best
"""The corpus of ``bench/memory_retrieval.py``: a long, dated chat between two friends.

Ravi (a civil engineer in Leeds who moves to Bristol part-way through) and Mei (a nurse in
Manchester) message each other over 24 dated sessions from March to June 2024. Facts come up in
passing, inside small talk ("We finally took the boat out to the lake on Saturday"), some change
later (Ravi's city, Mei's flatmates, her shifts) and some are picked up again in a later session.
Everything here was written for this bench; nothing is taken from a public dataset.

The scripted parts (what each session is about, the facts, the questions) are fixed text; the
small talk around them is drawn from templates with a seeded ``random.Random``, so ``build()``
returns the same corpus on every run and machine.

Turn ids are ``D<session>:<n>`` (1-based). A question names its evidence by tag; ``build()``
resolves the tags to turn ids.
"""

from __future__ import annotations

import random
import re
import sys
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

SEED = 16
PEOPLE = {"R": "Ravi", "M": "Mei"}
KINDS = ("single-hop", "multi-hop", "temporal", "open-domain")


@dataclass(frozen=True)
class Turn:
    id: str
    session: int
    speaker: str
    text: str
    when: datetime
    tag: str = ""

    @property
    def date(self) -> str:
        return self.when.strftime("%Y-%m-%d")


@dataclass(frozen=True)
class Session:
    number: int
    when: datetime
    turns: tuple[Turn, ...]


@dataclass(frozen=True)
class Question:
    id: str
    kind: str
    text: str
    evidence: tuple[str, ...]  # turn ids
    answer: str


@dataclass(frozen=True)
class Corpus:
    sessions: tuple[Session, ...]
    questions: tuple[Question, ...]

    @property
    def turns(self) -> list[Turn]:
        return [turn for session in self.sessions for turn in session.turns]

    def turn(self, turn_id: str) -> Turn:
        return self._by_id()[turn_id]

    def _by_id(self) -> dict[str, Turn]:
        return {turn.id: turn for turn in self.turns}

    def subset(self, sessions: int) -> Corpus:
        """The first ``sessions`` sessions and the questions whose evidence lies in them."""
        kept = self.sessions[:sessions]
        ids = {turn.id for session in kept for turn in session.turns}
        questions = tuple(q for q in self.questions if set(q.evidence) <= ids)
        return Corpus(sessions=kept, questions=questions)


sys.path.insert(0, str(Path(__file__).resolve().parent))  # imported as bench.… by the tests

from retrieval_script import QUESTIONS, SCRIPT  # noqa: E402

__all__ = ["KINDS", "PEOPLE", "QUESTIONS", "SCRIPT", "Corpus", "Question", "Turn", "build"]


# --- the small talk ----------------------------------------------------------------------------
# Slots in {braces} are filled from FILL; pairs are (first speaker's line, the other's reply).

FILL: dict[str, list[str]] = {
    "weather": [
        "It's been raining sideways all day",
        "Finally a bit of sunshine this afternoon",
        "The wind nearly took my umbrella this morning",
        "Grey and drizzly again, shocking nobody",
        "It was properly warm at lunchtime for once",
        "Fog so thick this morning I couldn't see the end of the street",
    ],
    "show": [
        "that Danish detective series",
        "the new season of the baking show",
        "a documentary about octopuses",
        "an old sitcom from the nineties",
        "a cooking competition where everyone cries",
        "a nature series about deserts",
    ],
    "food": [
        "a chickpea curry",
        "leftover pasta",
        "cheese on toast",
        "a slightly burnt stir fry",
        "soup from a carton",
        "a takeaway pizza",
    ],
    "chore": [
        "laundry",
        "hoovering",
        "sorting out the recycling",
        "descaling the kettle",
        "cleaning the oven",
        "tidying the cupboard under the stairs",
    ],
    "feeling": [
        "knackered",
        "a bit flat",
        "weirdly cheerful",
        "over-caffeinated",
        "sleepy",
        "fine, mostly",
    ],
    "song": [
        "an old Motown playlist",
        "a podcast about shipwrecks",
        "some lo-fi beats",
        "a history podcast",
        "the same three albums as always",
    ],
}

SMALL_TALK: list[tuple[str, ...]] = [
    ("{weather}.", "Same here, more or less."),
    (
        "What are you watching at the moment?",
        "I'm hooked on {show}.",
        "Ooh, I'll add it to the list.",
    ),
    ("What did you have for dinner?", "Just {food}, nothing fancy."),
    ("Any plans for the evening?", "Probably {chore} and then bed."),
    ("How are you feeling today?", "Honestly, {feeling}.", "Same, it's that kind of week."),
    ("What are you listening to these days?", "Mostly {song}."),
    (
        "Did you sleep okay?",
        "Not really, the neighbours were having a party.",
        "On a weeknight? Rude.",
    ),
    ("Have you seen the price of butter lately?", "Don't get me started, it's criminal."),
    ("I've been doing {chore} all afternoon.", "The glamorous life."),
    (
        "Watched {show} last night.",
        "Any good?",
        "So good. I'll send you the link.",
        "Please do, I need something new.",
    ),
    (
        "My phone screen has a crack right across the middle now.",
        "Time for an upgrade, or a lot of tape.",
    ),
    ("I've had about four coffees today.", "That explains the typing speed."),
    ("Do you ever just stare at the fridge hoping food appears?", "Every single evening."),
    ("The bus was twenty minutes late again.", "Classic. At least it turned up."),
    ("I finally fixed the wobbly chair.", "A hero of our times."),
    (
        "My plants are looking sad again.",
        "Have you tried talking to them?",
        "I tried singing. They got worse.",
    ),
    ("I made {food} and it was actually decent.", "Look at you, chef."),
    ("Everyone at work has a cold right now.", "Stay away from them. Vitamins!"),
    ("Do you want to do a video call at the weekend?", "Yes, Sunday afternoon works."),
    ("I keep forgetting to reply to my group chats.", "You're not alone, mine has 200 unread."),
    ("I saw a fox in the street on the way home.", "They're so bold these days."),
    ("Did you see the football last night?", "No, I was asleep by nine."),
    (
        "I'm trying to drink more water.",
        "How's that going?",
        "Badly. I keep forgetting the bottle.",
        "Put a sticky note on the door.",
    ),
    ("Our street has roadworks again.", "They dig it up every month, I swear."),
    ("I bought new socks and it's the highlight of my week.", "New socks are underrated."),
    ("My laptop did an update in the middle of a meeting.", "They always know the worst moment."),
    (
        "I'm trying to read more instead of scrolling.",
        "How many pages so far?",
        "Eleven. It's a start.",
    ),
    ("{weather}, so I stayed in.", "Very sensible."),
    (
        "The supermarket has moved everything around again.",
        "It's a conspiracy to make us buy more.",
    ),
    (
        "I tried meditating this morning.",
        "And?",
        "Fell asleep after two minutes.",
        "Counts as rest.",
    ),
    ("I'm listening to {song} while I cook.", "Good cooking soundtrack."),
    ("Is it just me or is this week lasting a month?", "It's not just you."),
    ("I just found a tenner in an old coat.", "Best feeling in the world."),
    ("Do you think it's too early for mince pies?", "It's never too early. Or too late."),
    ("I've got a cold coming, I can feel it.", "Lemon, honey, early night."),
    ("The new neighbours have a piano.", "Are they any good?", "They know exactly one song."),
    ("Remind me to buy a birthday card tomorrow.", "I will not, I can't even remind myself."),
    (
        "I walked past that café we went to years ago.",
        "The one with the wobbly tables? Is it still there?",
    ),
    ("I reorganised my whole desk instead of working.", "Productive procrastination."),
    (
        "My mum sent me a voice note that was four minutes long.",
        "Mine does that too, it's always about the weather.",
    ),
]

GREETINGS: list[tuple[str, str]] = [
    ("Hey, how's it going?", "Hey! Not bad, you?"),
    ("Got a minute?", "Always. What's up?"),
    ("Hiya, are you around?", "I'm here, just got in."),
    ("Hello stranger.", "Hello! Sorry, it's been a mad few days."),
    ("Hi! How's your week been?", "Busy, but good. Yours?"),
]

CLOSINGS: list[tuple[str, str]] = [
    ("Right, I'd better go and get some sleep.", "Okay! Talk soon."),
    ("Okay, food's ready, speak later.", "Enjoy! Bye."),
    ("I'm fading, let's catch up at the weekend.", "Sounds good, rest up."),
    ("Got to dash, chat soon!", "Bye!"),
    ("Anyway, I'll let you go.", "Speak soon x"),
]

REACTIONS = [
    "Wait, really?",
    "Tell me everything next time.",
    "How do you feel about it?",
    "Well, that's news!",
    "I did not see that coming.",
    "Go on...",
    "Huh, okay!",
    "Keep me posted.",
]

SMALL_TALK_PER_SESSION = (5, 7)  # exchanges


class _Deck:
    """Small talk drawn without replacement, reshuffled when used up, so an exchange does not
    come back within a few sessions."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.cards: list[tuple[str, ...]] = []

    def draw(self) -> tuple[str, ...]:
        if not self.cards:
            self.cards = list(SMALL_TALK)
            self.rng.shuffle(self.cards)
        return self.cards.pop()


def _fill(text: str, rng: random.Random) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: rng.choice(FILL[m.group(1)]), text)


def _session(
    number: int, day: str, start: str, episodes, rng: random.Random, deck: _Deck
) -> Session:
    other = {"R": "M", "M": "R"}
    first = rng.choice("RM")
    blocks: list[list[tuple[str, str, str]]] = []
    greet = rng.choice(GREETINGS)
    blocks.append([(first, "", greet[0]), (other[first], "", greet[1])])
    talk = [deck.draw() for _ in range(rng.randint(*SMALL_TALK_PER_SESSION))]
    middle: list[list[tuple[str, str, str]]] = []
    for episode in episodes:
        turns = list(episode)
        if len(turns) == 1:
            turns.append((other[turns[0][0]], "", rng.choice(REACTIONS)))
        middle.append(turns)
    # Small talk goes between the episodes, in a seeded order; the episodes keep theirs.
    slots = sorted(rng.randint(0, len(middle)) for _ in talk)
    mixed: list[list[tuple[str, str, str]]] = []
    for position, episode in enumerate([*middle, None]):
        for slot, pair in zip(slots, talk, strict=True):
            if slot == position:
                speaker = rng.choice("RM")
                lines = []
                for line in pair:
                    lines.append((speaker, "", _fill(line, rng)))
                    speaker = other[speaker]
                mixed.append(lines)
        if episode is not None:
            mixed.append(episode)
    blocks.extend(mixed)
    close = rng.choice(CLOSINGS)
    closer = rng.choice("RM")
    blocks.append([(closer, "", close[0]), (other[closer], "", close[1])])
    when = datetime.fromisoformat(f"{day}T{start}:00").replace(tzinfo=UTC)
    turns = []
    for speaker, tag, text in (t for block in blocks for t in block):
        turns.append(
            Turn(
                id=f"D{number}:{len(turns) + 1}",
                session=number,
                speaker=PEOPLE[speaker],
                text=text,
                when=when,
                tag=tag,
            )
        )
        when += timedelta(seconds=rng.randint(40, 200))
    return Session(number=number, when=turns[0].when, turns=tuple(turns))


def build() -> Corpus:
    """The whole corpus, the same on every call."""
    rng = random.Random(SEED)
    deck = _Deck(rng)
    sessions = tuple(
        _session(number, day, start, episodes, rng, deck)
        for number, (day, start, episodes) in enumerate(SCRIPT, start=1)
    )
    by_tag: dict[str, str] = {}
    for session in sessions:
        for turn in session.turns:
            if turn.tag:
                if turn.tag in by_tag:
                    raise ValueError(f"tag used twice: {turn.tag}")
                by_tag[turn.tag] = turn.id
    questions = []
    counts: dict[str, int] = {}
    for kind, text, tags, answer in QUESTIONS:
        counts[kind] = counts.get(kind, 0) + 1
        questions.append(
            Question(
                id=f"{kind[0]}{counts[kind]:02d}",
                kind=kind,
                text=text,
                evidence=tuple(by_tag[tag] for tag in tags),
                answer=answer,
            )
        )
    return Corpus(sessions=sessions, questions=tuple(questions))
