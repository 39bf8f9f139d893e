"""Which messages a pass compacts: the oldest uncompacted, unpinned history, read from stored
counts in keyset pages (``compaction.ranges.range_select`` decides), and how much of it a pass
should take."""

import math
from dataclasses import dataclass

from django.db.models import QuerySet

from bots.models import ChatSession, Message
from chat_platform.compiled import CompiledValues
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from compaction.engine.common import (
    DEFAULT_SUMMARY_RATIO,
    RANGE_PAGE_SIZE,
    Plan,
    current_turn_seq,
)
from compaction.engine.holds import held_spans
from compaction.engine.summariser import (
    INPUT_SHARE_PERCENT,
    compaction_model_config,
    request_tokens,
    summariser_window,
)
from compaction.engine.transcript import transcript_line
from compaction.measure import Measure
from compaction.models import CompactionEvent
from compaction.ranges import RangeRow, range_select
from compaction.seats import RoomView, Seat, seat_filter


def range_rows(
    session: ChatSession,
    *,
    before_seq: int | None,
    want_tokens: int,
    seat: Seat,
    room: RoomView | None = None,
    held: tuple[tuple[int, int], ...] | None = None,
) -> list[RangeRow]:
    """In-context rows the seat's summaries do not cover yet (``Seat.where``), oldest first, in
    keyset pages until enough are in hand; in a room, those its bot was shown.

    The spans of undone summaries that are still held are left out, as if not there: the scan
    goes on past them (a held span is not taken again until it is released). ``held``: those
    spans when the caller knows them (``Plan.held``); None: read here."""
    rows: list[RangeRow] = []
    queryset = Message.objects.filter(Message.in_context_q(), seat.where(), session=session)
    queryset = queryset.order_by("seq")
    if room is not None:
        queryset = queryset.filter(room.seen())
    for first, last in held_spans(session) if held is None else held:
        queryset = queryset.exclude(seq__gte=first, seq__lte=last)
    if before_seq is not None:
        queryset = queryset.filter(seq__lt=before_seq)
    queryset = queryset.values_list(
        "pk", "seq", "token_count", "role", "status", "pinned", "tool_call_id", "tool_calls"
    )
    cursor = 0
    taken = 0
    extra_pages = 1  # one page past the need, so a tool call at the cut can take its results
    while True:
        page = list(queryset.filter(seq__gt=cursor)[:RANGE_PAGE_SIZE])
        for pk, seq, tokens, role, status, pinned, tool_call_id, tool_calls in page:
            rows.append(
                RangeRow(
                    id=pk,
                    seq=seq,
                    tokens=tokens,
                    role=role,
                    status=status,
                    pinned=pinned,
                    tool_call_id=tool_call_id or None,
                    tool_call_ids=tuple(c.get("id", "") for c in tool_calls or ()),
                )
            )
            taken += tokens
        if len(page) < RANGE_PAGE_SIZE:
            return rows
        cursor = page[-1][1]
        if taken >= want_tokens:
            if extra_pages == 0:
                return rows
            extra_pages -= 1


def range_choose(
    session: ChatSession, plan: Plan, tokens_to_free: int, *, seat: Seat, room: RoomView | None
) -> tuple[list[RangeRow], str, int]:
    """The range (from stored counts), its transcript and what its request costs as sent
    (``request_tokens``: the pass charges it without counting it again), which fits in 85 % of
    the summariser's window: speaker labels cost more than the stored per-message overhead, so
    an over-long transcript shrinks the range by its overflow and is measured again.

    ``seat`` and ``room``: the seat and its view of a room, as the pass's measure read them
    (``room`` None in a one-bot session)."""
    config = compaction_model_config(session.bot, model=plan.model, chat_model=session.chat_model)
    limit = summariser_window(session.bot, config) * INPUT_SHARE_PERCENT // 100
    cap = max(0, limit - request_tokens("", plan.focus, config.model))
    current_turn = current_turn_seq(session)
    # Inside a reply the scan reaches the end of its earlier tool rounds: the current turn's
    # other rows (the user's message, the newest round) stay ineligible.
    within = plan.within
    rows = range_rows(
        session,
        before_seq=within[1] + 1 if within is not None else current_turn,
        want_tokens=min(tokens_to_free, cap),
        seat=seat,
        room=room,
        held=plan.held,
    )
    loaded: dict[int, Message] = {}
    for _ in range(8):
        selection = range_select(
            rows_oldest_first=rows,
            current_turn_seq=current_turn,
            open_span=within,
            tokens_to_free=tokens_to_free,
            min_tokens=plan.min_tokens,
            max_tokens=cap,
        )
        if not selection:
            return [], "", 0
        wanted = [row.id for row in selection if row.id not in loaded]
        loaded.update(
            (m.pk, m) for m in Message.objects.filter(pk__in=wanted).select_related("bot")
        )
        transcript = "\n".join(transcript_line(loaded[row.id], room) for row in selection)
        sent = request_tokens(transcript, plan.focus, config.model)
        if sent <= limit:
            return selection, transcript, sent
        if sum(row.tokens for row in selection) > cap:  # one unit over the cap (``range_select``)
            transcript = _cut_to_fit(transcript, limit=limit, focus=plan.focus, model=config.model)
            return selection, transcript, request_tokens(transcript, plan.focus, config.model)
        # Shrink in proportion to the overflow, 5 % beyond it: labels and time stamps can make
        # short messages cost several times their stored count, so subtracting the overflow
        # (tokens as sent) from a cap in stored tokens could leave nothing, or less than nothing.
        stored = sum(row.tokens for row in selection)
        cap = min(cap - 1, stored * limit * 19 // (sent * 20))
        if cap <= 0:
            return [], "", 0
    return [], "", 0


# What stands for the cut part of a message too long for the summariser's window.
CUT_MARK = (
    "\n[… the rest of this message, {tokens:,} tokens, is longer than the summariser can read; "
    "it stays whole in the chat's history, and search finds it]"
)


def _cut_to_fit(transcript: str, *, limit: int, focus: str, model: str) -> str:
    """The head of one unit's transcript that fits the summariser's request, with a mark saying
    how much was left out (the message itself stays whole, compacted and searchable)."""
    total = count_tokens(transcript, model=model)
    mark = CUT_MARK.format(tokens=total)
    room = limit - request_tokens(mark, focus, model)
    head = truncate_to_tokens(transcript, max(0, room), model=model)
    return head + CUT_MARK.format(tokens=total - count_tokens(head, model=model))


def source_tokens_to_take(session: ChatSession, excess: int) -> int:
    """Source tokens to take so that pressure lands on the target *after* the new summary.

    The summary comes back into the context, so freeing exactly the excess would leave pressure
    above the target and cost a second, tiny pass. The session's last compression ratio (summary
    / source; 25 % before the first) predicts how much comes back.
    """
    if excess <= 0:
        return 0
    rows = _LAST_RATIO.rows(session_id=session.pk, **seat_filter(session))
    last = rows[0] if rows else None
    ratio = last[0] / last[1] if last else DEFAULT_SUMMARY_RATIO
    ratio = min(max(ratio, 0.05), 0.9)
    return math.ceil(excess / (1 - ratio))


def _last_ratio_query(session_id: int, bot_id: int | None = None) -> QuerySet:
    """The seat's last pass's (summary, source) tokens (``bot_id``: a room's seat)."""
    events = CompactionEvent.objects.filter(
        session_id=session_id, outcome=CompactionEvent.Outcome.COMPACTED, source_tokens__gt=0
    )
    if bot_id is not None:
        events = events.filter(bot_id=bot_id)
    return (
        events.exclude(trigger="fusion")
        .order_by("-id")
        .values_list("summary_tokens", "source_tokens")[:1]
    )


# Every pass reads it: compiled once per process, a room's seat (with ``bot_id``) apart
# (docs/performance.md, "The tool task, eighth pass").
_LAST_RATIO = CompiledValues(_last_ratio_query, name="last_compression_ratio")


@dataclass(frozen=True)
class Room:
    """Where a pass's summary must fit, in tokens of its block beside what every call sends
    once the pass is done (system prompt, pins, the other summaries, the new message, the
    reply's rounds it leaves): ``aim``, its length as asked for, lands the context at the
    plan's target beside all but the other summaries (fusion merges those); ``limit`` fits it
    in B at all (a longer one is refused, ``over_budget``: kept, no message could be sent)."""

    aim: int
    limit: int


def pass_room(measure: Measure, plan: Plan, rows: list[RangeRow]) -> Room:
    """The room a pass over ``rows`` leaves its summary (``Room``)."""
    within = plan.within
    taken = sum(r.tokens for r in rows if within is not None and within[0] <= r.seq <= within[1])
    fixed = measure.fixed_tokens - taken  # a reply's rounds it takes leave what is sent
    # ``/compact`` aims at nothing (target 0): it lands where blocking compaction does.
    target = plan.target or measure.budget.target_blocking
    others = measure.parts["summaries"]
    return Room(aim=target - (fixed - others), limit=measure.budget.budget - fixed)
