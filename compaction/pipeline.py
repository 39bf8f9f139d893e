"""THE context pipeline: the one function that turns a session into the messages a model gets.

measure (stored token counts only) -> [compact if hard: the compaction engine] -> admit -> render.
The chat turn, recall re-invocations, the context report and the tests all come through here.

Nothing here loads message text before admission has chosen the rows: history is read newest
first, in bounded keyset pages of (id, seq, token_count, role, tool ids), and only until the first
row that does not fit; then text is fetched for the chosen ids alone. Pressure comes from the
session's running totals, so neither time nor memory grows with the length of the conversation.
"""

from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import structlog
from django.conf import settings

from bots.models import Bot, ChatSession, Message
from chat_platform.errors import ContextTooLarge
from chat_platform.llm import gateway
from chat_platform.llm.tokens import count_message_tokens
from compaction.admission import (
    Admission,
    Entry,
    HistoryRow,
    HistoryTotals,
    PinnedEntry,
    admission_decide,
)
from compaction.budget import Budget, budget_compute
from compaction.models import Summary

log = structlog.get_logger(__name__)

# Rows per keyset page when walking history newest-first (ids and counts only, no text).
HISTORY_PAGE_SIZE = 500


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
    index_line_tokens: list[int]
    history_totals: HistoryTotals  # unpinned history, excluding the new message

    @property
    def parts(self) -> dict[str, int]:
        return {
            "system": self.system_tokens,
            "pinned": sum(p.tokens for p in self.pinned),
            "summaries": sum(s.tokens for s in self.summaries),
            "memory_index": sum(self.index_line_tokens),
            "history": self.history_totals.tokens
            + (self.new_message.tokens if self.new_message else 0),
        }

    @property
    def pressure(self) -> int:
        """Tokens of everything the next call would send, with nothing dropped (CONTRACT §5)."""
        return sum(self.parts.values())


@dataclass(frozen=True)
class BuiltContext:
    messages: list[dict[str, Any]]
    measure: Measure
    admission: Admission


@lru_cache(maxsize=256)
def _system_tokens(prompt: str, model: str) -> int:
    return count_message_tokens(prompt, model=model) if prompt else 0


def bot_budget(bot: Bot) -> Budget:
    """CONTRACT §5: W from the bot, else litellm's model info, else the absolute cap."""
    model_max = None if bot.context_window else gateway.model_max_input_tokens(bot.model)
    return budget_compute(
        context_window=bot.context_window,
        model_max_input_tokens=model_max,
        max_output_tokens=bot.max_output_tokens,
        compaction_threshold=bot.compaction_threshold,
        compaction_kept_percent=bot.compaction_kept_percent,
        absolute_cap=settings.CONTEXT_ABSOLUTE_CAP_TOKENS,
    )


def _in_context(session: ChatSession, before_seq: int):
    return Message.objects.filter(Message.in_context_q(), session=session, seq__lt=before_seq)


def context_measure(
    *, session: ChatSession, new_message: Message | None = None, before_seq: int | None = None
) -> Measure:
    """Stored token counts of every part of the next call. Bounded queries, no message text."""
    bot = session.bot
    if before_seq is None:
        before_seq = new_message.seq + 1 if new_message else session.last_seq + 1
    new_entry = Entry(id=new_message.pk, tokens=new_message.token_count) if new_message else None
    pinned = [
        PinnedEntry(id=pk, seq=seq, tokens=tokens)
        for pk, seq, tokens in _in_context(session, before_seq)
        .filter(pinned=True)
        .exclude(pk=new_entry.id if new_entry else None)
        .order_by("seq")
        .values_list("pk", "seq", "token_count")
    ]
    excluded_tokens = sum(p.tokens for p in pinned) + (new_entry.tokens if new_entry else 0)
    excluded_count = len(pinned) + (1 if new_entry else 0)
    # Messages written after before_seq (a later send racing this turn) are in the running totals
    # too; they are few and only make the estimate cautious, never the selection larger.
    totals = HistoryTotals(
        count=max(0, session.context_messages - excluded_count),
        tokens=max(0, session.context_tokens - excluded_tokens),
    )
    summaries = [
        Entry(id=pk, tokens=tokens)
        for pk, tokens in Summary.objects.filter(session=session, status=Summary.Status.ACTIVE)
        .order_by("first_seq")
        .values_list("pk", "token_count")
    ]
    return Measure(
        session=session,
        budget=bot_budget(bot),
        before_seq=before_seq,
        system_tokens=_system_tokens(bot.system_prompt, bot.model),
        new_message=new_entry,
        pinned=pinned,
        summaries=summaries,
        index_line_tokens=[],
        history_totals=totals,
    )


def _history_newest_first(measure: Measure) -> Iterator[HistoryRow]:
    """Unpinned history as (ids, counts), newest first, in keyset pages; stops when not pulled."""
    rows = (
        _in_context(measure.session, measure.before_seq)
        .filter(pinned=False)
        .order_by("-seq")
        .values_list("pk", "seq", "token_count", "role", "tool_call_id", "tool_calls")
    )
    cursor = measure.before_seq
    while True:
        page = list(rows.filter(seq__lt=cursor)[:HISTORY_PAGE_SIZE])
        for pk, seq, tokens, role, tool_call_id, tool_calls in page:
            yield HistoryRow(
                id=pk,
                seq=seq,
                tokens=tokens,
                role=role,
                tool_call_id=tool_call_id or None,
                tool_call_ids=tuple(c.get("id", "") for c in tool_calls or ()),
            )
        if len(page) < HISTORY_PAGE_SIZE:
            return
        cursor = page[-1][1]


def _decide(measure: Measure, history: Iterator[HistoryRow] | tuple[()]) -> Admission:
    return admission_decide(
        budget=measure.budget.budget,
        system_tokens=measure.system_tokens,
        new_message=measure.new_message,
        pinned=measure.pinned,
        summaries=measure.summaries,
        index_line_tokens=measure.index_line_tokens,
        history_newest_first=history,
        history_totals=measure.history_totals,
    )


def context_precheck(measure: Measure, *, path: str) -> None:
    """Refuse early, reading no history, when the fixed part alone exceeds the budget.

    The send path uses it so an oversized message fails at once (422 / message.failed) instead of
    occupying a worker; the turn re-checks through ``context_admit`` with the same rule.
    """
    admission = _decide(measure, ())
    if admission.decision == "reject":
        _reject(measure, admission, path=path)


def _reject(measure: Measure, admission: Admission, *, path: str) -> None:
    fields = _log_fields(measure, admission, path=path)
    log.info("context_admission", **fields)
    log.warning("context_admission_rejected", **fields)
    ChatSession.objects.filter(pk=measure.session.pk).update(last_admission=fields)
    raise ContextTooLarge(
        "This message, with the system prompt and pinned messages, does not fit in the "
        f"bot's context budget of {measure.budget.budget:,} tokens.",
        details={
            "budget_tokens": measure.budget.budget,
            "required_tokens": measure.system_tokens
            + sum(p.tokens for p in measure.pinned)
            + sum(s.tokens for s in measure.summaries)
            + (measure.new_message.tokens if measure.new_message else 0),
        },
    )


def _log_fields(measure: Measure, admission: Admission, *, path: str) -> dict[str, Any]:
    return {
        "session_id": measure.session.pk,
        "bot_id": measure.session.bot_id,
        **admission.log_fields(),
        "path": path,
    }


def context_admit(measure: Measure, *, path: str) -> Admission:
    """Decide what the call carries (CONTRACT §7) and log it; raise on reject."""
    admission = _decide(measure, _history_newest_first(measure))
    if admission.decision == "reject":
        _reject(measure, admission, path=path)
    session = measure.session
    fields = _log_fields(measure, admission, path=path)
    log.info("context_admission", **fields)
    ChatSession.objects.filter(pk=session.pk).update(last_admission=fields)
    return admission


def _render(message: Message) -> dict[str, Any]:
    rendered: dict[str, Any] = {"role": message.role, "content": message.content}
    if message.role == Message.Role.ASSISTANT and message.tool_calls:
        rendered["tool_calls"] = message.tool_calls
    if message.role == Message.Role.TOOL:
        rendered["tool_call_id"] = message.tool_call_id
    return rendered


def context_build(*, session: ChatSession, reply: Message, path: str = "turn") -> BuiltContext:
    """The messages for the model call that produces ``reply``.

    Raises ``ContextTooLarge`` when the system prompt, the new message, pins and summaries alone
    exceed the budget: nothing is sent.
    """
    new_message = reply.reply_to
    measure = context_measure(session=session, new_message=new_message, before_seq=reply.seq)
    if (
        session.bot.compaction_enabled
        and measure.budget.hard
        and (measure.pressure >= measure.budget.hard)
    ):
        from compaction.engine import compaction_hard  # the engine builds on this module

        compaction_hard(session=session, measure=measure)
        session.refresh_from_db(fields=["context_tokens", "context_messages"])
        measure = context_measure(session=session, new_message=new_message, before_seq=reply.seq)
    admission = context_admit(measure, path=path)
    ids = [p.id for p in measure.pinned] + admission.admitted_history_ids
    if new_message is not None:
        ids.append(new_message.pk)
    chosen = (
        Message.objects.filter(pk__in=ids)
        .order_by("seq")
        .only("role", "content", "tool_calls", "tool_call_id", "seq")
    )
    messages: list[dict[str, Any]] = []
    if session.bot.system_prompt:
        messages.append({"role": "system", "content": session.bot.system_prompt})
    # Summaries are labelled system blocks naming what they cover, never user messages.
    summaries = Summary.objects.filter(pk__in=[s.id for s in measure.summaries]).order_by(
        "first_seq"
    )
    messages.extend({"role": "system", "content": summary.block} for summary in summaries)
    messages.extend(_render(m) for m in chosen)
    return BuiltContext(messages=messages, measure=measure, admission=admission)


def context_report(*, session: ChatSession) -> dict[str, Any]:
    """What the next call would carry: the numbers behind the context meter (CONTRACT §11)."""
    from compaction.engine import compaction_blocked_until
    from compaction.lock import in_flight

    session.refresh_from_db(fields=["context_tokens", "context_messages", "last_admission"])
    measure = context_measure(session=session)
    budget = measure.budget
    cooldown_until = compaction_blocked_until(session.pk, hard=False)
    return {
        "window": budget.window,
        "reserve": budget.reserve,
        "budget": budget.budget,
        "soft": budget.soft,
        "hard": budget.hard,
        "target": budget.target,
        "pressure": measure.pressure,
        "parts": measure.parts,
        "last_admission": session.last_admission,
        "compaction": {
            "enabled": session.bot.compaction_enabled,
            "in_flight": in_flight(session.pk),
            "cooldown_until": cooldown_until.isoformat().replace("+00:00", "Z")
            if cooldown_until
            else None,
        },
    }
