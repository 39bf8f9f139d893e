"""What a summary covers, and every write of it: one store for every chat (docs/rooms.md "A
seat's bounded read"), the seat's ``SummaryCoverage`` rows (summary, bot, message), its
``SeatState`` totals and its covered floor. In a one-bot chat the seat is the chat's bot; in a
room each bot's. Written by a pass (``seat_cover``), moved to a fused or re-summarised summary,
restored on undo, released on delete, carried to a branch (``summaries_copy_prefix``); always
inside the caller's transaction. The session's running totals count every message in context
whatever covers it: a seat's pressure subtracts its own coverage (``compaction.measure``)."""

from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Least

from bots.models import ChatSession, Message, SessionParticipant
from compaction.engine.common import Conflict
from compaction.models import SEAT_FLOOR_NONE, SeatState, Summary, SummaryCoverage
from compaction.seats import seat_covered, seat_first_seq, seat_seen


def seat_cover(
    session: ChatSession, summary: Summary, ids: list[int], *, tokens: int, seen_from: int
) -> None:
    """A pass's summary covers exactly ``ids`` (caller's transaction), which held ``tokens``,
    for the seat's bot alone (``session.bot``: the chat's, or in a room the seat's), and the
    seat's totals drop by what it replaced. A message pinned, changed or covered for this bot
    meanwhile is a ``Conflict``.

    One statement writes the coverage of those of ``ids`` still complete and unpinned
    (``INSERT … SELECT``): fewer rows than ids is a conflict, and so is a message this bot
    covers already, which the unique (bot, message) pair refuses — no read of the bot's whole
    coverage per pass. Then the seat's row, locked, and one UPDATE moves its totals and raises
    its covered floor to the summary's last seq (``seat_floor``; ``seen_from``: the first seq
    the seat is shown)."""
    bot_id = session.bot_id
    try:
        # No savepoint of its own: a conflict ends the caller's transaction (``_pass_commit``
        # rolls back the summary with it), so nothing is written after a refused INSERT. Two
        # statements fewer a pass (docs/performance.md, "The tool task, eighth pass").
        with transaction.atomic(savepoint=False):
            written = coverage_insert(summary_id=summary.pk, bot_id=bot_id, message_ids=ids)
    except IntegrityError as exc:
        raise Conflict() from exc
    if written != len(ids):
        raise Conflict()
    seat = SeatState.objects.filter(session_id=session.pk, bot_id=bot_id)
    state = seat.select_for_update().values_list("covered_through_seq", "uncovered_ids").first()
    if state is None:  # a room's seat has a row from its first turn; a one-bot chat's, from here
        SeatState.objects.get_or_create(session_id=session.pk, bot_id=bot_id)
        state = (0, [])
    seat.update(
        covered_tokens=F("covered_tokens") + tokens,
        covered_messages=F("covered_messages") + len(ids),
        **seat_floor(session.pk, bot_id, seen_from, floor=state, through_seq=summary.last_seq),
    )


# The most ids a seat's floor lists below it (``seat_floor``).
UNCOVERED_IDS_MAX = 500


def seat_floor(
    session_id: int,
    bot_id: int,
    seen_from: int,
    *,
    floor: tuple[int, list[int]],
    through_seq: int,
) -> dict[str, Any]:
    """The seat's covered floor once its coverage reaches ``through_seq`` (the fields to write;
    none if it is there already): what the bot sees from ``seen_from`` up to there that its
    summaries do not cover is listed (docs/rooms.md "A seat's bounded read"). ``floor``: the
    seat's (``covered_through_seq``, ``uncovered_ids``), read with its row locked. At most
    ``UNCOVERED_IDS_MAX`` are listed: with more, the floor stops below the first one left out.

    Reads the messages between the old floor and the new one, and those listed before (any
    covered since leave the list): what this pass covered and what it and earlier passes left,
    never the history behind them. An undo that releases coverage waits on the seat's row and
    lowers the floor after this commits (``coverage_release``)."""
    covered_through, listed = floor
    if through_seq <= covered_through:
        return {}
    window = Q(seq__gt=covered_through, seq__lte=through_seq)
    if listed:
        window |= Q(pk__in=listed)
    left = list(
        Message.objects.filter(
            window, session_id=session_id, kind__in=[Message.Kind.CHAT, Message.Kind.TOOL]
        )
        .filter(seat_seen(bot_id, seen_from))
        .exclude(seat_covered(bot_id))
        .order_by("seq")
        .values_list("pk", "seq")[: UNCOVERED_IDS_MAX + 1]
    )
    if len(left) > UNCOVERED_IDS_MAX:
        # Too many to list (a room of many failed replies): the floor stops just below the first
        # one not listed, so the list, read with every build, stays short.
        through_seq = left[UNCOVERED_IDS_MAX][1] - 1
        left = left[:UNCOVERED_IDS_MAX]
    return {"covered_through_seq": through_seq, "uncovered_ids": [pk for pk, _ in left]}


def coverage_insert(*, summary_id: int, bot_id: int, message_ids: list[int]) -> int:
    """``SummaryCoverage`` rows (summary, bot, message) for those of ``message_ids`` that are
    complete and unpinned, in one ``INSERT … SELECT``; how many were written."""
    claimable = Message.objects.filter(
        pk__in=message_ids, status=Message.Status.COMPLETE, pinned=False
    ).order_by()
    source_sql, source_params = claimable.values("id").query.sql_with_params()
    quote = connection.ops.quote_name
    meta = SummaryCoverage._meta
    columns = ", ".join(quote(meta.get_field(f).column) for f in ("summary", "bot", "message"))
    with connection.cursor() as cursor:
        # Identifiers from the models, the rows from Django's own compiled SQL; values are
        # parameters.
        cursor.execute(
            f"INSERT INTO {quote(meta.db_table)} ({columns}) "  # noqa: S608
            f"SELECT CAST(%s AS BIGINT), CAST(%s AS BIGINT), claimable.{quote('id')} "
            f"FROM ({source_sql}) claimable",
            [summary_id, bot_id, *source_params],
        )
        return cursor.rowcount


def coverage_move(*, from_summary_ids: list[int], to_summary_id: int) -> None:
    """Fusion, re-summary: what ``from_summary_ids`` covered is covered by ``to_summary_id``
    (caller's transaction). The totals do not move: the same messages stay covered."""
    SummaryCoverage.objects.filter(summary_id__in=from_summary_ids).update(summary_id=to_summary_id)


def coverage_restore(
    *, from_summary_id: int, to_summary_id: int, first_seq: int, last_seq: int
) -> None:
    """Undo of a fusion: the fused summary's coverage in one parent's span is that parent's
    again (the reverse of ``coverage_move``; caller's transaction)."""
    SummaryCoverage.objects.filter(
        summary_id=from_summary_id, message__seq__gte=first_seq, message__seq__lte=last_seq
    ).update(summary_id=to_summary_id)


def coverage_release(session: ChatSession, *, summary_id: int) -> tuple[int, int]:
    """Undo: what ``summary_id`` covers is no longer covered and comes back into the context
    of its seat (``session.bot``) only: its coverage rows go and its seat's totals drop by
    exactly what they held (the reverse of ``seat_cover``); in a room other bots' seats are
    untouched. Returns the (tokens, messages) that came back. Caller's transaction."""
    rows = SummaryCoverage.objects.filter(summary_id=summary_id)
    held = rows.aggregate(
        tokens=Sum("message__token_count"), messages=Count("id"), first=Min("message__seq")
    )
    tokens, messages = held["tokens"] or 0, held["messages"]
    rows.delete()
    if messages:
        # The covered floor goes below what came back (``seat_floor``).
        SeatState.objects.filter(session_id=session.pk, bot_id=session.bot_id).update(
            covered_tokens=F("covered_tokens") - tokens,
            covered_messages=F("covered_messages") - messages,
            covered_through_seq=Least(F("covered_through_seq"), Value(held["first"] - 1)),
        )
    return tokens, messages


# --- branches and seats ---------------------------------------------------------------------


def summaries_copy_prefix(*, source: ChatSession, target: ChatSession, before_seq: int) -> int:
    """A branch carries over the active summaries that cover only messages before its branch
    point (with the audit fields as they are), and they cover, for the same seats, the copies of
    those messages. A summary reaching the branch point or beyond is not carried: it speaks of
    messages the branch does not have, so the branch sees those messages raw (compacted again as
    needed). Then the branch's seats are counted (``seats_count``)."""
    carried = 0
    kept = Summary.objects.filter(
        session=source, status=Summary.Status.ACTIVE, last_seq__lt=before_seq
    ).order_by("first_seq")
    for summary in kept:
        old_id = summary.pk
        created_at = summary.created_at
        summary.pk = None
        summary.session = target
        summary.save(force_insert=True)
        Summary.objects.filter(pk=summary.pk).update(created_at=created_at)
        _coverage_copy(target=target, from_summary_id=old_id, to_summary=summary)
        carried += 1
    seats_count(target=target)
    return carried


def _coverage_copy(*, target: ChatSession, from_summary_id: int, to_summary: Summary) -> None:
    """A carried-over summary covers, for each seat it covered, the copies of what it covered."""
    rows = SummaryCoverage.objects.filter(summary_id=from_summary_id).values_list(
        "bot_id", "message__seq"
    )
    by_seq: dict[int, list[int]] = {}
    for bot_id, seq in rows:
        by_seq.setdefault(seq, []).append(bot_id)
    copies = Message.objects.filter(session=target, seq__in=list(by_seq)).values_list("pk", "seq")
    SummaryCoverage.objects.bulk_create(
        SummaryCoverage(summary=to_summary, bot_id=bot_id, message_id=pk)
        for pk, seq in copies
        for bot_id in by_seq[seq]
    )


def seats_count(*, target: ChatSession) -> None:
    """A branch's or an imported chat's seats (its bot's in a one-bot chat, each participant's
    in a room): each bot's covered totals from its coverage rows, what a bot that sees from its
    join does not see (the chat's in-context history up to its join), and its covered floor at
    the last message its coverage reaches (``seat_floor``). A one-bot chat no summary covers
    has no seat row to write."""
    in_context = Message.objects.filter(Message.in_context_q(), session=target)
    seats = {
        p.bot_id: (p.joined_seq, p.sees_from_join)
        for p in SessionParticipant.objects.filter(session=target)
    }
    if not target.is_room:
        seats = {target.bot_id: (0, False)}
        if not SummaryCoverage.objects.filter(summary__session=target).exists():
            return
    for bot_id, (joined_seq, sees_from_join) in seats.items():
        covered = SummaryCoverage.objects.filter(bot_id=bot_id, message__session=target).aggregate(
            tokens=Sum("message__token_count"), messages=Count("id"), last=Max("message__seq")
        )
        hidden = (
            in_context.filter(seq__lte=joined_seq).aggregate(
                tokens=Sum("token_count"), messages=Count("id")
            )
            if sees_from_join
            else {"tokens": 0, "messages": 0}
        )
        SeatState.objects.update_or_create(
            session=target,
            bot_id=bot_id,
            defaults={
                "covered_tokens": covered["tokens"] or 0,
                "covered_messages": covered["messages"],
                "hidden_tokens": hidden["tokens"] or 0,
                "hidden_messages": hidden["messages"],
                **SEAT_FLOOR_NONE,
                **seat_floor(
                    target.pk,
                    bot_id,
                    seat_first_seq(joined_seq, sees_from_join),
                    floor=(0, []),
                    through_seq=covered["last"] or 0,
                ),
            },
        )


def room_seat_open(*, session: ChatSession, bot_id: int, sees_from_join: bool) -> None:
    """A bot takes its seat in a room (``participant_add``'s transaction, the session row
    locked). A bot that sees from its join never sees what is in context now: its own totals
    leave it out (``hidden_*``). What the chat's summaries cover stays theirs: coverage is
    per seat in every chat, so a one-bot chat becoming a room moves nothing."""
    tokens, messages = (
        ChatSession.objects.filter(pk=session.pk)
        .values_list("context_tokens", "context_messages")
        .get()
    )
    SeatState.objects.update_or_create(
        session_id=session.pk,
        bot_id=bot_id,
        defaults={
            "hidden_tokens": tokens if sees_from_join else 0,
            "hidden_messages": messages if sees_from_join else 0,
            **SEAT_FLOOR_NONE,  # what it is shown may start elsewhere now
        },
    )
