"""Measure: what the next model call would carry, in stored token counts — no message text.

The compaction engine needs this to decide and to size its passes; the context pipeline needs it
before admission. Both depend on this module, and neither on the other's internals, so the
engine and the pipeline no longer import each other (``compaction.engine -> measure``,
``compaction.pipeline -> engine, measure``; import-linter holds it).

Pressure comes from the session's running totals, so neither time nor memory grows with the
length of the conversation; the history itself is read by the pipeline, only as far as
admission pulls (``compaction.pipeline.history``). A seat's view (a room as one bot sees it) is
``compaction.seats``.
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

from django.conf import settings
from django.db.models import (
    IntegerField,
    Q,
    QuerySet,
    TextField,
    Value,
)
from django.db.models.functions import Cast, Coalesce

from bots.models import Bot, ChatSession, Message
from chat_platform.compiled import CompiledValues
from chat_platform.llm import gateway
from chat_platform.llm.recall_protocol import INDEX_HEADER, INDEX_HELP
from chat_platform.llm.tokens import count_message_tokens
from compaction.admission import Entry, HistoryTotals, PinnedEntry
from compaction.budget import Budget, budget_compute
from compaction.models import ContextExpansion, SeatState, Summary
from compaction.seats import (
    RoomView,
    Seat,
    room_view,
    seat_covered,
    seat_covering,
    seat_summaries,
)
from memory.queries import IndexLine, memory_index_lines
from memory.services import snapshot_name


@dataclass(frozen=True)
class Measure:
    """Everything the next call would carry, in stored token counts (no text)."""

    session: ChatSession
    budget: Budget
    before_seq: int  # history is the eligible messages with seq < before_seq
    system_tokens: int
    new_message: Entry | None
    pinned: list[PinnedEntry]
    summaries: list[Entry]
    index_lines: list[IndexLine]  # newest first; admission drops from the end
    index_block_tokens: int  # the index block's header and message overhead
    history_totals: HistoryTotals  # unpinned history, excluding the new message and recalled
    # Whose coverage the history is read against: the bot whose reply is built (``Seat``).
    seat: Seat
    # This turn's recall exchange (the model's requests and what it got back): sent whole.
    recalled: list[Entry] = field(default_factory=list)
    # A room, as this bot sees it; None in a one-bot session.
    room: RoomView | None = None
    # "Use the full text next turn" (docs/context-records.md): compacted messages this call carries
    # verbatim, whole like pins, instead of the summaries inside their span (left out of
    # ``summaries``); the span's record name, for the context record. Empty on other calls.
    expanded: list[PinnedEntry] = field(default_factory=list)
    expanded_record: str = ""
    # The seat's pending expansion as stored (first_seq, last_seq, claiming reply id or 0),
    # applied or not: the pipeline claims or drops it. Another bot's in a room is never here.
    expansion: tuple[int, int, int] | None = None
    # What goes with the call outside every part (the platform's memory tool schemas while
    # recall is offered to a bot without MCP tools): never in the pressure or the thresholds,
    # but admission leaves room for it, so no request exceeds B (``admission_decide``).
    reserve_tokens: int = 0

    @property
    def index_line_tokens(self) -> list[int]:
        return [line.tokens for line in self.index_lines]

    @property
    def parts(self) -> dict[str, int]:
        index = sum(self.index_line_tokens)
        return {
            "system": self.system_tokens,
            "pinned": sum(p.tokens for p in self.pinned),
            "summaries": sum(s.tokens for s in self.summaries),
            "memory_index": index + (self.index_block_tokens if self.index_lines else 0),
            "history": self.history_totals.tokens
            + (self.new_message.tokens if self.new_message else 0)
            + sum(r.tokens for r in self.recalled)
            + sum(e.tokens for e in self.expanded),
        }

    @property
    def fixed_tokens(self) -> int:
        """What is sent whatever happens: system, new message, recalled, pins, summaries."""
        parts = self.parts
        return (
            parts["system"]
            + parts["pinned"]
            + parts["summaries"]
            + (self.new_message.tokens if self.new_message else 0)
            + sum(r.tokens for r in self.recalled)
            + sum(e.tokens for e in self.expanded)
        )

    @property
    def pressure(self) -> int:
        """Tokens of everything the next call would send, with nothing dropped
        (docs/compaction.md)."""
        return sum(self.parts.values())


@lru_cache(maxsize=256)
def _system_tokens(prompt: str, model: str) -> int:
    return count_message_tokens(prompt, model=model) if prompt else 0


def system_part_tokens(text: str, *, model: str) -> int:
    """What one system part (the prompt, the chat's instruction, a room's header, an API
    client's system part) costs as sent: the same cached count the measure sums."""
    return _system_tokens(text, model)


def bot_budget(bot: Bot, *, model: str | None = None) -> Budget:
    """docs/compaction.md: W from the bot, else litellm's model info, else the absolute cap.

    ``model``: another of the bot's ``chat_models`` (a chat's override). Its own window counts:
    litellm's ``max_input_tokens`` for it, else the bot's context_window, else the cap (the
    bot's context_window describes the bot's own model)."""
    if model and model != bot.model:
        model_max = gateway.model_max_input_tokens(model)
        window = 0 if model_max else bot.context_window
    else:
        window = bot.context_window
        model_max = None if window else gateway.model_max_input_tokens(bot.model)
    return budget_compute(
        context_window=window,
        model_max_input_tokens=model_max,
        max_output_tokens=bot.max_output_tokens,
        compaction_threshold=bot.compaction_threshold,
        compaction_kept_percent=bot.compaction_kept_percent,
        absolute_cap=settings.CONTEXT_ABSOLUTE_CAP_TOKENS,
    )


def session_budget(session: ChatSession) -> Budget:
    """The budget of ``session``'s chat model (its per-chat override, else the bot's)."""
    return bot_budget(session.bot, model=session.chat_model)


_PINNED, _SUMMARY, _EXPANSION, _SEAT = 0, 1, 2, 3


def _pins_and_summaries_query(
    *,
    session_id: int,
    before_seq: int,
    exclude_id: int,
    seat_bot_id: int,
    bot_id: int | None = None,
) -> QuerySet:
    """The pinned messages, the seat's active summaries, the seat's pending expansion and its
    row (``SeatState``: what its summaries cover, its covered floor). ``seat_bot_id`` is the bot
    whose reply the seat builds (the session's bot in a one-bot session); ``bot_id`` keys a room
    seat's summaries (``seat_key``), None in a one-bot session. Every row has a fifth column,
    the seat row's uncovered ids as JSON text ("" in the others)."""
    part = IntegerField()
    none = Value("", output_field=TextField())
    pinned = (
        Message.objects.filter(
            Message.in_context_q(), session_id=session_id, seq__lt=before_seq, pinned=True
        )
        .exclude(pk=exclude_id)
        # A message this seat's summary covers is in the summary, not a pin as well.
        .exclude(seat_covered(seat_bot_id))
        .annotate(part=Value(_PINNED, output_field=part), listed=none)
        .order_by()
        .values_list("part", "pk", "seq", "token_count", "listed")
    )
    summaries = (
        seat_summaries(session_id, bot_id)
        .filter(status=Summary.Status.ACTIVE)
        .annotate(part=Value(_SUMMARY, output_field=part), listed=none)
        .order_by()
        .values_list("part", "pk", "first_seq", "token_count", "listed")
    )
    # The seat's pending expansion, if any (at most one row per (session, bot)): (2, claiming
    # reply or 0, first, last). An expansion is for one seat's next reply (docs/context-records.md):
    # another bot's in the same room is never read here.
    expansion = (
        ContextExpansion.objects.filter(session_id=session_id, bot_id=seat_bot_id)
        .annotate(
            part=Value(_EXPANSION, output_field=part),
            claimed=Coalesce("reply_id", 0, output_field=part),
            listed=none,
        )
        .order_by()
        .values_list("part", "claimed", "first_seq", "last_seq", "listed")
    )
    # The seat's row: (3, covered tokens, covered messages, covered floor, uncovered ids).
    seat = (
        SeatState.objects.filter(session_id=session_id, bot_id=seat_bot_id)
        .annotate(
            part=Value(_SEAT, output_field=part),
            listed=Cast("uncovered_ids", output_field=TextField()),
        )
        .order_by()
        .values_list("part", "covered_tokens", "covered_messages", "covered_through_seq", "listed")
    )
    return pinned.union(summaries, expansion, seat, all=True).order_by("part", "seq")


# One compiled statement per shape: bind names key it, so a room's (with ``bot_id``) and a
# one-bot session's (without) compile separately.
_PINS_AND_SUMMARIES = CompiledValues(_pins_and_summaries_query)


@dataclass(frozen=True)
class _Parts:
    pins: list[PinnedEntry]
    summaries: list[Entry]
    expansion: tuple[int, int, int] | None
    seat: Seat


def _pins_and_summaries(
    session: ChatSession, before_seq: int, *, exclude_id: int | None, room: RoomView | None = None
) -> _Parts:
    """The pinned messages before ``before_seq`` and the active summaries, each in seq order,
    the pending expansion and the seat, in one query (a UNION ALL, compiled once): all are read
    before every model call and every send."""
    pins: list[PinnedEntry] = []
    active: list[Entry] = []
    expansion: tuple[int, int, int] | None = None
    seat = Seat(bot_id=session.bot_id)
    exclude = 0 if exclude_id is None else exclude_id  # no message has id 0
    rows = _PINS_AND_SUMMARIES.rows(
        session_id=session.pk,
        before_seq=before_seq,
        exclude_id=exclude,
        seat_bot_id=session.bot_id,
        **({} if room is None else {"bot_id": room.bot_id}),
    )
    for kind, pk, seq, tokens, listed in rows:
        if kind == _SEAT:
            seat = Seat(
                bot_id=session.bot_id,
                covered_tokens=pk,
                covered_messages=seq,
                covered_through_seq=tokens,
                uncovered_ids=tuple(json.loads(listed or "[]")),
            )
            continue
        if kind == _EXPANSION:
            expansion = (seq, tokens, pk)  # (first_seq, last_seq, claiming reply or 0)
            continue
        if room is not None and seq < room.from_seq:
            continue  # before this bot joined the room, and it sees from its join
        if kind == _PINNED:
            if room is not None:
                tokens += room.max_prefix_tokens
            pins.append(PinnedEntry(id=pk, seq=seq, tokens=tokens))
        else:
            active.append(Entry(id=pk, tokens=tokens))
    return _Parts(pins, active, expansion, seat)


def expanded_span(
    session: ChatSession, first_seq: int, last_seq: int, seat: Seat, room: RoomView | None
) -> tuple[list[PinnedEntry], set[int]]:
    """The compacted messages of an expanded span a model may see (stored counts, no text),
    and the active summaries lying wholly inside it, which they replace on this call."""
    where = Q(
        session=session,
        seq__gte=first_seq,
        seq__lte=last_seq,
        kind__in=[Message.Kind.CHAT, Message.Kind.TOOL],
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
        token_count__gt=0,
    )
    # What this seat's own summaries cover (its coverage rows), as it was shown (in a room).
    if room is not None:
        where &= room.seen()
    rows = Message.objects.filter(where & seat.covered())
    rows = rows.annotate(covering=seat_covering(seat.bot_id))
    entries: list[PinnedEntry] = []
    covering: set[int] = set()
    for pk, seq, tokens, role, bot_id, summary_id in rows.order_by("seq").values_list(
        "pk", "seq", "token_count", "role", "bot_id", "covering"
    ):
        tokens = room.row_tokens(tokens, role, bot_id) if room is not None else tokens
        entries.append(PinnedEntry(id=pk, seq=seq, tokens=tokens))
        covering.add(summary_id)
    replaced = set(
        Summary.objects.filter(
            pk__in=covering,
            status=Summary.Status.ACTIVE,
            first_seq__gte=first_seq,
            last_seq__lte=last_seq,
        ).values_list("pk", flat=True)
    )
    return entries, replaced


def index_within_share(
    lines: list[IndexLine], *, budget: int, block_tokens: int
) -> list[IndexLine]:
    """The newest index lines that, with the block's fixed cost, take at most
    ``MEMORY_INDEX_MAX_PERCENT`` of the budget B — and always the newest one, so a model knows
    memory is there. Search reaches every record the index leaves out, so the index need not
    crowd out history (in a tight bot it took 18 % of B while history had 638 tokens)."""
    share = budget * settings.MEMORY_INDEX_MAX_PERCENT // 100
    used = block_tokens
    kept = []
    for line in lines:
        used += line.tokens
        if kept and used > share:
            break
        kept.append(line)
    return kept


def index_block_tokens(model: str) -> int:
    return _system_tokens(f"{INDEX_HEADER}\n{INDEX_HELP}\n", model)


def context_measure(
    *,
    session: ChatSession,
    new_message: Message | None = None,
    before_seq: int | None = None,
    recalled: Sequence[Message] = (),
    with_index: bool = True,
    extra_system: str = "",
    tools_tokens: int = 0,
    expand_for: int | None = None,
    reserve_tokens: int = 0,
) -> Measure:
    """Stored token counts of every part of the next call (``reserve_tokens``: see
    ``Measure``). Bounded queries, no message text. ``with_index=False`` leaves the memory
    index out (one query fewer): enough to tell whether the fixed part fits
    (``context_fixed_fits``; the index, shortened first, never decides).

    ``extra_system``: a system part of this call only (an API client's own system message),
    counted with the bot's system prompt (the fixed part).

    ``expand_for``: the reply this call produces. A pending expansion not yet claimed by
    another reply is applied: its span's compacted messages counted whole (``expanded``), the
    summaries inside it left out; others see it only as stored (``Measure.expansion``)."""
    bot = session.bot
    room = room_view(session)
    if before_seq is None:
        before_seq = new_message.seq + 1 if new_message else session.last_seq + 1
    new_entry = _new_entry(new_message, room)
    recalled_entries = [Entry(id=m.pk, tokens=m.token_count) for m in recalled]
    parts = _pins_and_summaries(
        session, before_seq, exclude_id=new_entry.id if new_entry else None, room=room
    )
    pinned, summaries, expansion, seat = parts.pins, parts.summaries, parts.expansion, parts.seat
    expanded: list[PinnedEntry] = []
    expanded_record = ""
    if expansion is not None and expand_for is not None and expansion[2] in (0, expand_for):
        expanded, replaced = expanded_span(session, expansion[0], expansion[1], seat, room)
        summaries = [s for s in summaries if s.id not in replaced]
        expanded_record = snapshot_name(
            expansion[0], expansion[1], room.bot_id if room is not None else None
        )
    totals = _history_totals(session, seat, room, pinned, new_entry, recalled_entries)
    model = session.chat_model
    budget = session_budget(session)
    block_tokens = index_block_tokens(model)
    return Measure(
        session=session,
        budget=budget,
        before_seq=before_seq,
        system_tokens=_system_part_tokens(
            session, room, extra_system=extra_system, tools_tokens=tools_tokens
        ),
        new_message=new_entry,
        pinned=pinned,
        summaries=summaries,
        # memory_index_size = 0 disables the index (and recall with it).
        index_lines=index_within_share(
            memory_index_lines(session=session, limit=bot.memory_index_size),
            budget=budget.budget,
            block_tokens=block_tokens,
        )
        if bot.memory_index_size and with_index
        else [],
        index_block_tokens=block_tokens,
        history_totals=totals,
        seat=seat,
        recalled=recalled_entries,
        room=room,
        expanded=expanded,
        expanded_record=expanded_record,
        expansion=expansion,
        reserve_tokens=reserve_tokens,
    )


def _new_entry(new_message: Message | None, room: RoomView | None) -> Entry | None:
    """The new message as sent (in a room, with its speaker's label)."""
    if new_message is None:
        return None
    tokens = new_message.token_count
    if room is not None:
        tokens = room.row_tokens(tokens, new_message.role, new_message.bot_id)
    return Entry(id=new_message.pk, tokens=tokens)


def _history_totals(
    session: ChatSession,
    seat: Seat,
    room: RoomView | None,
    pinned: list[PinnedEntry],
    new_entry: Entry | None,
    recalled_entries: list[Entry],
) -> HistoryTotals:
    """The unpinned history's count and tokens, from the session's running totals less what is
    sent whole (pins, the new message, the recalled exchange), what the seat's summaries cover
    and, in a room, what its bot never saw."""
    excluded_tokens = (
        sum(p.tokens for p in pinned)
        + (new_entry.tokens if new_entry else 0)
        + sum(r.tokens for r in recalled_entries)
    )
    excluded_count = len(pinned) + (1 if new_entry else 0) + len(recalled_entries)
    # The session's totals count every message in context; the seat's exclude what its
    # summaries cover and, in a room, what its bot never saw (before it joined; the others'
    # rounds).
    excluded_tokens += seat.covered_tokens
    excluded_count += seat.covered_messages
    if room is not None:
        excluded_tokens += room.hidden_tokens + room.others_rounds_tokens
        excluded_count += room.hidden_messages + room.others_rounds_messages
    # Messages written after before_seq (a later send racing this turn) are in the running totals
    # too; they are few and only make the estimate cautious, never the selection larger.
    count = max(0, session.context_messages - excluded_count)
    tokens = max(0, session.context_tokens - excluded_tokens)
    if room is not None:
        # Speakers' labels are sent but not stored: count each as the longest (cautious, as
        # for pins), so a room's pressure never reads lower than what admission will send.
        tokens += count * room.max_prefix_tokens
    return HistoryTotals(count=count, tokens=tokens)


def _system_part_tokens(
    session: ChatSession, room: RoomView | None, *, extra_system: str, tools_tokens: int
) -> int:
    """The chat's own instruction (sent after the bot's prompt), an API client's system part
    and a room's header are all part of the system part."""
    model = session.chat_model
    return (
        _system_tokens(session.bot.system_prompt, model)
        + _system_tokens(session.extra_instruction, model)
        + _system_tokens(extra_system, model)
        # The call's tool schemas (recall tools while recall is open, an API client's): they go
        # with the call, so they count like a prompt
        + tools_tokens
        + (_system_tokens(room.header, model) if room is not None else 0)
    )
