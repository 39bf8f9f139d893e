"""THE context pipeline: the one function that turns a session into the messages a model gets.

measure (stored token counts only) -> [compact if hard: the compaction engine] -> admit -> render.
The chat turn, recall re-invocations, the context report and the tests all come through here.

Nothing here loads message text before admission has chosen the rows: history is read newest
first, in bounded keyset pages of (id, seq, token_count, role, tool ids), and only until the first
row that does not fit; then text is fetched for the chosen ids alone. Pressure comes from the
session's running totals, so neither time nor memory grows with the length of the conversation.
"""

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
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
from memory.queries import IndexLine, memory_index_lines
from memory.recall import INDEX_HEADER, INDEX_HELP

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
    index_lines: list[IndexLine]  # newest first; admission drops from the end
    index_block_tokens: int  # the index block's header and message overhead
    history_totals: HistoryTotals  # unpinned history, excluding the new message and recalled
    # This turn's recall exchange (the model's requests and what it got back): sent whole.
    recalled: list[Entry] = field(default_factory=list)

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
            + sum(r.tokens for r in self.recalled),
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
        )

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


def _index_block_tokens(model: str) -> int:
    return _system_tokens(f"{INDEX_HEADER}\n{INDEX_HELP}\n", model)


def context_measure(
    *,
    session: ChatSession,
    new_message: Message | None = None,
    before_seq: int | None = None,
    recalled: Sequence[Message] = (),
) -> Measure:
    """Stored token counts of every part of the next call. Bounded queries, no message text."""
    bot = session.bot
    if before_seq is None:
        before_seq = new_message.seq + 1 if new_message else session.last_seq + 1
    new_entry = Entry(id=new_message.pk, tokens=new_message.token_count) if new_message else None
    recalled_entries = [Entry(id=m.pk, tokens=m.token_count) for m in recalled]
    pinned = [
        PinnedEntry(id=pk, seq=seq, tokens=tokens)
        for pk, seq, tokens in _in_context(session, before_seq)
        .filter(pinned=True)
        .exclude(pk=new_entry.id if new_entry else None)
        .order_by("seq")
        .values_list("pk", "seq", "token_count")
    ]
    excluded_tokens = (
        sum(p.tokens for p in pinned)
        + (new_entry.tokens if new_entry else 0)
        + sum(r.tokens for r in recalled_entries)
    )
    excluded_count = len(pinned) + (1 if new_entry else 0) + len(recalled_entries)
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
        # memory_index_size = 0 disables the index (and recall with it).
        index_lines=memory_index_lines(session=session, limit=bot.memory_index_size)
        if bot.memory_index_size
        else [],
        index_block_tokens=_index_block_tokens(bot.model),
        history_totals=totals,
        recalled=recalled_entries,
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
        index_block_tokens=measure.index_block_tokens,
        history_newest_first=history,
        history_totals=measure.history_totals,
        recalled=measure.recalled,
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


def context_build(
    *,
    session: ChatSession,
    reply: Message,
    recalled: Sequence[Message] = (),
    path: str = "turn",
) -> BuiltContext:
    """The messages for the model call that produces ``reply``.

    ``recalled`` is the turn's recall exchange so far (stored ``tool`` messages: the model's
    requests and the records it got back). It is the only way recalled material reaches a model:
    counted in the budget, sent whole after the new message, never trimmed away.

    Raises ``ContextTooLarge`` when the system prompt, the new message, the recalled material,
    pins and summaries alone exceed the budget: nothing is sent.
    """
    new_message = reply.reply_to
    measure = context_measure(
        session=session, new_message=new_message, before_seq=reply.seq, recalled=recalled
    )
    if (
        session.bot.compaction_enabled
        and measure.budget.hard
        and (measure.pressure >= measure.budget.hard)
    ):
        from compaction.engine import compaction_hard  # the engine builds on this module

        compaction_hard(session=session, measure=measure)
        session.refresh_from_db(fields=["context_tokens", "context_messages"])
        measure = context_measure(
            session=session, new_message=new_message, before_seq=reply.seq, recalled=recalled
        )
    admission = context_admit(measure, path=path)
    ids = [p.id for p in measure.pinned] + admission.admitted_history_ids
    ids.extend(r.id for r in measure.recalled)
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
    index_block = _index_block(measure, admission)
    if index_block:
        messages.append({"role": "system", "content": index_block})
    messages.extend(_render(m) for m in chosen)
    return BuiltContext(messages=messages, measure=measure, admission=admission)


def _index_block(measure: Measure, admission: Admission) -> str:
    """The index as a system block (after summaries, before history; CONTRACT §10), newest first,
    with the lines admission kept. Tokens of joined text can exceed the sum of its parts by a
    merge or two: drop further lines until the block costs no more than admission reserved."""
    kept = list(measure.index_lines[: admission.kept_index_lines])
    model = measure.session.bot.model
    while kept:
        block = f"{INDEX_HEADER}\n{INDEX_HELP}\n" + "\n".join(line.text for line in kept)
        reserved = measure.index_block_tokens + sum(line.tokens for line in kept)
        if count_message_tokens(block, model=model) <= reserved:
            return block
        kept.pop()
    return ""


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
