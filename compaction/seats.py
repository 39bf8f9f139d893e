"""A seat: whose compaction state a session is (docs/rooms.md). In a room, one bot's view of
it — who speaks, what it is shown (``RoomView``); what a seat's own summaries cover, in a room or
a one-bot chat alike (``Seat``); the messages a seat's model may see (``in_context_before``);
the keys and summaries of a seat. A one-bot session is its bot's seat with no room: its
summaries, lease and cool-down are keyed by the session alone, exactly as before rooms."""

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q, QuerySet, Subquery, Sum

from bots.models import ChatSession, Message
from bots.queries import participants_of, room_user_name
from chat_platform.llm.tokens import count_tokens
from compaction.models import SeatState, Summary, SummaryCoverage


@dataclass(frozen=True)
class Seat:
    """Whose coverage a context is built against (docs/rooms.md): the bot whose reply is built —
    the chat's bot in a one-bot chat, the seat's bot in a room — and its seat's row
    (``SeatState``): what its own summaries cover (``SummaryCoverage``, one store for every
    chat) and its covered floor. Read with the pins and summaries, one statement
    (``compaction.measure``); a seat no summary covered yet has no row and covers nothing."""

    bot_id: int
    # The session's running totals count every message in context; the seat's history is those
    # less what its summaries cover.
    covered_tokens: int = 0
    covered_messages: int = 0
    # The seat's covered floor (``SeatState.covered_through_seq``, 0: none): everything it sees
    # up to there is covered, but for ``uncovered_ids``.
    covered_through_seq: int = 0
    uncovered_ids: tuple[int, ...] = ()

    def covered(self) -> Exists:
        """The message is covered by one of this bot's own summaries."""
        return seat_covered(self.bot_id)

    def past_floor(self) -> Q:
        """The messages that may be uncovered: after the covered floor, or listed below it. A
        bounded read: the session's in-context index and the listed ids, however long the
        covered history behind the floor (docs/rooms.md "A seat's bounded read")."""
        if not self.covered_through_seq:
            return Q()
        past = Q(seq__gt=self.covered_through_seq)
        return past | Q(pk__in=self.uncovered_ids) if self.uncovered_ids else past

    def where(self) -> Q:
        """The in-context messages this seat's own summaries do not cover."""
        return self.past_floor() & ~self.covered()


@dataclass(frozen=True)
class RoomView:
    """A room as one participant sees it (docs/rooms.md): its own turns are ``assistant``, every
    other speaker's arrive as ``user`` messages carrying the speaker (``name`` and a ``Name: ``
    prefix); other bots' recall exchanges are never shown; with ``sees_from_join`` nothing
    before it joined is. ``prefix_tokens``: what the speaker's label adds to a message, so
    admission counts what is really sent. What its summaries cover is its ``Seat``'s, as in
    any chat."""

    bot_id: int
    from_seq: int  # history, pins and summaries start at this seq (1: everything)
    header: str  # who is present: a short system block after the bot's prompt
    speakers: dict[int | None, tuple[str, str]]  # bot id (None: the user) -> (slug, name)
    prefix_tokens: dict[int | None, int]
    # What this bot never sees (before it joined, ``SeatState.hidden_*``): the session's totals
    # less these and its seat's coverage are its history.
    hidden_tokens: int = 0
    hidden_messages: int = 0
    # The rest of the seat's row, read with its totals (one statement): what the context report
    # and the soft trigger ask of it after a turn (``compaction.pipeline.report.context_state``).
    last_admission: Any = None
    backoff_until: Any = None  # datetime | None
    cooldown_until: Any = None  # datetime | None
    # The other bots' recall and tool rounds since ``from_seq``: in the room's totals, never
    # shown to this bot (``seen``), so never part of its history or pressure.
    others_rounds_tokens: int = 0
    others_rounds_messages: int = 0

    def seen(self) -> Q:
        """The room's messages this bot is shown: from its join (if it sees from there), and no
        other bot's recall exchange."""
        return seat_seen(self.bot_id, self.from_seq)

    def row_tokens(self, tokens: int, role: str, bot_id: int | None) -> int:
        if role == Message.Role.ASSISTANT and bot_id == self.bot_id:
            return tokens
        return tokens + self.prefix_tokens.get(None if role == Message.Role.USER else bot_id, 0)

    @property
    def max_prefix_tokens(self) -> int:
        return max(self.prefix_tokens.values(), default=0)


def seat_first_seq(joined_seq: int, sees_from_join: bool) -> int:
    """The first seq a room's bot is shown (``RoomView.from_seq``)."""
    return joined_seq + 1 if sees_from_join else 1


def seat_seen(bot_id: int, from_seq: int) -> Q:
    """What a room's bot is shown (``RoomView.seen``)."""
    seen = Q(seq__gte=from_seq) if from_seq > 1 else Q()
    return seen & (~Q(kind=Message.Kind.TOOL) | Q(bot_id=bot_id))


def seat_covered(bot_id: int) -> Exists:
    """The message is covered by one of the bot's own summaries (``Seat.covered``)."""
    return Exists(SummaryCoverage.objects.filter(bot_id=bot_id, message_id=OuterRef("pk")))


def seat_covering(bot_id: int) -> Subquery:
    """The id of the bot's own summary that covers the message (None: none): one at most, by
    the unique (bot, message) pair."""
    mine = SummaryCoverage.objects.filter(bot_id=bot_id, message_id=OuterRef("pk"))
    return Subquery(mine.values("summary_id")[:1])


_HEADER_TAIL = "Messages from the others start with the speaker's name."
# The header as ``room_view`` writes it, whole or cut after its first sentence (a line quoting
# it): a reply that repeats it names every participant, and that hands nobody the floor
# (``turns.room``, docs/rooms.md "Who answers").
ROOM_HEADER_ECHO = re.compile(
    # A name never runs over another "You are ": each start reads only to the next one, so a
    # line of a thousand of them is one pass, not a pass each (turns/room.py runs it on every
    # room message, up to 1 MB).
    rf"You are (?:(?!You are )[^\n])*? in a group chat with [^\n]*?"
    rf"(?:{re.escape(_HEADER_TAIL)}|$)",
    re.MULTILINE,
)


def room_view(session: ChatSession) -> RoomView | None:
    """The room from the session's bot's seat (``bots.queries.session_seat``); None for a
    one-bot session (no query)."""
    if not session.is_room:
        return None
    participants = participants_of(session=session, include_removed=True)
    bot = session.bot
    seat = next((p for p in participants if p.bot_id == bot.pk), None)
    from_seq = seat_first_seq(seat.joined_seq, seat.sees_from_join) if seat is not None else 1
    user_name = room_user_name(session)
    speakers: dict[int | None, tuple[str, str]] = {None: (_name_slug(user_name), user_name)}
    for participant in participants:
        speakers[participant.bot_id] = (participant.bot.slug or "bot", participant.bot.name)
    present = [p.bot for p in participants if p.removed_at is None and p.bot_id != bot.pk]
    others = ", ".join(f"{b.name} (@{b.slug})" for b in present) or "nobody else"
    header = (
        f"You are {bot.name} (@{bot.slug}) in a group chat with {user_name} and {others}. "
        f"{_HEADER_TAIL}"
    )
    prefix = {
        key: count_tokens(f"{name}: ", model=bot.model) + count_tokens(slug, model=bot.model) + 1
        for key, (slug, name) in speakers.items()
    }
    # The other bots' rounds, read with the seat's row (one statement; a seat with no row yet,
    # before its first turn, reads them alone).
    rounds = (
        Message.objects.filter(
            Message.in_context_q(),
            session_id=session.pk,
            kind=Message.Kind.TOOL,
            seq__gte=from_seq,
        )
        .exclude(bot_id=bot.pk)
        .order_by()
        .values("session_id")
    )
    totals = (
        SeatState.objects.filter(session_id=session.pk, bot_id=bot.pk)
        .annotate(
            rounds_tokens=Subquery(rounds.annotate(n=Sum("token_count")).values("n")),
            rounds_messages=Subquery(rounds.annotate(n=Count("id")).values("n")),
        )
        .values_list(
            "hidden_tokens",
            "hidden_messages",
            "last_admission",
            "backoff_until",
            "cooldown_until",
            "rounds_tokens",
            "rounds_messages",
        )
        .first()
    )
    if totals is None:
        alone = rounds.aggregate(tokens=Sum("token_count"), messages=Count("id"))
        totals = (0, 0, None, None, None, alone["tokens"], alone["messages"])
    return RoomView(
        bot_id=bot.pk,
        from_seq=from_seq,
        header=header,
        speakers=speakers,
        prefix_tokens=prefix,
        hidden_tokens=totals[0] if from_seq > 1 else 0,
        hidden_messages=totals[1] if from_seq > 1 else 0,
        last_admission=totals[2],
        backoff_until=totals[3],
        cooldown_until=totals[4],
        others_rounds_tokens=totals[5] or 0,
        others_rounds_messages=totals[6] or 0,
    )


def seat_read(session: ChatSession) -> Seat:
    """The seat of ``session``'s bot as its row stands (the measure reads it with the pins and
    summaries instead, ``compaction.measure``). One statement."""
    row = (
        SeatState.objects.filter(session_id=session.pk, bot_id=session.bot_id)
        .values_list("covered_tokens", "covered_messages", "covered_through_seq", "uncovered_ids")
        .first()
    )
    if row is None:
        return Seat(bot_id=session.bot_id)
    return Seat(session.bot_id, row[0], row[1], row[2], tuple(row[3] or ()))


def seat_key(session: ChatSession) -> int | None:
    """What compaction state is keyed by besides the session (docs/rooms.md): in a room, the bot
    whose seat ``session`` is (``bots.queries.session_seat``); None in a one-bot session, whose
    summaries, lease and cool-down are the session's, exactly as before rooms."""
    return session.bot_id if session.is_room else None


def seat_filter(session: ChatSession) -> dict[str, int]:
    """The filter that keys a seat's compaction rows (summaries, events) besides the session:
    ``{"bot_id": ...}`` in a room, nothing in a one-bot session (``seat_key``)."""
    key = seat_key(session)
    return {} if key is None else {"bot_id": key}


def seat_summaries(session: ChatSession | int, bot_id: int | None) -> QuerySet[Summary]:
    """The summaries of one seat: in a room (``bot_id`` = ``seat_key(session)``), that bot's
    own; in a one-bot session (None), all of the session's. Every reader of a seat's summaries
    (measure, holds, fusion) filters through here."""
    where: dict[str, Any] = {"session": session}
    if bot_id is not None:
        where["bot_id"] = bot_id
    return Summary.objects.filter(**where)


def _name_slug(name: str) -> str:
    """An OpenAI ``name`` (``[a-zA-Z0-9_-]{1,64}``) for a speaker."""
    return re.sub(r"[^a-zA-Z0-9_-]+", "-", name).strip("-")[:64] or "user"


def in_context_before(
    session: ChatSession | int, before_seq: int, seat: Seat, room: RoomView | None = None
) -> Q:
    """The messages a model may see (``Message.in_context_q``) of ``session`` before a seq that
    ``seat``'s summaries do not cover; in a room, those its bot is shown."""
    where = Message.in_context_q() & Q(session=session, seq__lt=before_seq) & seat.where()
    return where & room.seen() if room is not None else where


def in_context(
    session: ChatSession | int, before_seq: int, seat: Seat, room: RoomView | None = None
) -> QuerySet[Message]:
    return Message.objects.filter(in_context_before(session, before_seq, seat, room))
