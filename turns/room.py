"""Rooms: who answers a message, and who a bot's reply hands the floor to (docs/rooms.md).

A user message goes to the bots it ``@mentions`` (by slug or by name, case-folded), else to the
room's default bot; ``reply_mode`` ``all`` makes every participant answer, in participant order;
``manual`` lets the user pick (``reply_as``). A bot's reply that mentions another participant
hands it the floor, bounded: at most ``ROOM_MAX_HOPS`` bot-triggered replies per user message, no
bot answers its own mention, a bot that already answered that message does not answer again (a
cycle); when a bound stops a chain, one notice says so. A mention counts only outside quotes,
code and the room header, and a reply's echo of what was just said hands nobody the floor.

This module decides; ``turns.services.send`` and ``turns.turn`` write through ``bots.transitions``.
"""

import bisect
import re
from collections import defaultdict, deque
from dataclasses import dataclass

from django.conf import settings

from bots.models import Bot, ChatSession, Message, SessionParticipant
from bots.queries import bot_usable_in, participants_of, session_seat
from compaction.seats import ROOM_HEADER_ECHO

# ``@`` at the start or after a non-word character, then a slug or a name. Names may hold
# spaces, so a mention is matched against the participants' own names and slugs rather than
# parsed into a word first.
_MENTION_START = re.compile(r"(?<![\w@])@")

# What only cites a mention (docs/rooms.md "Who answers"): fenced code (``` or ~~~, to its
# closing fence or the end), inline code, ``>`` blockquote lines, text in double quotation marks
# (straight, curly or guillemets; within a paragraph, so a stray mark masks nothing further) and
# the room header. Single quotes are left alone: they are apostrophes as often as quotes.
# Every pattern is linear in the text (a message may be 1 MB): runs are matched atomically, and
# a quotation never spans another opening mark, so no start rescans what the one before read.
_CITED = [
    re.compile(
        r"^[ \t]{0,3}((?>`{3,})|(?>~{3,}))[^\n]*+\n.*?(?:^[ \t]{0,3}\1[`~]*+[ \t]*$|\Z)",
        re.M | re.S,
    ),
    re.compile(r"^[ \t]{0,3}>.*$", re.M),
    re.compile(
        r'"(?:[^"\n]|\n(?![ \t]*\n))*+"|\u201c[^\u201c\u201d]*+\u201d|\u00ab[^\u00ab\u00bb]*+\u00bb'
    ),
    ROOM_HEADER_ECHO,
]
# Inline code: a run of backticks up to the next run of the same length (scanned, not matched:
# a regex tries every unclosed run against the whole rest of the text).
_TICKS = re.compile(r"`+")
# The mentions of one reply weighed for a hand-over: past these, a reply hands the floor to no
# one more (each costs a look through the earlier messages).
MENTIONS_WEIGHED_MAX = 50
# A sentence (or a clause a reply introduces with a colon or a dash): up to a line break, or to
# ``.``, ``!``, ``?``, ``:``, ``;`` or a dash followed by a space.
_SENTENCE_END = re.compile(r"\n|[.!?:;\u2014\u2013](?=\s)")


def _inline_code_blanked(text: str) -> str:
    runs = [(m.start(), m.end()) for m in _TICKS.finditer(text)]
    by_length: dict[int, deque[int]] = defaultdict(deque)
    for index, (start, end) in enumerate(runs):
        by_length[end - start].append(index)
    pieces: list[str] = []
    kept = 0  # text before this is in ``pieces``
    index = 0
    while index < len(runs):
        start, end = runs[index]
        same = by_length[end - start]
        while same and same[0] <= index:
            same.popleft()
        if not same:
            index += 1
            continue
        closing = same.popleft()
        pieces += [text[kept:start], " " * (runs[closing][1] - start)]
        kept = runs[closing][1]
        index = closing + 1
    return "".join([*pieces, text[kept:]])


def mention_text(text: str) -> str:
    """``text`` with every cited stretch (code, quotes, the room header) blanked to spaces: the
    mentions left in it address someone. Positions are kept, so sentences stay where they were."""
    text = _CITED[0].sub(lambda match: " " * len(match.group(0)), text)
    text = _inline_code_blanked(text)
    for pattern in _CITED[1:]:
        text = pattern.sub(lambda match: " " * len(match.group(0)), text)
    return text


def _mention_keys(participants: list[SessionParticipant]) -> list[tuple[str, Bot]]:
    keys: list[tuple[str, Bot]] = []
    for participant in participants:
        bot = participant.bot
        for key in {bot.slug.casefold(), bot.name.casefold().strip()}:
            if key:
                keys.append((key, bot))
    keys.sort(key=lambda pair: -len(pair[0]))
    return keys


def _mentions(folded: str, keys: list[tuple[str, Bot]]) -> list[tuple[int, int, Bot]]:
    """Each mention in ``folded`` as (start, end, bot), the longest key winning at each ``@``;
    a mention must end at a word boundary."""
    found: list[tuple[int, int, Bot]] = []
    for match in _MENTION_START.finditer(folded):
        start = match.end()
        for key, bot in keys:
            end = start + len(key)
            if folded.startswith(key, start) and (
                end == len(folded) or not (folded[end].isalnum() or folded[end] in "-_")
            ):
                found.append((match.start(), end, bot))
                break
    return found


def _first_each(bots: list[Bot]) -> list[Bot]:
    found: list[Bot] = []
    for bot in bots:
        if all(b.pk != bot.pk for b in found):
            found.append(bot)
    return found


def mentioned_bots(text: str, participants: list[SessionParticipant]) -> list[Bot]:
    """The participants ``text`` mentions, in the order they are first mentioned. ``@<slug>``
    or ``@<name>``, case-folded; the longest name wins where one is a prefix of another
    (``@Ann Lee`` is Ann Lee, not Ann), and a mention must end at a word boundary. A mention in
    code, a blockquote, quotation marks or the room header only cites the bot
    (``mention_text``)."""
    folded = mention_text(text).casefold()
    return _first_each([bot for _, _, bot in _mentions(folded, _mention_keys(participants))])


def _normal(text: str) -> str:
    return " ".join(text.casefold().split()).strip(" .!?,;:")


def _sentence(folded: str, ends: list[tuple[int, int]], start: int, end: int) -> str:
    """The sentence of ``folded`` around ``[start, end)``, normalised; ``ends`` are the
    (start, end) of every sentence end in ``folded``, in order."""
    at = bisect.bisect_left(ends, (start, -1))
    opened = ends[at - 1][1] if at else 0
    after = bisect.bisect_left(ends, (end, -1))
    closed = ends[after][0] if after < len(ends) else len(folded)
    return _normal(folded[opened:closed])


def addressed_bots(
    text: str, participants: list[SessionParticipant], *, earlier: list[str]
) -> list[Bot]:
    """The participants a bot's reply hands the floor to: ``mentioned_bots``, less the mentions
    the reply only echoes — a mention whose sentence, beyond the mention itself, repeats one of
    the ``earlier`` messages word for word (a bot restating what it was asked)."""
    folded = mention_text(text).casefold()
    said = [_normal(t) for t in earlier]
    ends = [(m.start(), m.end()) for m in _SENTENCE_END.finditer(folded)]
    bots: list[Bot] = []
    mentions = _mentions(folded, _mention_keys(participants))
    for start, end, bot in mentions[:MENTIONS_WEIGHED_MAX]:
        if any(b.pk == bot.pk for b in bots):
            continue
        sentence = _sentence(folded, ends, start, end)
        rest = _normal(sentence.replace(_normal(folded[start:end]), " ", 1))
        if rest and any(sentence in text for text in said):
            continue
        bots.append(bot)
    return _first_each(bots)


def answering_bots(
    *,
    session: ChatSession,
    text: str,
    participants: list[SessionParticipant],
    reply_as: Bot | None = None,
) -> list[Bot]:
    """Who answers a user message, in answer order (each sees the replies before it)."""
    if reply_as is not None:
        return [reply_as]
    if session.reply_mode == ChatSession.ReplyMode.ALL:
        return [p.bot for p in participants]
    mentioned = mentioned_bots(text, participants)
    if mentioned:
        return mentioned
    default = next((p.bot for p in participants if p.is_default), None)
    return [default or session.bot]


@dataclass(frozen=True)
class Handover:
    """What a finished bot reply leads to: the bots it hands the floor to, and the one notice
    (or none) naming the bounds that stopped the others."""

    bots: list[Bot]
    notice: str | None


def handovers(
    *,
    reply: Message,
    speaker: Bot,
    participants: list[SessionParticipant],
    answered_bot_ids: set[int],
    waiting_bot_ids: set[int],
    hops_so_far: int,
    earlier: list[str],
) -> Handover:
    """The floor after ``speaker``'s reply: each participant it addresses (``addressed_bots``:
    not in quotes or code, not the room header, not an echo of ``earlier``) answers next, unless
    it already answered this user message (a cycle) or the chain has used its ``ROOM_MAX_HOPS``
    bot-triggered replies. The speaker's own name is no hand-over and says nothing; a mentioned
    bot still waiting to answer (queued by the user's message) answers anyway. Every stop of one
    reply is told in one notice."""
    limit = settings.ROOM_MAX_HOPS
    bots: list[Bot] = []
    cycles: list[str] = []
    over: list[str] = []
    hops = hops_so_far
    for bot in addressed_bots(reply.content, participants, earlier=earlier):
        if bot.pk == speaker.pk or bot.pk in waiting_bot_ids:
            continue
        if bot.pk in answered_bot_ids:
            cycles.append(bot.name)
        elif hops >= limit:
            over.append(bot.name)
        else:
            bots.append(bot)
            answered_bot_ids.add(bot.pk)
            hops += 1
    return Handover(bots=bots, notice=_stop_notice(speaker.name, cycles, over, limit))


def _names(names: list[str]) -> str:
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _stop_notice(speaker: str, cycles: list[str], over: list[str], limit: int) -> str | None:
    if cycles and not over:
        return (
            f"{speaker} handed the floor back to {_names(cycles)}, who already answered this "
            "message; the chain stops "
            "here to avoid a loop."
        )
    if over and not cycles:
        verb = "does" if len(over) == 1 else "do"
        return (
            f"{speaker} mentioned {_names(over)}, but this message already led to {limit} "
            f"bot-to-bot replies (the room's limit); {_names(over)} {verb} not answer."
        )
    if cycles and over:
        return (
            f"{speaker} mentioned {_names(cycles + over)}; the chain stops here: "
            f"{_names(cycles)} already answered this message, and it already led to {limit} "
            f"bot-to-bot replies (the room's limit)."
        )
    return None


def compact_seat(
    session: ChatSession, focus: str, *, scope: frozenset[int] | None = None
) -> tuple[ChatSession | None, str]:
    """``/compact @slug rest``: the seat of the participant the leading mention names (slug or
    name, as mentions are matched), and the rest as the focus; None if it names nobody here.
    ``scope``: the bots the request's API key is limited to; another bot is nobody here."""
    participants = [
        p
        for p in participants_of(session=session)
        if bot_usable_in(session=session, bot=p.bot) and (scope is None or p.bot_id in scope)
    ]
    folded = focus.casefold()
    for participant in sorted(participants, key=lambda p: -len(p.bot.name)):
        bot = participant.bot
        for key in (bot.slug.casefold(), bot.name.casefold().strip()):
            end = 1 + len(key)
            if key and folded.startswith(key, 1) and (len(folded) == end or folded[end].isspace()):
                return session_seat(session, bot), focus[end:].strip()
    return None, focus
