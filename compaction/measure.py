"""Measure: what the next model call would carry, in stored token counts — no message text.

The compaction engine needs this to decide and to size its passes; the context pipeline needs it
before admission. Both depend on this module, and neither on the other's internals, so the
engine and the pipeline no longer import each other (``compaction.engine -> measure``,
``compaction.pipeline -> engine, measure``; import-linter holds it).

Pressure comes from the session's running totals, so neither time nor memory grows with the
length of the conversation; history is read newest first in bounded keyset pages of
(id, seq, token_count, role, tool ids) and only as far as admission pulls.
"""

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from django.conf import settings
from django.db.models import (
    Exists,
    F,
    IntegerField,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    TextField,
    Value,
)
from django.db.models.functions import Cast, Coalesce

from bots.models import Bot, ChatSession, Message
from bots.queries import participants_of, room_user_name
from chat_platform.compiled import CompiledValues
from chat_platform.llm import gateway
from chat_platform.llm.recall_protocol import INDEX_HEADER, INDEX_HELP
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.admission import Entry, HistoryRow, HistoryTotals, PinnedEntry
from compaction.budget import Budget, budget_compute
from compaction.models import ContextExpansion, SeatState, Summary, SummaryCoverage
from memory.queries import IndexLine, memory_index_lines
from memory.services import snapshot_name

# Rows per keyset page when walking history newest-first (ids and counts only, no text).
HISTORY_PAGE_SIZE = 500


@dataclass(frozen=True)
class RoomView:
    """A room as one participant sees it (docs/rooms.md): its own turns are ``assistant``, every
    other speaker's arrive as ``user`` messages carrying the speaker (``name`` and a ``Name: ``
    prefix); other bots' recall exchanges are never shown; with ``sees_from_join`` nothing
    before it joined is. ``prefix_tokens``: what the speaker's label adds to a message, so
    admission counts what is really sent."""

    bot_id: int
    from_seq: int  # history, pins and summaries start at this seq (1: everything)
    header: str  # who is present: a short system block after the bot's prompt
    speakers: dict[int | None, tuple[str, str]]  # bot id (None: the user) -> (slug, name)
    prefix_tokens: dict[int | None, int]
    # This bot's own running totals (``SeatState``): what its summaries cover, and what it never
    # sees (before it joined); the session's totals less these are its history.
    covered_tokens: int = 0
    covered_messages: int = 0
    hidden_tokens: int = 0
    hidden_messages: int = 0
    # The rest of the seat's row, read with its totals (one statement): what the context report
    # and the soft trigger ask of it after a turn (``compaction.pipeline.context_state``).
    last_admission: Any = None
    backoff_until: Any = None  # datetime | None
    cooldown_until: Any = None  # datetime | None

    def seen(self) -> Q:
        """The room's messages this bot is shown: from its join (if it sees from there), and no
        other bot's recall exchange."""
        seen = Q(seq__gte=self.from_seq) if self.from_seq > 1 else Q()
        return seen & (~Q(kind=Message.Kind.TOOL) | Q(bot_id=self.bot_id))

    def covered(self) -> Exists:
        """The message is covered by one of this bot's own summaries (``SummaryCoverage``)."""
        return Exists(SummaryCoverage.objects.filter(bot_id=self.bot_id, message_id=OuterRef("pk")))

    def where(self) -> Q:
        """The room's in-context messages this bot sees and its own summaries do not cover."""
        return self.seen() & ~self.covered()

    def row_tokens(self, tokens: int, role: str, bot_id: int | None) -> int:
        if role == Message.Role.ASSISTANT and bot_id == self.bot_id:
            return tokens
        return tokens + self.prefix_tokens.get(None if role == Message.Role.USER else bot_id, 0)

    @property
    def max_prefix_tokens(self) -> int:
        return max(self.prefix_tokens.values(), default=0)


def room_view(session: ChatSession) -> RoomView | None:
    """The room from the session's bot's seat (``bots.queries.session_seat``); None for a
    one-bot session (no query)."""
    if not session.is_room:
        return None
    participants = participants_of(session=session, include_removed=True)
    bot = session.bot
    seat = next((p for p in participants if p.bot_id == bot.pk), None)
    from_seq = seat.joined_seq + 1 if seat is not None and seat.sees_from_join else 1
    user_name = room_user_name(session)
    speakers: dict[int | None, tuple[str, str]] = {None: (_name_slug(user_name), user_name)}
    for participant in participants:
        speakers[participant.bot_id] = (participant.bot.slug or "bot", participant.bot.name)
    present = [p.bot for p in participants if p.removed_at is None and p.bot_id != bot.pk]
    others = ", ".join(f"{b.name} (@{b.slug})" for b in present) or "nobody else"
    header = (
        f"You are {bot.name} (@{bot.slug}) in a group chat with {user_name} and {others}. "
        "Messages from the others start with the speaker's name."
    )
    prefix = {
        key: count_tokens(f"{name}: ", model=bot.model) + count_tokens(slug, model=bot.model) + 1
        for key, (slug, name) in speakers.items()
    }
    totals = (
        SeatState.objects.filter(session_id=session.pk, bot_id=bot.pk)
        .values_list(
            "covered_tokens",
            "covered_messages",
            "hidden_tokens",
            "hidden_messages",
            "last_admission",
            "backoff_until",
            "cooldown_until",
        )
        .first()
    ) or (0, 0, 0, 0, None, None, None)
    return RoomView(
        bot_id=bot.pk,
        from_seq=from_seq,
        header=header,
        speakers=speakers,
        prefix_tokens=prefix,
        covered_tokens=totals[0],
        covered_messages=totals[1],
        hidden_tokens=totals[2] if from_seq > 1 else 0,
        hidden_messages=totals[3] if from_seq > 1 else 0,
        last_admission=totals[4],
        backoff_until=totals[5],
        cooldown_until=totals[6],
    )


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


def in_context_before(
    session: ChatSession | int, before_seq: int, room: RoomView | None = None
) -> Q:
    """The messages a model may see (``Message.in_context_q``) of ``session`` before a seq;
    in a room, those its bot may see."""
    where = Message.in_context_q() & Q(session=session, seq__lt=before_seq)
    return where & room.where() if room is not None else where


def _in_context(session: ChatSession | int, before_seq: int, room: RoomView | None = None):
    return Message.objects.filter(in_context_before(session, before_seq, room))


_PINNED, _SUMMARY, _EXPANSION = 0, 1, 2


def _pins_and_summaries_query(
    *,
    session_id: int,
    before_seq: int,
    exclude_id: int,
    seat_bot_id: int,
    bot_id: int | None = None,
) -> QuerySet:
    """The pinned messages, the seat's active summaries and the seat's pending expansion.
    ``seat_bot_id`` is the bot whose reply the seat builds (the session's bot in a one-bot
    session); ``bot_id`` keys a room seat's summaries (``seat_key``), None in a one-bot
    session."""
    part = IntegerField()
    pinned = (
        _in_context(session_id, before_seq)
        .filter(pinned=True)
        .exclude(pk=exclude_id)
        .annotate(part=Value(_PINNED, output_field=part))
        .order_by()
        .values_list("part", "pk", "seq", "token_count")
    )
    summaries = (
        seat_summaries(session_id, bot_id)
        .filter(status=Summary.Status.ACTIVE)
        .annotate(part=Value(_SUMMARY, output_field=part))
        .order_by()
        .values_list("part", "pk", "first_seq", "token_count")
    )
    # The seat's pending expansion, if any (at most one row per (session, bot)): (2, claiming
    # reply or 0, first, last). An expansion is for one seat's next reply (docs/context-records.md):
    # another bot's in the same room is never read here.
    expansion = (
        ContextExpansion.objects.filter(session_id=session_id, bot_id=seat_bot_id)
        .annotate(
            part=Value(_EXPANSION, output_field=part),
            claimed=Coalesce("reply_id", 0, output_field=part),
        )
        .order_by()
        .values_list("part", "claimed", "first_seq", "last_seq")
    )
    return pinned.union(summaries, expansion, all=True).order_by("part", "seq")


# One compiled statement per shape: bind names key it, so a room's (with ``bot_id``) and a
# one-bot session's (without) compile separately.
_PINS_AND_SUMMARIES = CompiledValues(_pins_and_summaries_query)


def _pins_and_summaries(
    session: ChatSession, before_seq: int, *, exclude_id: int | None, room: RoomView | None = None
) -> tuple[list[PinnedEntry], list[Entry], tuple[int, int, int] | None]:
    """The pinned messages before ``before_seq`` and the active summaries, each in seq order,
    in one query (a UNION ALL, compiled once): both are read before every model call and every
    send."""
    pins: list[PinnedEntry] = []
    active: list[Entry] = []
    expansion: tuple[int, int, int] | None = None
    exclude = 0 if exclude_id is None else exclude_id  # no message has id 0
    seat = {} if room is None else {"bot_id": room.bot_id}
    rows = _PINS_AND_SUMMARIES.rows(
        session_id=session.pk,
        before_seq=before_seq,
        exclude_id=exclude,
        seat_bot_id=session.bot_id,
        **seat,
    )
    for kind, pk, seq, tokens in rows:
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
    return pins, active, expansion


def expanded_span(
    session: ChatSession, first_seq: int, last_seq: int, room: RoomView | None
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
    if room is None:
        rows = Message.objects.filter(where, compacted_by_id__isnull=False)
        rows = rows.annotate(covering=F("compacted_by_id"))
    else:
        # In a room, what this bot's own summaries cover (its coverage rows), as it was shown.
        mine = SummaryCoverage.objects.filter(bot_id=room.bot_id, message_id=OuterRef("pk"))
        rows = Message.objects.filter(where & room.seen() & room.covered())
        rows = rows.annotate(covering=Subquery(mine.values("summary_id")[:1]))
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
) -> Measure:
    """Stored token counts of every part of the next call. Bounded queries, no message text.

    ``with_index=False`` leaves the memory index out (one query fewer): enough to tell whether
    the fixed part fits (``compaction.pipeline.context_fixed_fits``), which the index, shortened
    first, never decides.

    ``extra_system``: a system part of this call only (an API client's own system message),
    counted with the bot's system prompt: part of the fixed part, never history.

    ``expand_for``: the reply this call produces. A pending expansion not yet claimed by
    another reply is applied: its span's compacted messages are counted whole (``expanded``)
    and the summaries inside it left out. Other callers see the expansion only as stored
    (``Measure.expansion``)."""
    bot = session.bot
    room = room_view(session)
    if before_seq is None:
        before_seq = new_message.seq + 1 if new_message else session.last_seq + 1
    new_entry = (
        Entry(
            id=new_message.pk,
            tokens=room.row_tokens(new_message.token_count, new_message.role, new_message.bot_id)
            if room is not None
            else new_message.token_count,
        )
        if new_message
        else None
    )
    recalled_entries = [Entry(id=m.pk, tokens=m.token_count) for m in recalled]
    pinned, summaries, expansion = _pins_and_summaries(
        session, before_seq, exclude_id=new_entry.id if new_entry else None, room=room
    )
    expanded: list[PinnedEntry] = []
    expanded_record = ""
    if expansion is not None and expand_for is not None and expansion[2] in (0, expand_for):
        expanded, replaced = expanded_span(session, expansion[0], expansion[1], room)
        summaries = [s for s in summaries if s.id not in replaced]
        expanded_record = snapshot_name(
            expansion[0], expansion[1], room.bot_id if room is not None else None
        )
    excluded_tokens = (
        sum(p.tokens for p in pinned)
        + (new_entry.tokens if new_entry else 0)
        + sum(r.tokens for r in recalled_entries)
    )
    excluded_count = len(pinned) + (1 if new_entry else 0) + len(recalled_entries)
    if room is not None:
        # The room's totals count every message in context; this bot's own exclude what its
        # summaries cover and what it never saw.
        excluded_tokens += room.covered_tokens + room.hidden_tokens
        excluded_count += room.covered_messages + room.hidden_messages
    # Messages written after before_seq (a later send racing this turn) are in the running totals
    # too; they are few and only make the estimate cautious, never the selection larger.
    count = max(0, session.context_messages - excluded_count)
    tokens = max(0, session.context_tokens - excluded_tokens)
    if room is not None:
        # Speakers' labels are sent but not stored: count each as the longest (cautious, as
        # for pins), so a room's pressure never reads lower than what admission will send.
        tokens += count * room.max_prefix_tokens
    totals = HistoryTotals(count=count, tokens=tokens)
    model = session.chat_model
    budget = session_budget(session)
    block_tokens = index_block_tokens(model)
    return Measure(
        session=session,
        budget=budget,
        before_seq=before_seq,
        # The chat's own instruction (sent after the bot's prompt), an API client's system part
        # and a room's header are all part of the system part.
        system_tokens=_system_tokens(bot.system_prompt, model)
        + _system_tokens(session.extra_instruction, model)
        + _system_tokens(extra_system, model)
        # The call's tool schemas (recall tools while recall is open, an API client's): they go
        # with the call, so they count like a prompt
        + tools_tokens
        + (_system_tokens(room.header, model) if room is not None else 0),
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
        recalled=recalled_entries,
        room=room,
        expanded=expanded,
        expanded_record=expanded_record,
        expansion=expansion,
    )


def tool_calls_text() -> Cast:
    """``Message.tool_calls`` as its JSON text: nearly every row holds ``[]``, and decoding each
    through the field costs more than the rest of the row on a long history."""
    return Cast("tool_calls", output_field=TextField())


def tool_calls_load(text: str | None) -> list[dict]:
    if not text or text in ("[]", "null"):
        return []
    calls = json.loads(text)
    return calls if isinstance(calls, list) else []


def history_row(
    pk: int,
    seq: int,
    tokens: int,
    role: str,
    tool_call_id: str | None,
    calls: str | None,
    room: RoomView | None = None,
    bot_id: int | None = None,
) -> HistoryRow:
    """A history row for admission from the stored columns (``calls``: ``tool_calls_text``);
    in a room, with what its speaker's label adds."""
    return HistoryRow(
        id=pk,
        seq=seq,
        tokens=room.row_tokens(tokens, role, bot_id) if room is not None else tokens,
        role=role,
        tool_call_id=tool_call_id or None,
        tool_call_ids=tuple(c.get("id", "") for c in tool_calls_load(calls)),
    )


def history_newest_first(measure: Measure) -> Iterator[HistoryRow]:
    """Unpinned history as (ids, counts), newest first, in keyset pages; stops when not pulled."""
    room = measure.room
    rows = (
        _in_context(measure.session, measure.before_seq, room)
        .filter(pinned=False)
        .annotate(calls=tool_calls_text())
        .order_by("-seq")
        .values_list("pk", "seq", "token_count", "role", "tool_call_id", "calls", "bot_id")
    )
    cursor = measure.before_seq
    while True:
        page = list(rows.filter(seq__lt=cursor)[:HISTORY_PAGE_SIZE])
        for pk, seq, tokens, role, tool_call_id, calls, bot_id in page:
            yield history_row(pk, seq, tokens, role, tool_call_id, calls, room, bot_id)
        if len(page) < HISTORY_PAGE_SIZE:
            return
        cursor = page[-1][1]
