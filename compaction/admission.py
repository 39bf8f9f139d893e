"""Admission (docs/compaction.md): what the next model call may carry, decided from token counts
only.

Pure: no Django, no I/O, no message text. The caller passes stored token counts; this module
answers which history rows to load, so text is only ever materialised for what will be sent.

Priority, highest first: system prompt -> new user message -> pinned messages -> active
summaries (together "the fixed part"; if it alone exceeds the budget the call is rejected) ->
memory index lines, newest first -> the newest contiguous run of history.

Every ``tokens`` value is what the part costs *as sent* (text plus per-message overhead, plus
the label for a summary block), so ``selected_tokens <= budget`` is a promise about the request.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

AdmissionDecision = Literal["admit", "trim", "reject"]

TOOL_ROLE = "tool"


def _require_tokens(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < 0:
        raise ValueError(f"{name} must be >= 0, got {value}")
    return value


@dataclass(frozen=True, slots=True)
class Entry:
    """A part that is always sent whole: the new user message or an active summary."""

    id: int
    tokens: int

    def __post_init__(self) -> None:
        _require_tokens("tokens", self.tokens)


@dataclass(frozen=True, slots=True)
class PinnedEntry:
    """A pinned message. ``seq`` is carried for the renderer, which orders pins in the transcript;
    admission itself only counts them."""

    id: int
    seq: int
    tokens: int

    def __post_init__(self) -> None:
        _require_tokens("tokens", self.tokens)


@dataclass(frozen=True, slots=True)
class HistoryRow:
    """One uncompacted history message as stored (no text).

    ``tool_call_id`` is set on tool results (``role == "tool"``); ``tool_call_ids`` lists the calls
    an assistant message made.
    """

    id: int
    seq: int
    tokens: int
    role: str
    tool_call_id: str | None = None
    tool_call_ids: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        _require_tokens("tokens", self.tokens)


@dataclass(frozen=True, slots=True)
class HistoryTotals:
    """Count and token sum of *all* history candidates (the session's running totals). Only
    needed with a lazy iterator, to make ``estimated_tokens`` and ``dropped_messages`` exact past
    the point where admission stopped reading. Read before the rows, they may lag concurrent
    turns: admission then raises them to what it actually read."""

    count: int
    tokens: int

    def __post_init__(self) -> None:
        _require_tokens("count", self.count)
        _require_tokens("tokens", self.tokens)


@dataclass(frozen=True)
class Admission:
    decision: AdmissionDecision  # admit: nothing dropped; trim: history/index dropped; reject
    budget_tokens: int  # B
    estimated_tokens: int  # what would be sent with nothing dropped
    selected_tokens: int  # what will be sent (0 on reject)
    admitted_history_ids: list[int]  # oldest first
    kept_index_lines: int  # the newest N index lines
    dropped_messages: int  # history candidates not admitted
    # True when admission ran out of candidates rather than budget: every row given was read and
    # none failed to fit. Only then could older rows the caller did not pass still be admitted,
    # so a caller that fetched a bounded window (LIMIT n) should fetch further.
    exhausted: bool
    # The seq of the oldest admitted history row: the admitted history is the newest contiguous
    # run of candidates from here on (derived from the ids, so not part of equality).
    admitted_from_seq: int | None = field(default=None, compare=False)

    def log_fields(self) -> dict[str, int | str]:
        """The budget fields of the ``context_admission`` log event (caller adds ids and path)."""
        return {
            "budget_tokens": self.budget_tokens,
            "estimated_tokens": self.estimated_tokens,
            "selected_tokens": self.selected_tokens,
            "dropped_messages": self.dropped_messages,
            "decision": self.decision,
        }


def _candidates(rows: Iterable[HistoryRow], excluded: set[int]) -> Iterator[HistoryRow]:
    """Yield history rows lazily, skipping pinned ids and the new message, checking the order."""
    previous_seq: int | None = None
    for row in rows:
        if previous_seq is not None and row.seq >= previous_seq:
            raise ValueError(
                f"history_newest_first must be in strictly decreasing seq order: "
                f"seq {row.seq} follows seq {previous_seq}"
            )
        previous_seq = row.seq
        if row.id in excluded:
            continue
        yield row


def _drop_orphan_tool_results(admitted_newest_first: list[HistoryRow]) -> None:
    """Never start the run on a tool result: its call is older, so not admitted. (Matching ids
    is no test: a provider may use a call's id again in a later turn, ``call_0``.)"""
    while admitted_newest_first and admitted_newest_first[-1].role == TOOL_ROLE:
        admitted_newest_first.pop()


def _index_kept(index_lines: list[int], block_tokens: int, room: int) -> tuple[int, int]:
    """How many index lines (newest first) fit in ``room``, the block's fixed cost charged with
    the first; and the room left."""
    kept = 0
    for line_tokens in index_lines:
        cost = line_tokens + (block_tokens if kept == 0 else 0)
        if cost > room:
            break
        room -= cost
        kept += 1
    return kept, room


def _history_admitted(
    rows: Iterable[HistoryRow], excluded: set[int], room: int
) -> tuple[list[HistoryRow], HistoryTotals, bool]:
    """The newest candidates that fit in ``room`` (newest first), read only up to the first that
    does not; the count and tokens of the rows read; and whether the candidates ran out."""
    admitted: list[HistoryRow] = []
    read_count = 0
    read_tokens = 0
    exhausted = True
    for row in _candidates(rows, excluded):
        read_count += 1
        read_tokens += row.tokens
        if row.tokens > room:
            exhausted = False
            break
        room -= row.tokens
        admitted.append(row)
    return admitted, HistoryTotals(count=read_count, tokens=read_tokens), exhausted


def _fixed_tokens(
    system_tokens: int,
    new_message: Entry | None,
    recalled: Sequence[Entry],
    pinned: Sequence[PinnedEntry],
    summaries: Sequence[Entry],
) -> int:
    """What is sent whatever happens: system, new message, recalled, pins, summaries."""
    return (
        system_tokens
        + (new_message.tokens if new_message is not None else 0)
        + sum(r.tokens for r in recalled)
        + sum(p.tokens for p in pinned)
        + sum(s.tokens for s in summaries)
    )


def _rejected(budget: int, without_history: int, totals: HistoryTotals | None) -> Admission:
    """The fixed part alone exceeds the budget: nothing is sent, no history is read."""
    return Admission(
        decision="reject",
        budget_tokens=budget,
        estimated_tokens=without_history + (totals.tokens if totals else 0),
        selected_tokens=0,
        admitted_history_ids=[],
        kept_index_lines=0,
        dropped_messages=totals.count if totals else 0,
        exhausted=False,
    )


def _totals_seen(totals: HistoryTotals | None, read: HistoryTotals) -> HistoryTotals:
    """The candidates' totals, never fewer than were read."""
    if totals is None:
        return read
    if totals.count < read.count or totals.tokens < read.tokens:
        # The totals are read before the rows; a concurrent turn that finished in between adds a
        # row the walk sees but the totals did not count yet. What was read is the truer lower
        # bound: never report fewer candidates (or a negative drop) than were actually seen.
        return HistoryTotals(
            count=max(totals.count, read.count),
            tokens=max(totals.tokens, read.tokens),
        )
    return totals


def admission_decide(
    *,
    budget: int,
    system_tokens: int,
    new_message: Entry | None,
    pinned: Sequence[PinnedEntry],
    summaries: Sequence[Entry],
    index_line_tokens: Sequence[int],
    history_newest_first: Iterable[HistoryRow],
    index_block_tokens: int = 0,
    history_totals: HistoryTotals | None = None,
    recalled: Sequence[Entry] = (),
    reserve_tokens: int = 0,
) -> Admission:
    """Decide what the next call sends.

    ``reserve_tokens``: what goes with the call outside every measured part (the platform's own
    memory tool schemas): the index and history keep out of it, so the call with it stays
    within ``budget``; it never rejects (a fixed part that leaves no room for it makes the
    caller send the call without it).

    ``history_newest_first`` holds the uncompacted, unpinned history, newest first; rows whose id
    is pinned or is the new message are skipped (never counted twice). It may be a lazy iterator:
    it is read only up to the first row that does not fit, and not at all on reject.

    ``index_block_tokens`` is the fixed cost of the index block (header and per-message overhead),
    charged once when at least one line is kept.

    ``recalled`` is this turn's recall exchange (the model's requests and the records it got):
    part of the current turn, so sent whole like the new message, and skipped in the history.

    ``estimated_tokens`` and ``dropped_messages`` cover every candidate given: from
    ``history_totals`` if passed, else from the whole of a ``Sequence``, else (lazy iterator)
    only from the rows actually read, which makes them lower bounds when reading stopped early.
    """
    _require_tokens("budget", budget)
    _require_tokens("system_tokens", system_tokens)
    _require_tokens("index_block_tokens", index_block_tokens)
    index_lines = [_require_tokens("index_line_tokens[]", t) for t in index_line_tokens]

    excluded = {p.id for p in pinned} | {r.id for r in recalled}
    if new_message is not None:
        excluded.add(new_message.id)
    fixed = _fixed_tokens(system_tokens, new_message, recalled, pinned, summaries)
    index_full = sum(index_lines) + (index_block_tokens if index_lines else 0)

    if history_totals is None and isinstance(history_newest_first, Sequence):
        # Already in memory: summing it costs no I/O and makes the estimate exact.
        given = [row for row in history_newest_first if row.id not in excluded]
        history_totals = HistoryTotals(count=len(given), tokens=sum(r.tokens for r in given))

    if fixed > budget:
        return _rejected(budget, fixed + index_full, history_totals)

    room = max(0, budget - fixed - max(0, reserve_tokens))
    kept_index_lines, room = _index_kept(index_lines, index_block_tokens, room)
    index_selected = sum(index_lines[:kept_index_lines]) + (
        index_block_tokens if kept_index_lines else 0
    )

    admitted, read, exhausted = _history_admitted(history_newest_first, excluded, room)
    _drop_orphan_tool_results(admitted)

    history_totals = _totals_seen(history_totals, read)

    dropped = history_totals.count - len(admitted)
    trimmed = dropped > 0 or kept_index_lines < len(index_lines)
    return Admission(
        decision="trim" if trimmed else "admit",
        budget_tokens=budget,
        estimated_tokens=fixed + index_full + history_totals.tokens,
        selected_tokens=fixed + index_selected + sum(row.tokens for row in admitted),
        admitted_history_ids=[row.id for row in reversed(admitted)],
        kept_index_lines=kept_index_lines,
        dropped_messages=dropped,
        exhausted=exhausted,
        admitted_from_seq=admitted[-1].seq if admitted else None,
    )
