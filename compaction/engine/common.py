"""What the engine's passes share: limits, the plan of a pass, the session re-read from its seat
and the current turn (which no pass takes)."""

from dataclasses import dataclass, field

from django.db.models import QuerySet, Subquery

from bots.models import ChatSession, Message
from bots.queries import (
    participant_seat,
    room_snapshot_carry,
    session_seat,
    session_with_bot,
)
from chat_platform.compiled import CompiledValues
from chat_platform.errors import NotFound, ValidationFailed
from compaction.measure import Measure

# Automatic paths never summarise fewer tokens than this (tiny spans make longer summaries).
MIN_SPAN_TOKENS = 256
# Frontier fusion once >= 2 active summaries together exceed this share of the budget.
FUSION_SHARE_PERCENT = 20
RANGE_PAGE_SIZE = 500
EVERYTHING = 10**12
# /compact takes everything in as many passes as the summariser's window needs, up to this.
MANUAL_MAX_PASSES = 20
# Before a session's first summary, expect summaries at a quarter of their source.
DEFAULT_SUMMARY_RATIO = 0.25
# Fusion re-reads raw snapshots only while its input stays within this share of the summaries it
# fuses: a short snapshot (a small range) comes back in, but the summariser never re-reads the
# history it already compacted. At 200 % fusion re-read 184k tokens for 104k fused over the
# 1,000-turn economy bench (1.33 summariser tokens per compacted token); the goal is <= 1.15.
FUSION_INPUT_PERCENT = 125


@dataclass
class Plan:
    trigger: str
    target: int
    focus: str = ""
    model: str | None = None
    min_tokens: int = MIN_SPAN_TOKENS
    # A pass inside a reply (docs/tools.md, "Compaction inside a reply"): the (first, last) seqs
    # of the reply's earlier tool rounds, which it may take besides the history before the
    # current turn. None: never the current turn.
    within: tuple[int, int] | None = None
    # ``/compact`` typed in chat (docs/compaction.md "/compact"): a pass whose summary would not
    # leave the context smaller keeps nothing and says so. Automatic passes never ask: in a small
    # window the snapshot's index line can outweigh what a pass saves, and they must still run.
    must_lower: bool = False
    # The session's measure its caller took under the lease just before the pass (a hard
    # compaction before a model call, a soft one after a turn): the pass starts from it instead
    # of measuring again, one measure fewer a pass (a pass every ~2 steps of a long tool task,
    # docs/performance.md). None: the pass measures. Only for a plan made for one attempt,
    # right after its measure: nothing may have changed the context in between.
    measured: Measure | None = field(default=None, compare=False, repr=False)
    # The spans of undone summaries still held, as the caller knows them under the lease: ()
    # after a hard compaction released them all (``holds_release_at_hard``), so the fusion
    # check and the range need not read them again. None: they read them.
    held: tuple[tuple[int, int], ...] | None = field(default=None, compare=False, repr=False)


class Conflict(Exception):
    pass


class SessionGone(NotFound):
    """The chat was deleted while a compaction of it ran: the run ends with nothing written (no
    event can name a session that is gone). ``/compact`` answers ``not_found``; a soft run or a
    turn's hard compaction ends quietly."""

    default_message = "This chat was deleted."


def session_exists(session_id: int) -> bool:
    return ChatSession.objects.filter(pk=session_id).exists()


def session_fresh(session: ChatSession) -> ChatSession:
    """The session re-read (its totals move as compaction works), from the same seat: in a
    room, a compaction runs as the bot whose seat it is (``bots.queries.session_seat``), with
    the room's participants and user name as the run first read them
    (``bots.queries.room_snapshot_carry``: not once more per measure)."""
    fresh = session_with_bot(session.pk)  # compiled once per process
    if fresh is None:
        raise SessionGone()
    return session_seat(room_snapshot_carry(source=session, target=fresh), session.bot)


def _current_turn_query(session_id: int) -> QuerySet:
    unfinished = (
        Message.objects.filter(
            session_id=session_id,
            role=Message.Role.ASSISTANT,
            status__in=[Message.Status.PENDING, Message.Status.STREAMING],
            reply_to__isnull=False,
        )
        .order_by("seq")
        .values("reply_to__seq")[:1]
    )
    return (
        Message.objects.filter(
            session_id=session_id, role=Message.Role.USER, kind=Message.Kind.CHAT
        )
        .order_by("-seq")
        .annotate(running_from=Subquery(unfinished))
        .values_list("seq", "running_from")[:1]
    )


# Every pass asks: compiled once per process (docs/performance.md, "The tool task, eighth pass").
_CURRENT_TURN = CompiledValues(_current_turn_query, name="current_turn_seq")


def current_turn_seq(session: ChatSession) -> int | None:
    """Where the current turn begins: it and what follows are never taken. The newest user
    message opens it — or, while an earlier reply still runs or waits (a `/compact` sent during
    a reply, a message queued behind one), the message that reply answers: taking that question
    and not its reply would send a reply with no question before it. One statement."""
    rows = _CURRENT_TURN.rows(session_id=session.pk)
    if not rows:
        return None
    newest, running_from = rows[0]
    return newest if running_from is None else min(newest, running_from)


def summary_seat(session: ChatSession, bot_id: int | None) -> ChatSession:
    """The session from the seat of the bot that wrote a summary (or a snapshot): undo,
    re-summarise and expand act on that bot's own context only (docs/rooms.md, §17). A one-bot
    session is itself, as it always was."""
    fresh = ChatSession.objects.select_related("bot", "user").get(pk=session.pk)
    if not fresh.is_room or bot_id is None or bot_id == fresh.bot_id:
        if fresh.is_room and bot_id is None:
            raise ValidationFailed(
                "The bot whose seat this compaction belongs to is gone: it cannot be changed.",
                details={"bot": ["No bot."]},
            )
        return fresh
    seat = participant_seat(session=fresh, bot_id=bot_id)
    if seat is None:
        raise ValidationFailed(
            "The bot whose seat this compaction belongs to is not in the chat.",
            details={"bot": [f"Bot {bot_id} is not a participant."]},
        )
    return session_seat(fresh, seat.bot)
