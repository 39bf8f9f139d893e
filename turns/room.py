"""Rooms: who answers a message, and who a bot's reply hands the floor to (docs/rooms.md).

A user message goes to the bots it ``@mentions`` (by slug or by name, case-folded), else to the
room's default bot; ``reply_mode`` ``all`` makes every participant answer, in participant order;
``manual`` lets the user pick (``reply_as``). A bot's reply that mentions another participant
hands it the floor, bounded: at most ``ROOM_MAX_HOPS`` bot-triggered replies per user message, no
bot answers its own mention, a bot that already answered that message does not answer again (a
cycle); when a bound stops a chain, a notice says so.

This module decides; ``turns.services.send`` and ``turns.turn`` write through ``bots.transitions``.
"""

import re
from dataclasses import dataclass

from django.conf import settings

from bots.models import Bot, ChatSession, Message, SessionParticipant
from bots.queries import bot_usable_in, participants_of, session_seat

# ``@`` at the start or after a non-word character, then a slug or a name. Names may hold
# spaces, so a mention is matched against the participants' own names and slugs rather than
# parsed into a word first.
_MENTION_START = re.compile(r"(?<![\w@])@")


def mentioned_bots(text: str, participants: list[SessionParticipant]) -> list[Bot]:
    """The participants ``text`` mentions, in the order they are first mentioned. ``@<slug>``
    or ``@<name>``, case-folded; the longest name wins where one is a prefix of another
    (``@Ann Lee`` is Ann Lee, not Ann), and a mention must end at a word boundary."""
    folded = text.casefold()
    keys: list[tuple[str, Bot]] = []
    for participant in participants:
        bot = participant.bot
        for key in {bot.slug.casefold(), bot.name.casefold().strip()}:
            if key:
                keys.append((key, bot))
    keys.sort(key=lambda pair: -len(pair[0]))
    found: list[Bot] = []
    for match in _MENTION_START.finditer(folded):
        start = match.end()
        for key, bot in keys:
            end = start + len(key)
            if folded.startswith(key, start) and (
                end == len(folded) or not (folded[end].isalnum() or folded[end] in "-_")
            ):
                if all(b.pk != bot.pk for b in found):
                    found.append(bot)
                break
    return found


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
    """What a finished bot reply leads to: the bots it hands the floor to, and the notices of
    the bounds that stopped others."""

    bots: list[Bot]
    notices: list[str]


def handovers(
    *,
    reply: Message,
    speaker: Bot,
    participants: list[SessionParticipant],
    answered_bot_ids: set[int],
    waiting_bot_ids: set[int],
    hops_so_far: int,
) -> Handover:
    """The floor after ``speaker``'s reply: each participant it mentions answers next, unless
    it is the speaker itself, already answered this user message (a cycle), or the chain has
    used its ``ROOM_MAX_HOPS`` bot-triggered replies. A mentioned bot still waiting to answer
    (queued by the user's message) answers anyway: nothing to add, nothing to say."""
    limit = settings.ROOM_MAX_HOPS
    bots: list[Bot] = []
    notices: list[str] = []
    hops = hops_so_far
    for bot in mentioned_bots(reply.content, participants):
        if bot.pk == speaker.pk:
            notices.append(f"{speaker.name} mentioned itself; a bot does not answer itself.")
        elif bot.pk in waiting_bot_ids:
            continue
        elif bot.pk in answered_bot_ids:
            notices.append(
                f"{speaker.name} handed the floor back to {bot.name}, who already answered "
                "this message; the chain stops here to avoid a loop."
            )
        elif hops >= limit:
            notices.append(
                f"{speaker.name} mentioned {bot.name}, but this message already led to "
                f"{limit} bot-to-bot replies (the room's limit); {bot.name} does not answer."
            )
        else:
            bots.append(bot)
            answered_bot_ids.add(bot.pk)
            hops += 1
    return Handover(bots=bots, notices=notices)


def compact_seat(session: ChatSession, focus: str) -> tuple[ChatSession | None, str]:
    """``/compact @slug rest``: the seat of the participant the leading mention names (slug or
    name, as mentions are matched), and the rest as the focus; None if it names nobody here."""
    participants = [
        p for p in participants_of(session=session) if bot_usable_in(session=session, bot=p.bot)
    ]
    folded = focus.casefold()
    for participant in sorted(participants, key=lambda p: -len(p.bot.name)):
        bot = participant.bot
        for key in (bot.slug.casefold(), bot.name.casefold().strip()):
            end = 1 + len(key)
            if key and folded.startswith(key, 1) and (len(folded) == end or folded[end].isspace()):
                return session_seat(session, bot), focus[end:].strip()
    return None, focus
