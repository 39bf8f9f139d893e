"""What a summary covers, and every write of it: in a one-bot session its messages'
``compacted_by``, written through ``bots.coverage``; in a room the seat's ``SummaryCoverage``
rows, ``SeatState`` totals and covered floor. Written by a pass (``coverage_cover``), moved to a
fused or re-summarised summary, restored on undo, released on delete, carried to a branch
(``summaries_copy_prefix``), turned into rows when a one-bot chat becomes a room
(``room_seat_open``); always inside the caller's transaction."""

from typing import Any

from django.db import IntegrityError, connection, transaction
from django.db.models import Count, F, Max, Min, Q, Sum, Value
from django.db.models.functions import Least

from bots import coverage
from bots.models import ChatSession, Message, SessionParticipant
from bots.transitions import session_context_remove
from compaction.engine.common import Conflict
from compaction.models import SEAT_FLOOR_NONE, SeatState, Summary, SummaryCoverage
from compaction.seats import seat_covered, seat_first_seq, seat_seen

# A one-bot session records coverage on its messages (``Message.compacted_by_id``, through
# ``bots.coverage``); a room records it per bot (``SummaryCoverage``) with the seat's own totals
# and covered floor (``SeatState``). Every writer below takes the session and chooses, so each
# caller keeps one path whatever the session is.


def coverage_cover(
    session: ChatSession, summary: Summary, ids: list[int], *, tokens: int, seen_from: int
) -> None:
    """A pass's summary covers exactly ``ids`` (caller's transaction), which held ``tokens``: in
    a one-bot session on the messages, out of the session's running totals; in a room for its
    bot alone (``seat_cover``). A message pinned, covered or changed meanwhile is a
    ``Conflict``."""
    if session.is_room:
        seat_cover(session, summary, ids, tokens=tokens, seen_from=seen_from)
        return
    if coverage.messages_compact(message_ids=ids, summary_id=summary.pk) != len(ids):
        raise Conflict()
    session_context_remove(session_id=session.pk, tokens=tokens, messages=len(ids))


def seat_cover(
    session: ChatSession, summary: Summary, ids: list[int], *, tokens: int, seen_from: int
) -> None:
    """In a room (caller's transaction): the bot's summary covers exactly these messages, for
    this bot alone (``SummaryCoverage``), and the bot's own totals drop by what it replaced.
    The same conditions as ``coverage.messages_compact``: a message pinned, changed or
    covered for this bot meanwhile is a conflict.

    One statement writes the coverage of those of ``ids`` still complete and unpinned
    (``INSERT … SELECT``): fewer rows than ids is a conflict, and so is a message this bot
    covers already, which the unique (bot, message) pair refuses — no read of the bot's whole
    coverage per pass. Then the seat's row, locked, and one UPDATE moves its totals and raises
    its covered floor to the summary's last seq (``seat_floor``; ``seen_from``: the first seq
    the seat is shown)."""
    bot_id = session.bot_id
    try:
        with transaction.atomic():
            written = coverage_insert(summary_id=summary.pk, bot_id=bot_id, message_ids=ids)
    except IntegrityError as exc:
        raise Conflict() from exc
    if written != len(ids):
        raise Conflict()
    seat = SeatState.objects.filter(session_id=session.pk, bot_id=bot_id)
    state = seat.select_for_update().values_list("covered_through_seq", "uncovered_ids").first()
    if state is None:  # the seat's row exists after its first turn; a pass before it makes it
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


def coverage_move(session: ChatSession, *, from_summary_ids: list[int], to_summary_id: int) -> None:
    """Fusion, re-summary: what ``from_summary_ids`` covered is covered by ``to_summary_id``
    (caller's transaction). The totals do not move: the same messages stay covered."""
    if session.is_room:
        SummaryCoverage.objects.filter(summary_id__in=from_summary_ids).update(
            summary_id=to_summary_id
        )
    else:
        coverage.messages_compaction_move(
            from_summary_ids=from_summary_ids, to_summary_id=to_summary_id
        )


def coverage_restore(
    session: ChatSession, *, from_summary_id: int, to_summary_id: int, first_seq: int, last_seq: int
) -> None:
    """Undo of a fusion: the fused summary's coverage in one parent's span is that parent's
    again (the reverse of ``coverage_move``; caller's transaction)."""
    if session.is_room:
        SummaryCoverage.objects.filter(
            summary_id=from_summary_id, message__seq__gte=first_seq, message__seq__lte=last_seq
        ).update(summary_id=to_summary_id)
    else:
        coverage.messages_compaction_restore(
            from_summary_id=from_summary_id,
            to_summary_id=to_summary_id,
            first_seq=first_seq,
            last_seq=last_seq,
        )


def coverage_release(session: ChatSession, *, summary_id: int) -> tuple[int, int]:
    """Undo: what ``summary_id`` covers is no longer covered and comes back into the context —
    in a room, into its bot's context only: its coverage rows go and its seat's totals drop by
    exactly what they held (the reverse of ``seat_cover``); other bots' seats are untouched.
    Returns the (tokens, messages) that came back. Caller's transaction."""
    if not session.is_room:
        return coverage.messages_uncompact(summary_id=summary_id)
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
    point (with the audit fields as they are), and they cover the copies of those messages. A
    summary reaching the branch point or beyond is not carried: it speaks of messages the
    branch does not have, so the branch sees those messages raw (compacted again as needed)."""
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
        coverage.messages_coverage_copy(
            source_id=source.pk,
            target_id=target.pk,
            from_summary_id=old_id,
            to_summary_id=summary.pk,
        )
        if source.is_room:
            _room_coverage_copy(target=target, from_summary_id=old_id, to_summary=summary)
        carried += 1
    if source.is_room:
        _room_seats_count(target=target)
    return carried


def _room_coverage_copy(*, target: ChatSession, from_summary_id: int, to_summary: Summary) -> None:
    """A room's carried-over summary covers, for its bot, the copies of what it covered."""
    seqs = SummaryCoverage.objects.filter(summary_id=from_summary_id).values("message__seq")
    copies = Message.objects.filter(session=target, seq__in=seqs).values_list("pk", flat=True)
    SummaryCoverage.objects.bulk_create(
        SummaryCoverage(summary=to_summary, bot_id=to_summary.bot_id, message_id=pk)
        for pk in copies
        if to_summary.bot_id is not None
    )


def _room_seats_count(*, target: ChatSession) -> None:
    """A room branch's seats: each bot's covered totals from its coverage rows, what a bot
    that sees from its join does not see (the branch's in-context history up to its join), and
    its covered floor at the last message its coverage reaches (``seat_floor``)."""
    in_context = Message.objects.filter(Message.in_context_q(), session=target)
    for participant in SessionParticipant.objects.filter(session=target):
        covered = SummaryCoverage.objects.filter(
            bot_id=participant.bot_id, message__session=target
        ).aggregate(
            tokens=Sum("message__token_count"), messages=Count("id"), last=Max("message__seq")
        )
        hidden = (
            in_context.filter(seq__lte=participant.joined_seq).aggregate(
                tokens=Sum("token_count"), messages=Count("id")
            )
            if participant.sees_from_join
            else {"tokens": 0, "messages": 0}
        )
        SeatState.objects.update_or_create(
            session=target,
            bot_id=participant.bot_id,
            defaults={
                "covered_tokens": covered["tokens"] or 0,
                "covered_messages": covered["messages"],
                "hidden_tokens": hidden["tokens"] or 0,
                "hidden_messages": hidden["messages"],
                **SEAT_FLOOR_NONE,
                **seat_floor(
                    target.pk,
                    participant.bot_id,
                    seat_first_seq(participant.joined_seq, participant.sees_from_join),
                    floor=(0, []),
                    through_seq=covered["last"] or 0,
                ),
            },
        )


def room_seat_open(*, session: ChatSession, bot_id: int, sees_from_join: bool) -> None:
    """A bot takes its seat in a room (``participant_add``'s transaction, the session row
    locked). The first time a session becomes a room, its summaries' coverage moves from
    ``Message.compacted_by_id`` to rows per bot (``SummaryCoverage``: in a room several bots may
    cover one message), and its running totals count every message again. A bot that sees from
    its join never sees what is in context now: its own totals leave it out (``hidden_*``)."""
    if Message.objects.filter(session_id=session.pk, compacted_by_id__isnull=False).exists():
        _coverage_to_rows(session)
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


def _coverage_to_rows(session: ChatSession) -> None:
    """A one-bot chat's coverage as rows per summary's bot, their seats' totals, and each
    seat's covered floor at the last message its rows reach (``seat_floor``): the chat's bot
    was shown everything."""
    rows = list(
        Message.objects.filter(session_id=session.pk, compacted_by_id__isnull=False).values_list(
            "pk", "compacted_by_id", "token_count", "seq"
        )
    )
    writers = dict(
        Summary.objects.filter(pk__in={summary_id for _, summary_id, _, _ in rows}).values_list(
            "pk", "bot_id"
        )
    )
    covered: dict[int, list[int]] = {}
    written = []
    for pk, summary_id, tokens, seq in rows:
        bot_id = writers.get(summary_id) or session.bot_id
        written.append(SummaryCoverage(summary_id=summary_id, bot_id=bot_id, message_id=pk))
        totals = covered.setdefault(bot_id, [0, 0, 0])
        totals[0] += tokens
        totals[1] += 1
        totals[2] = max(totals[2], seq)
    SummaryCoverage.objects.bulk_create(written)
    for bot_id, (tokens, messages, last) in covered.items():
        state, _ = SeatState.objects.get_or_create(session_id=session.pk, bot_id=bot_id)
        SeatState.objects.filter(pk=state.pk).update(
            covered_tokens=F("covered_tokens") + tokens,
            covered_messages=F("covered_messages") + messages,
            **seat_floor(session.pk, bot_id, 1, floor=(0, []), through_seq=last),
        )
    coverage.messages_room_uncompact(session_id=session.pk)
