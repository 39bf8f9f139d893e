"""Frontier fusion (docs/compaction.md): once >= 2 active summaries exceed 20 % of B, fuse them
(with their snapshots where they fit) into one of level max+1, superseding the parents
atomically."""

from functools import partial
from typing import Any

from django.db import transaction
from django.utils import timezone

from bots.models import ChatSession
from chat_platform.compiled import CompiledValues
from chat_platform.llm.tokens import count_tokens
from chat_platform.transcript import raw_header
from compaction.budget import Budget
from compaction.engine.common import (
    FUSION_INPUT_PERCENT,
    FUSION_SHARE_PERCENT,
    Conflict,
    Plan,
)
from compaction.engine.coverage import coverage_move
from compaction.engine.events import event_write
from compaction.engine.holds import held_spans, in_spans, summaries_of_seat
from compaction.engine.passes import (
    enveloped,
    record_success,
    run_pass,
    summarise,
    summary_create,
)
from compaction.engine.summariser import (
    INPUT_SHARE_PERCENT,
    compaction_model_config,
    instructions_tokens,
    summariser_window,
)
from compaction.measure import context_measure
from compaction.models import CompactionEvent, ContextExpansion, Summary
from compaction.results import RunResult
from compaction.seats import seat_key
from memory import services as memory_services

# Every pass reads it: compiled once per process (docs/performance.md, "The tool task, eighth
# pass").
_EXPANDED = CompiledValues(
    lambda session_id, bot_id: ContextExpansion.objects.filter(
        session_id=session_id, bot_id=bot_id
    ).values_list("first_seq", "last_seq"),
    name="pending_expansion_span",
)


def fusion_due(
    session: ChatSession, budget: Budget, *, held: tuple[tuple[int, int], ...] | None = None
) -> list[Summary]:
    """The active summaries to fuse now, or []: in a room, the seat's bot's only. Those inside a
    held span (the parents an undone fusion gave back) are not fused again until the hold is
    released. ``held``: the held spans when the caller knows them (``Plan.held``). Nor those
    inside the seat's pending expansion: its reply is sent their span verbatim in their place,
    and a fused summary reaching past the span would be sent beside it (docs/context-records.md).
    """
    spans = held_spans(session) if held is None else list(held)
    spans += _EXPANDED.rows(session_id=session.pk, bot_id=session.bot_id)
    active = [
        s
        for s in summaries_of_seat(session, Summary.Status.ACTIVE, by_seq=True)
        if not (in_spans(s.first_seq, spans) and in_spans(s.last_seq, spans))
    ]
    total = sum(s.token_count for s in active)
    if len(active) >= 2 and total * 100 > budget.budget * FUSION_SHARE_PERCENT:
        return active
    return []


def fuse(session: ChatSession, parents: list[Summary], plan: Plan) -> RunResult:
    """Fuse the active summaries (with their snapshots where they fit) into one, level max+1.

    If the snapshots made the fused text no shorter than the summaries it replaces, it tries
    once more from the summaries alone: the frontier must shrink, or fusion has failed.
    """
    tokens_before = (plan.measured or context_measure(session=session)).pressure
    replaced = sum(p.token_count for p in parents)
    config = compaction_model_config(session.bot, model=plan.model, chat_model=session.chat_model)
    input_cap = summariser_window(session.bot, config) * INPUT_SHARE_PERCENT // 100
    blocks = [p.block for p in parents]
    used = sum(count_tokens(b) for b in blocks) + instructions_tokens("")
    snapshots = memory_services.snapshots_for(
        session=session,
        ranges=[(p.first_seq, p.last_seq) for p in parents],
        seat_bot_id=seat_key(session),
    )
    with_snapshots = list(blocks)
    allowance = min(input_cap, replaced * FUSION_INPUT_PERCENT // 100)
    for i in reversed(range(len(parents))):  # newest first: the freshest detail matters most
        parent = parents[i]
        body = snapshots.get((parent.first_seq, parent.last_seq))
        if body is None:
            continue
        cost = count_tokens(body)
        if used + cost <= allowance:
            with_snapshots[i] += f"\n{raw_header(parent.first_seq, parent.last_seq)}\n{body}"
            used += cost
    attempts = [with_snapshots, blocks] if with_snapshots != blocks else [blocks]
    first_seq, last_seq = parents[0].first_seq, max(p.last_seq for p in parents)
    for attempt in attempts:
        accepted, failure = summarise(
            session,
            plan,
            transcript="\n".join(attempt),
            replaced_tokens=replaced,
            first_seq=first_seq,
            last_seq=last_seq,
            tokens_before=tokens_before,
            source_tokens=replaced,
        )
        if failure is None or failure.reason != "not_shorter":
            break
    if failure is not None:
        return failure
    assert accepted is not None
    try:
        with transaction.atomic():
            summary, tokens_after, event = fuse_commit(
                session, parents, plan, accepted, tokens_before=tokens_before, replaced=replaced
            )
    except Conflict:
        event = event_write(
            session,
            trigger="fusion",
            outcome=CompactionEvent.Outcome.FAILED,
            reason="conflict",
            error="The summaries changed while they were being fused.",
            tokens_before=tokens_before,
            tokens_after=tokens_before,
            model=accepted["model"],
            snapshot=accepted["snapshot"],
        )
        return RunResult("failed", "conflict", tokens_before, tokens_before, None, event)
    return RunResult("compacted", "fusion", tokens_before, tokens_after, summary, event)


def fuse_commit(
    session: ChatSession,
    parents: list[Summary],
    plan: Plan,
    accepted: dict[str, Any],
    *,
    tokens_before: int,
    replaced: int,
) -> tuple[Summary, int, CompactionEvent]:
    """Supersede the parents, create the fused summary, re-point coverage (caller's atomic)."""
    parent_ids = [p.pk for p in parents]
    superseded = Summary.objects.filter(pk__in=parent_ids, status=Summary.Status.ACTIVE).update(
        status=Summary.Status.SUPERSEDED, superseded_at=timezone.now()
    )
    if superseded != len(parents):
        raise Conflict()
    first_seq, last_seq = parents[0].first_seq, max(p.last_seq for p in parents)
    summary = summary_create(
        session,
        plan,
        accepted,
        first_seq=first_seq,
        last_seq=last_seq,
        source_tokens=sum(p.source_tokens for p in parents),
        level=max(p.level for p in parents) + 1,
    )
    summary.parents.set(parents)
    coverage_move(from_summary_ids=parent_ids, to_summary_id=summary.pk)
    tokens_after, event = record_success(
        session,
        "fusion",
        "fusion",
        accepted,
        summary,
        tokens_before=tokens_before,
        source_tokens=replaced,
    )
    return summary, tokens_after, event


def pass_or_fuse(session: ChatSession, plan: Plan, budget: Budget) -> RunResult:
    """The fusion if one is due, else a pass."""
    return fusion_if_due(session, plan, budget) or enveloped(
        session, plan, partial(run_pass, session, plan)
    )


def fusion_if_due(session: ChatSession, plan: Plan, budget: Budget) -> RunResult | None:
    """The fusion of the seat's active summaries if one is due (``fusion_due``), else None."""
    parents = fusion_due(session, budget, held=plan.held)
    if not parents:
        return None
    fusion = Plan(
        trigger="fusion",
        target=plan.target,
        model=plan.model,
        measured=plan.measured,
        held=plan.held,
    )
    return enveloped(session, fusion, partial(fuse, session, parents, fusion))
