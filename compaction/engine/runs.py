"""The entry points: soft (Celery, after a turn), hard (in the context pipeline, before a model
call) and manual (/compact, the API, the command), each behind the session's single flight."""

from dataclasses import replace
from functools import partial

from django.conf import settings
from django.db.models import Max

from bots.models import ChatSession
from bots.queries import bot_usable_in, participant_seat, room_snapshot_take, session_seat
from chat_platform.errors import CompactionBusy, QuotaExceeded
from chat_platform.llm import gateway
from compaction.budget import Budget
from compaction.engine.common import MANUAL_MAX_PASSES, Plan, SessionGone, session_fresh
from compaction.engine.events import skipped
from compaction.engine.fusion import fuse, fusion_due, fusion_if_due, pass_or_fuse
from compaction.engine.holds import holds_release_at_hard
from compaction.engine.passes import enveloped, run_pass
from compaction.engine.policy import (
    arm_failure,
    clear_failures,
    seat_blocked_until,
    seat_failures,
)
from compaction.engine.summariser import EXTRACTIVE_MODEL, summariser_ready
from compaction.lock import single_flight
from compaction.measure import Measure, context_measure, session_budget
from compaction.models import CompactionEvent
from compaction.results import RunResult
from compaction.seats import seat_key
from connections import usage


def seat_load(session_id: int, bot_id: int | None) -> ChatSession | None:
    """The session, as ``bot_id`` sits in it (a room's participant; None: the session's bot).
    None when the session, or that bot's place in it, is gone. A room's participants and user
    name are read once here, in one statement (``bots.queries.room_snapshot_take``), for the
    whole run: its passes' measures and transcripts reuse them."""
    session = ChatSession.objects.select_related("bot").filter(pk=session_id).first()
    if session is not None:
        room_snapshot_take(session)
    if session is None or bot_id is None or bot_id == session.bot_id:
        return session
    seat = participant_seat(session=session, bot_id=bot_id)
    if seat is None:
        return None
    return session_seat(session, seat.bot)


def compaction_soft(*, session_id: int, bot_id: int | None = None) -> RunResult | None:
    """After a turn: drain toward T in up to 3 passes; never waits for a run in flight. In a
    room, ``bot_id`` names the seat (default: the session's bot)."""
    session = seat_load(session_id, bot_id)
    if session is None or not session.bot.compaction_enabled or not bot_usable_in(session=session):
        return None  # (a bot un-shared since the turn: its owner's model is not run for others)
    try:
        return _soft_passes(session)
    except SessionGone:
        return None  # the chat was deleted while it ran (``enveloped``): nothing to keep


def _soft_passes(session: ChatSession) -> RunResult | None:
    session_id = session.pk
    key = seat_key(session)
    budget = session_budget(session)
    summariser_ready(session.bot)
    with single_flight(session_id, wait=0, bot_id=key) as flight:
        if not flight.acquired:
            return None  # a run is in flight: it is doing this work already
        last: RunResult | None = None
        for _ in range(settings.COMPACTION_SOFT_PASSES):
            session = session_fresh(session)
            measure = context_measure(session=session)
            pressure = measure.pressure
            if last is None and not budget.soft_due(pressure):
                return None  # below S since the turn asked (another run, an unpin): nothing due
            if last is not None and pressure <= budget.target:
                return last  # landed: a further pass would do nothing
            if seat_blocked_until(session_id, hard=False, room=measure.room):
                return skipped(session, "soft", "cooldown", pressure)
            plan = Plan(trigger="soft", target=budget.target, measured=measure)
            try:
                # Charged to the session's user (docs/connections.md "Daily token limits"):
                # a spent limit skips the pass, arms nothing, and the reply stays as it is.
                usage.payer_check(user_id=session.user_id)
                result = pass_or_fuse(session, plan, budget)
            except QuotaExceeded:
                return skipped(session, "soft", "quota_exceeded", pressure)
            if result.outcome in ("failed", "rejected"):
                arm_failure(session_id, hard=False, bot_id=key)
            if not result.compacted:
                return result
            clear_failures(session_id, key)
            last = result
        return last


def compaction_hard(
    *, session: ChatSession, measure: Measure, within: tuple[int, int] | None = None
) -> RunResult | None:
    """Before a model call under hard pressure: compact toward Ts, waiting (<= 60 s) for any run
    in flight and reusing its result. Degrades only downward: extractive fallback, or trimming.

    ``within``: the (first, last) seqs of the reply's earlier tool rounds, before a model call
    of its tool loop. The pass (trigger ``tool``) may take them besides the history before the
    current turn, oldest first, never a call without its results (docs/tools.md, "Compaction
    inside a reply"); the extractive fallback may too.

    A summariser call the daily limit refuses raises ``QuotaExceeded`` (no fallback, no
    back-off): the turn fails visibly with ``quota_exceeded`` rather than overspend or answer
    from a trimmed history (docs/connections.md "Daily token limits")."""
    bot = session.bot
    budget = measure.budget
    key = seat_key(session)
    summariser_ready(bot)
    with single_flight(session.pk, wait=settings.COMPACTION_WAIT_SECONDS, bot_id=key) as flight:
        if not flight.acquired:
            return skipped(session, "hard", "busy", measure.pressure)
        session = session_fresh(session)
        fresh = context_measure(session=session)
        pressure = fresh.pressure
        if flight.waited and not budget.hard_due(pressure):
            return None  # the run we waited for did the work
        # Undone spans may go again: none is held after this (``Plan.held``).
        released = budget.hard_due(pressure)
        if released:
            holds_release_at_hard(session, pressure=pressure)
        held = () if released else None
        result: RunResult | None = None
        failures = seat_failures(session.pk, room=fresh.room)
        if failures.blocked(hard=True) is None:
            trigger = "tool" if within is not None else "hard"
            plan = Plan(
                trigger=trigger,
                target=budget.target_blocking,
                within=within,
                measured=fresh,
                held=held,
            )
            result = pass_or_fuse(session, plan, budget)
            if result.compacted:
                if failures.armed:  # else nothing to clear: one statement fewer a pass
                    clear_failures(session.pk, key)
                return _hard_rest(session, plan, budget, result)
            if gateway.stop_requested():
                # The reply's Stop ended the summariser's call: nothing failed, nothing more
                # runs (no back-off armed, no fallback) for a reply that is over.
                return result
            if result.outcome in ("failed", "rejected"):
                arm_failure(session.pk, hard=True, bot_id=key)
            elif result.outcome == "noop":
                return result
        if not bot.compaction_fallback_extractive:
            if result is None:
                result = skipped(session, "hard", "backoff", pressure)
            return result  # admission trims; never more than B, never the full history
        session = session_fresh(session)
        plan = Plan(
            trigger="fallback",
            target=budget.target_blocking,
            model=EXTRACTIVE_MODEL,
            within=within,
            held=held,
        )
        return pass_or_fuse(session, plan, budget)


def _hard_rest(session: ChatSession, plan: Plan, budget: Budget, result: RunResult) -> RunResult:
    """After a blocking pass that compacted, the context still past the hard threshold: the
    fusion that pass made due, if one is, in the same run; the last result. A call whose fixed
    part a pass left over B (its second summary beside a recall round) lost the round, though the
    fusion the next build ran made it fit."""
    if not budget.hard_due(result.tokens_after):
        return result
    fused = fusion_if_due(session_fresh(session), replace(plan, measured=None), budget)
    return fused if fused is not None and fused.compacted else result


def compaction_manual(
    *, session: ChatSession, focus: str = "", must_lower: bool = False
) -> RunResult:
    """``/compact [focus]``: everything but the latest exchange, now — in as many summariser
    calls as its input window needs; bypasses cool-down and back-off and clears them on success.
    ``must_lower`` (``/compact`` typed in chat): a pass that would not leave the context smaller
    keeps nothing (``rejected``, ``not_lower``; docs/compaction.md "/compact").

    A caller that finds a run in flight waits (<= 60 s) and reuses what that run produced while
    it waited; if that run compacted nothing, it compacts itself.
    """
    key = seat_key(session)
    mine = {"bot_id": key} if key is not None else {}
    seen = (
        CompactionEvent.objects.filter(session=session, **mine).aggregate(last=Max("id"))["last"]
        or 0
    )
    summariser_ready(session.bot)
    with single_flight(session.pk, wait=settings.COMPACTION_WAIT_SECONDS, bot_id=key) as flight:
        if not flight.acquired:
            raise CompactionBusy()
        session = session_fresh(session)
        if flight.waited:
            joined = (
                CompactionEvent.objects.filter(
                    session=session,
                    id__gt=seen,
                    outcome=CompactionEvent.Outcome.COMPACTED,
                    **mine,
                )
                .select_related("summary")
                .order_by("-id")
                .first()
            )
            if joined is not None:
                return RunResult(
                    joined.outcome,
                    joined.reason or "joined",
                    joined.tokens_before,
                    joined.tokens_after,
                    joined.summary,
                    joined,
                )
        return manual_passes(session, focus=focus, must_lower=must_lower)


def manual_passes(session: ChatSession, *, focus: str = "", must_lower: bool = False) -> RunResult:
    """The work of ``/compact`` for a caller holding the session's lease: everything but the
    latest exchange (and held spans), in as many passes as the summariser's window needs."""
    budget = session_budget(session)
    tokens_before = context_measure(session=session).pressure
    done: list[RunResult] = []
    last: RunResult | None = None
    stopped: dict | None = None
    for i in range(MANUAL_MAX_PASSES):
        # The frontier is fused first if due; the passes' own summaries wait for the next
        # pass that finds them past 20 % of B.
        parents = fusion_due(session, budget) if i == 0 else []
        if parents:
            plan = Plan(trigger="fusion", target=0)
            attempt = partial(fuse, session, parents, plan)
        else:
            plan = Plan(
                trigger="manual", target=0, focus=focus, min_tokens=0, must_lower=must_lower
            )
            attempt = partial(run_pass, session, plan, record_noop=not done)
        try:
            last = enveloped(session, plan, attempt)
        except QuotaExceeded as exc:
            if not done:
                raise  # refused before any call: the caller answers quota_exceeded
            # The limit ran out on the way: the passes done stay (each committed whole), the
            # refused one wrote nothing, and the result says it stopped (docs/compaction.md).
            stopped = exc.details
            break
        session = session_fresh(session)
        if not last.compacted:
            break
        done.append(last)
    if not done:
        assert last is not None
        return last
    clear_failures(session.pk, seat_key(session))
    final = done[-1]
    return RunResult(
        "compacted",
        final.reason,
        tokens_before,
        final.tokens_after,
        final.summary,
        final.event,
        passes=[r.event for r in done if r.event is not None],
        first_seq=min(r.first_seq for r in done if r.first_seq is not None),
        last_seq=max(r.last_seq for r in done if r.last_seq is not None),
        quota=stopped,
        stopped=None if stopped is None else "quota_exceeded",
    )
