"""The history of a context build: the rows admission decides on (ids and stored counts, read
newest first in keyset pages, or whole with their text when the running totals say everything
fits), and the text of what admission chose (see the package doc)."""

import json
from collections.abc import Iterator
from typing import Any

from django.db.models import Q, TextField
from django.db.models.functions import Cast

from bots.models import Message
from chat_platform.compiled import CompiledValues
from compaction.admission import Admission, HistoryRow
from compaction.measure import Measure
from compaction.seats import RoomView, Seat, in_context, in_context_before

# Rows per keyset page when walking history newest-first (ids and counts only, no text).
HISTORY_PAGE_SIZE = 500


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
        in_context(measure.session, measure.before_seq, measure.seat, room)
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


# Rendered from the first six; the seq names the row in the call's provenance.
CHOSEN_FIELDS = ("pk", "role", "content", "calls", "tool_call_id", "bot_id", "seq")


def fits_whole(measure: Measure) -> bool:
    """Do the running totals say the whole history fits, with everything else? Then admission
    will take every candidate, so their text is read with their counts (one query)."""
    return measure.pressure + measure.reserve_tokens <= measure.budget.budget


def whole_history(
    measure: Measure, new_message: Message | None
) -> tuple[list[HistoryRow], dict[int, tuple[Any, ...]]]:
    """Every candidate with its text, when the whole history fits (``fits_whole``): the history
    rows for admission, newest first, and ``CHOSEN_FIELDS`` tuples by id for rendering (pins,
    the recalled exchange and the new message included).

    The in-context messages are read newest first in keyset pages, as ``history_newest_first``
    reads them: a bounded read that follows the session's in-context index, however long the
    compacted history behind them (one page unless the history is long; docs/performance.md "A
    long compacted history"). What is sent whole but not among them (a recalled exchange after
    the new message, an expanded span's compacted messages) is read by id after them.

    The running totals are read before the rows: if a concurrent turn made the history grow past
    the budget meanwhile, admission still decides on the rows read, and trims."""
    outside = _sent_whole_ids(measure, new_message)
    history: list[HistoryRow] = []
    texts: dict[int, tuple[Any, ...]] = {}
    room, seat = measure.room, measure.seat
    session_id, before_seq = measure.session.pk, measure.before_seq
    cursor = before_seq
    while True:
        page_of = {
            "session_id": session_id,
            "before_seq": before_seq,
            "cursor": cursor,
            "limit": HISTORY_PAGE_SIZE,
            "seat_bot_id": seat.bot_id,
            "floor": seat.covered_through_seq,
        }
        if room is None and not seat.uncovered_ids:
            # A one-bot chat's, nearly every turn: compiled once per process.
            page = _WHOLE_PAGE.rows(**page_of)
        else:
            page = list(_whole_page_query(**page_of, room=room, listed=seat.uncovered_ids))
        for pk, role, content, calls, tool_call_id, bot_id, seq, tokens, pinned in page:
            texts[pk] = (pk, role, content, calls, tool_call_id, bot_id, seq)
            if not pinned and pk not in outside:
                history.append(
                    history_row(pk, seq, tokens, role, tool_call_id, calls, room, bot_id)
                )
        if len(page) < HISTORY_PAGE_SIZE:
            break
        cursor = page[-1][6]
    missing = outside - texts.keys()
    if missing:
        for row in (
            Message.objects.filter(pk__in=missing)
            .annotate(calls=tool_calls_text())
            .values_list(*CHOSEN_FIELDS)
        ):
            texts[row[0]] = row
        # Newest first, as ``chosen_from`` reads them (the seq is the row's last field).
        texts = dict(sorted(texts.items(), key=lambda item: -item[1][6]))
    return history, texts


def _whole_page_query(  # noqa: ANN202 (a queryset)
    session_id: int,
    before_seq: int,
    cursor: int,
    limit: int,
    seat_bot_id: int,
    floor: int,
    room: RoomView | None = None,
    listed: tuple[int, ...] = (),
):
    """One page of ``whole_history``: in-context messages of the seat (its bot, covered floor
    and the ids listed below it) before ``cursor``, newest first, with their text
    (``CHOSEN_FIELDS``), count and pin. The floor is compared even at 0 (every seq is above
    it), so one compiled statement serves every seat without listed ids."""
    seat = Seat(bot_id=seat_bot_id, covered_through_seq=floor, uncovered_ids=listed)
    where = in_context_before(session_id, before_seq, seat, room)
    if not floor:
        where &= Q(seq__gt=floor)
    return (
        Message.objects.filter(where, seq__lt=cursor)
        .annotate(calls=tool_calls_text())
        .order_by("-seq")
        .values_list(*CHOSEN_FIELDS, "token_count", "pinned")[:limit]
    )


_WHOLE_PAGE = CompiledValues(_whole_page_query, shape=("limit",), name="whole_history_page")


def _sent_whole_ids(measure: Measure, new_message: Message | None) -> set[int]:
    """Pins, the recalled exchange, an expanded span and the new message: sent whatever
    admission decides."""
    ids = {p.id for p in measure.pinned} | {r.id for r in measure.recalled}
    ids |= {e.id for e in measure.expanded}
    if new_message is not None:
        ids.add(new_message.pk)
    return ids


def _chosen_ids(measure: Measure, admission: Admission, new_message: Message | None) -> set[int]:
    return _sent_whole_ids(measure, new_message) | set(admission.admitted_history_ids)


def chosen_from(
    texts: dict[int, tuple[Any, ...]],
    measure: Measure,
    admission: Admission,
    new_message: Message | None,
) -> list[tuple[Any, ...]]:
    """What admission chose, in seq order, from rows already read (``whole_history``: newest
    first, so reversed)."""
    wanted = _chosen_ids(measure, admission, new_message)
    return [row for pk, row in reversed(texts.items()) if pk in wanted]


def chosen_rows(
    measure: Measure, admission: Admission, new_message: Message | None
) -> list[tuple[Any, ...]]:
    """The text of what admission chose, in seq order: ``CHOSEN_FIELDS`` tuples, no model
    instances (a long history costs no per-row object building).

    The admitted history is the newest contiguous run of candidates, so it is read as a seq
    range, not as a list of ids (thousands of placeholders cost more to send and plan than the
    rows); rows of that range admission left out (an orphaned tool result at its start, failed
    replies, commands) are dropped here. Older pins, the recalled exchange and the new message
    come by id."""
    wanted = _chosen_ids(measure, admission, new_message)
    if not wanted:
        return []
    first = admission.admitted_from_seq
    if first is None:
        where = Q(pk__in=wanted)
    else:
        history_ids = set(admission.admitted_history_ids)
        outside = [pk for pk in wanted if pk not in history_ids]
        # Every row of the range, whatever became of it since (a compaction that just marked
        # it): admission counted it, so it goes as it was read.
        where = Q(session=measure.session, seq__gte=first, seq__lt=measure.before_seq)
        if outside:
            where |= Q(pk__in=outside)
    rows = (
        Message.objects.filter(where)
        .annotate(calls=tool_calls_text())
        .order_by("seq")
        .values_list(*CHOSEN_FIELDS)
    )
    return [row for row in rows if row[0] in wanted]


def tapped(rows: Iterator[HistoryRow], seen: dict[int, int]) -> Iterator[HistoryRow]:
    """The lazily read history, noting each row's tokens as admission pulls it (no more rows
    than admission reads: the provenance of what it admitted)."""
    for row in rows:
        seen[row.id] = row.tokens
        yield row
