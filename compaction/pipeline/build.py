"""The context build: the messages for one model call — measure, compact if hard, settle a
pending expansion, admit, render (see the package doc)."""

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import structlog

from bots.models import ChatSession, Message
from chat_platform.compiled import CompiledValues
from compaction.admission import Admission
from compaction.engine import compaction_hard
from compaction.measure import Measure, context_measure
from compaction.models import ContextExpansion
from compaction.pipeline import admit, render
from compaction.pipeline import history as history_read
from compaction.provenance import admission_info, row_parts, trimmed_history_part
from compaction.results import RunResult
from compaction.seats import in_context

log = structlog.get_logger("compaction.pipeline")


@dataclass(frozen=True)
class BuiltContext:
    messages: list[dict[str, Any]]
    measure: Measure
    admission: Admission
    path: str = "turn"
    # Provenance (docs/context-records.md): the ordered parts the messages were rendered from, with
    # their token counts (``compaction.provenance``), and what admission trimmed and why.
    parts: tuple[dict[str, Any], ...] = ()
    admission_info: dict[str, Any] | None = None
    # The hard compaction this call waited for: {"event": id | None, "outcome"}; None if none.
    waited_for_compaction: dict[str, Any] | None = None
    # After the hard compaction this call waited for: whether each ``recalled`` message is still
    # in context (id -> bool), read once; the tool loop settles its rounds by it
    # (``turns.recall_loop``) rather than asking again. Empty when nothing was compacted.
    recalled_alive: dict[int, bool] = field(default_factory=dict)

    @property
    def recall_live_before(self) -> int:
        """Recall searches the session's live (uncompacted) history below this seq: the message
        this call answers. Not only what admission left out: the request after a recall round
        carries the results whole and history makes room for them, oldest first, so what this
        request shows may be gone from the next (``memory.queries.records_search``)."""
        measure = self.measure
        return measure.before_seq - 1 if measure.new_message is not None else measure.before_seq

    def record_admission(self) -> None:
        """Log the decision and keep it as the session's ``last_admission`` (see
        ``context_build(record=False)``)."""
        admit.admission_record(self.measure, self.admission, path=self.path)


def context_build(
    *,
    session: ChatSession,
    reply: Message,
    recalled: Sequence[Message] = (),
    recall_open: bool = True,
    path: str = "turn",
    record: bool = True,
    extra_system: str = "",
    tools_tokens: int = 0,
    compact_within: tuple[int, int] | None = None,
    reserve_tokens: int = 0,
) -> BuiltContext:
    """The messages for the model call that produces ``reply``.

    ``extra_system`` is a system part of this call only (an API client's ``system`` message):
    sent right after the bot's system prompt, counted in the fixed part (so it is kept whole
    for the call, like the prompt, and never compacted: it is not stored as history).

    ``tools_tokens``: what the call's tool schemas cost (the platform's recall tools while
    recall is open, an API client's on every call; ``count_tools_tokens``): they go with the
    call, so they count in the fixed part like ``extra_system``; ``reserve_tokens``: those sent
    uncounted (``Measure.reserve_tokens``).

    ``recalled`` is the turn's recall exchange so far (stored ``tool`` messages: the model's
    requests and the records it got back). It is the only way recalled material reaches a model:
    counted in the budget, sent whole after the new message, never trimmed away.

    ``compact_within``: the (first, last) seqs of the reply's earlier tool rounds, which a hard
    compaction before this call may take (trigger ``tool``; docs/tools.md, "Compaction inside
    a reply"). What it took leaves ``recalled``: its summary stands in for it.

    ``recall_open``: whether the model may still ask for records on this call (when not, the
    index block carries no invitation to ask). Raises ``ContextTooLarge`` when the system
    prompt, the new message, the recalled material, pins and summaries alone exceed the budget:
    nothing is sent. ``record=False``: the admission is decided but not yet logged or stored;
    the caller calls ``record_admission()`` on the result (the chat turn, once the provider has
    taken the request: that write is not on the way to the first token).
    """
    new_message = reply.reply_to
    measure, waited, recalled_alive = _measured(
        session=session,
        reply=reply,
        recalled=recalled,
        extra_system=extra_system,
        tools_tokens=tools_tokens,
        compact_within=compact_within,
        reserve_tokens=reserve_tokens,
    )
    history_tokens: dict[int, int] = {}  # id -> tokens of every history row admission read
    admission, chosen = _admitted(
        measure, new_message, history_tokens=history_tokens, path=path, record=record
    )
    messages, parts = render.system_parts(session, measure, extra_system=extra_system)
    render.summary_parts(measure, messages, parts)
    render.index_part(measure, admission, messages, parts, recall_open=recall_open)
    images = render.images_of(session, chosen)
    messages.extend(render.render_row(m, measure.room, images.get(m[0], ())) for m in chosen)
    dropped_tokens = max(
        0,
        measure.history_totals.tokens
        - sum(history_tokens.get(i, 0) for i in admission.admitted_history_ids),
    )
    if (trimmed := trimmed_history_part(admission, dropped_tokens=dropped_tokens)) is not None:
        parts.append(trimmed)
    parts.extend(
        row_parts(render.provenance_rows(measure, chosen, history_tokens, new_message, images))
    )
    return BuiltContext(
        messages=messages,
        measure=measure,
        admission=admission,
        path=path,
        parts=tuple(parts),
        admission_info=admission_info(
            admission, index_lines=len(measure.index_lines), dropped_tokens=dropped_tokens
        ),
        waited_for_compaction=waited,
        recalled_alive=recalled_alive,
    )


def _admitted(
    measure: Measure,
    new_message: Message | None,
    *,
    history_tokens: dict[int, int],
    path: str,
    record: bool,
) -> tuple[Admission, list[tuple[Any, ...]]]:
    """Admission over the history (read whole with its text when the totals say it fits, else
    walked newest first), and the text of what it chose; ``history_tokens`` gets the tokens of
    every row admission read."""
    if history_read.fits_whole(measure):
        history, texts = history_read.whole_history(measure, new_message)
        history_tokens.update((row.id, row.tokens) for row in history)
        admission = admit.context_admit(measure, path=path, record=record, history=history)
        return admission, history_read.chosen_from(texts, measure, admission, new_message)
    admission = admit.context_admit(
        measure,
        path=path,
        record=record,
        history=history_read.tapped(history_read.history_newest_first(measure), history_tokens),
    )
    return admission, history_read.chosen_rows(measure, admission, new_message)


def _measured(
    *,
    session: ChatSession,
    reply: Message,
    recalled: Sequence[Message],
    extra_system: str,
    tools_tokens: int,
    compact_within: tuple[int, int] | None = None,
    reserve_tokens: int = 0,
) -> tuple[Measure, dict[str, Any] | None, dict[int, bool]]:
    """The call's measure, after a hard compaction it waited for (and what that was, and which
    of ``recalled`` it left in context) and with the seat's pending expansion settled."""
    new_message = reply.reply_to
    expand_for: int | None = reply.pk
    measure = context_measure(
        session=session,
        new_message=new_message,
        before_seq=reply.seq,
        recalled=recalled,
        extra_system=extra_system,
        tools_tokens=tools_tokens,
        expand_for=expand_for,
        reserve_tokens=reserve_tokens,
    )
    waited: dict[str, Any] | None = None
    recalled_alive: dict[int, bool] = {}
    if session.bot.compaction_enabled and measure.budget.hard_due(measure.pressure):
        result = compaction_hard(session=session, measure=measure, within=compact_within)
        waited = _waited(result)
        _totals_refresh(session)
        if recalled and compact_within is not None:
            alive = still_in_context(measure, recalled)
            kept = {m.pk for m in alive}
            recalled_alive = {m.pk: m.pk in kept for m in recalled}
            recalled = alive
        measure = context_measure(
            session=session,
            new_message=new_message,
            before_seq=reply.seq,
            recalled=recalled,
            extra_system=extra_system,
            tools_tokens=tools_tokens,
            expand_for=expand_for,
            reserve_tokens=reserve_tokens,
        )
    if measure.expansion is not None:
        measure = _expansion_settle(
            measure,
            reply=reply,
            remeasure=lambda: context_measure(
                session=session,
                new_message=new_message,
                before_seq=reply.seq,
                recalled=recalled,
                extra_system=extra_system,
                tools_tokens=tools_tokens,
                reserve_tokens=reserve_tokens,
            ),
        )
    return measure, waited, recalled_alive


# After every hard compaction a call waited for: compiled once per process (docs/performance.md,
# "The tool task, eighth pass").
_TOTALS = CompiledValues(
    lambda session_id: ChatSession.objects.filter(pk=session_id).values_list(
        "context_tokens", "context_messages"
    ),
    name="session_context_totals",
)


def _totals_refresh(session: ChatSession) -> None:
    """``session.refresh_from_db(fields=["context_tokens", "context_messages"])``."""
    rows = _TOTALS.rows(session_id=session.pk)
    if not rows:
        raise ChatSession.DoesNotExist("ChatSession matching query does not exist.")
    session.context_tokens, session.context_messages = rows[0]


def still_in_context(measure: Measure, messages: Sequence[Message]) -> list[Message]:
    """``messages`` less those a compaction took since they were stored (in a room, as the
    measured seat sees them): one query."""
    if not messages:
        return []
    alive = set(
        in_context(measure.session, measure.before_seq, measure.seat, measure.room)
        .filter(pk__in=[m.pk for m in messages])
        .values_list("pk", flat=True)
    )
    return [m for m in messages if m.pk in alive]


def _expansion_settle(measure: Measure, *, reply: Message, remeasure: Any) -> Measure:
    """A pending expansion is for one reply of its seat (docs/context-records.md): the seat's first
    reply whose context is built claims it and keeps it across its recall rounds; that seat's later
    reply's build deletes it. Only the row of the seat whose reply is being built (``reply``'s
    bot: the measured session's) is claimed or deleted; in a room another bot's pending
    expansion waits for that bot's reply, untouched.
    If the expanded span no longer fits the budget with the fixed part (the chat grew since it
    was asked for), the call goes without it, and the log says so: never more than B."""
    session_id = measure.session.pk
    seat = ContextExpansion.objects.filter(session_id=session_id, bot_id=measure.session.bot_id)
    first_seq, last_seq, claimed = measure.expansion or (0, 0, 0)
    if claimed not in (0, reply.pk):
        seat.exclude(reply_id=reply.pk).delete()
        return measure
    if claimed == 0:
        seat.filter(reply__isnull=True).update(reply=reply)
    if measure.expanded and not admit.context_fixed_fits(measure):
        log.warning(
            "context_expansion_dropped",
            session_id=session_id,
            record=measure.expanded_record,
            expanded_tokens=sum(e.tokens for e in measure.expanded),
            budget_tokens=measure.budget.budget,
        )
        seat.delete()
        return remeasure()
    return measure


def _waited(result: RunResult | None) -> dict[str, Any]:
    """The hard compaction a call waited for, as its record names it. None from the engine: it
    joined a run in flight that did the work (that run's event is its own caller's)."""
    if result is None:
        return {"event": None, "outcome": "joined"}
    event = result.event
    return {"event": event.pk if event is not None else None, "outcome": result.outcome}
