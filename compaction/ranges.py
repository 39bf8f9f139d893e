"""Which messages one compaction pass takes (docs/compaction.md "Range"). Pure: no Django, no I/O.

The caller passes the session's uncompacted in-context rows, oldest first, as stored token counts
(no text). The pass takes the oldest *units* it may take until it has freed enough:

- a unit is one eligible row, or an assistant row that called tools together with every tool
  result answering those calls (a call and its results are taken together or not at all);
- eligible means ``status == "complete"``, not pinned, and before the current turn — or, inside
  a reply, within ``open_span`` (the reply's own earlier tool rounds; docs/tools.md);
- rows that are not eligible, and units that cannot be taken whole, are skipped: they stay
  verbatim and the scan goes on past them (so one stuck row never blocks compaction for good);
- a tool result is only ever taken as part of its call's unit.

Skipping a unit whose results are not all eligible is the contract's "cut back to before the
assistant row" when nothing eligible follows it (results in the current turn); when older
eligible rows do follow (a result stuck in ``pending``/``interrupted``), they are taken instead.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

COMPLETE = "complete"
ASSISTANT_ROLE = "assistant"
TOOL_ROLE = "tool"


@dataclass(frozen=True, slots=True)
class RangeRow:
    id: int
    seq: int
    tokens: int
    role: str  # "user" | "assistant" | "tool" | "system"
    status: str  # "complete" | "interrupted" | "failed" | "pending" | "streaming"
    pinned: bool = False
    tool_call_id: str | None = None  # on tool results
    tool_call_ids: tuple[str, ...] = ()  # on assistant messages that called tools

    def __post_init__(self) -> None:
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int):
            raise TypeError(f"tokens must be an int, got {type(self.tokens).__name__}")
        if self.tokens < 0:
            raise ValueError(f"tokens must be >= 0, got {self.tokens}")


def range_tokens(rows: Iterable[RangeRow]) -> int:
    """Total stored tokens of ``rows``."""
    return sum(row.tokens for row in rows)


def _eligible(
    row: RangeRow, current_turn_seq: int | None, open_span: tuple[int, int] | None = None
) -> bool:
    in_span = open_span is not None and open_span[0] <= row.seq <= open_span[1]
    if current_turn_seq is not None and row.seq >= current_turn_seq and not in_span:
        return False
    return row.status == COMPLETE and not row.pinned


def _unit(
    rows: Sequence[RangeRow],
    index: int,
    current_turn_seq: int | None,
    results_by_call: dict[str, list[int]],
    calls_by_id: dict[str, list[int]],
    open_span: tuple[int, int] | None = None,
) -> list[int] | None:
    """Indexes of the unit that starts at ``rows[index]``, or ``None`` if it cannot be taken.

    A tool result on its own never starts a unit. An assistant row that called tools takes the
    later rows answering its calls (before another call of the same id); if any call has no
    stored result (among the rows given), or any result is not eligible, the whole unit
    stays."""
    row = rows[index]
    if not _eligible(row, current_turn_seq, open_span) or row.role == TOOL_ROLE:
        return None
    if row.role != ASSISTANT_ROLE or not row.tool_call_ids:
        return [index]
    members = [index]
    for call_id in dict.fromkeys(row.tool_call_ids):
        # Its results come before the next call of the same id: ids are the provider's, and
        # some reuse them from turn to turn (``call_0``).
        until = next((i for i in calls_by_id.get(call_id, ()) if i > index), len(rows))
        results = [later for later in results_by_call.get(call_id, ()) if index < later < until]
        if not results:
            return None
        if not all(_eligible(rows[later], current_turn_seq, open_span) for later in results):
            return None
        members.extend(results)
    return sorted(set(members))


def range_select(
    *,
    rows_oldest_first: Sequence[RangeRow],
    current_turn_seq: int | None,
    tokens_to_free: int,
    min_tokens: int = 256,
    max_tokens: int | None = None,
    open_span: tuple[int, int] | None = None,
) -> list[RangeRow]:
    """The rows one compaction pass takes, oldest first (``[]``: nothing worth taking).

    Units are taken oldest first until their tokens reach both ``tokens_to_free`` and
    ``min_tokens``. With ``max_tokens`` the selection stops before the first unit that would push
    it past the cap (a prefix, never a later smaller unit) — unless that unit is the first: one
    unit over the cap on its own is taken alone (its text is cut to fit by the caller). A
    selection below ``min_tokens`` is not worth a summary: ``[]``.
    ``open_span`` (first, last seq): rows of the current turn that may be taken all the same (a
    reply's earlier tool rounds, compacted inside the reply).
    """
    if min_tokens < 0:
        raise ValueError(f"min_tokens must be >= 0, got {min_tokens}")
    if max_tokens is not None and max_tokens < 0:
        raise ValueError(f"max_tokens must be >= 0, got {max_tokens}")
    previous_seq: int | None = None
    for row in rows_oldest_first:
        if previous_seq is not None and row.seq <= previous_seq:
            raise ValueError(
                f"rows must be oldest first with increasing seq ({row.seq} after {previous_seq})"
            )
        previous_seq = row.seq
    if tokens_to_free <= 0:
        return []

    rows = rows_oldest_first
    results_by_call: dict[str, list[int]] = {}
    calls_by_id: dict[str, list[int]] = {}
    for index, row in enumerate(rows):
        if row.role == TOOL_ROLE and row.tool_call_id:
            results_by_call.setdefault(row.tool_call_id, []).append(index)
        for call_id in row.tool_call_ids:
            calls_by_id.setdefault(call_id, []).append(index)
    taken: set[int] = set()
    total = 0
    # A span short of the minimum goes on to it, when the history holds it: stopping at what
    # the target asks for made a pass that needs less than the minimum a noop.
    wanted = max(tokens_to_free, min_tokens)
    for index in range(len(rows)):
        if total >= wanted:
            break
        if index in taken:
            continue
        members = _unit(rows, index, current_turn_seq, results_by_call, calls_by_id, open_span)
        if members is None or taken.intersection(members):
            continue
        unit_tokens = sum(rows[member].tokens for member in members)
        if max_tokens is not None and total + unit_tokens > max_tokens:
            if not taken and max_tokens > 0:
                # A first unit longer than the cap on its own is taken alone: the caller cuts
                # its text to fit (``range_choose``). Left, it stood first for good, and
                # nothing behind it was ever compacted.
                taken.update(members)
                total += unit_tokens
            break
        taken.update(members)
        total += unit_tokens
    if not taken or total < min_tokens:
        return []
    return [rows[index] for index in sorted(taken)]
