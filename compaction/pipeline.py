"""THE context pipeline: the one function that turns a session into the messages a model gets.

measure (``compaction.measure``: stored token counts only) -> [compact if hard: the compaction
engine] -> admit -> render.
The chat turn, recall re-invocations, the context report and the tests all come through here.

Text is loaded only for what can be sent. When the session's running totals say the whole
history fits, admission will take every candidate, so the history is read once, with its text
(admission still decides on the rows as read). Otherwise it is read newest first, in bounded
keyset pages of (id, seq, token_count, role, tool ids), and only until the first row that does
not fit; then text is fetched for what admission chose alone (the admitted run as a seq range,
pins and the new message by id; other rows of that range, such as failed replies, never reach
the model). Pressure comes from the session's running totals, so neither time nor memory grows
with the length of a conversation that does not fit.
"""

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from django.db.models import Q
from django.utils import timezone

from attachments.queries import images_for_messages
from attachments.services import IMAGE_MARKER
from bots.models import ChatSession, Message
from chat_platform.errors import ContextTooLarge
from chat_platform.isotime import iso_utc
from chat_platform.llm import gateway
from chat_platform.llm.recall_protocol import INDEX_HEADER, INDEX_HELP
from chat_platform.llm.tokens import count_message_tokens
from compaction.admission import Admission, HistoryRow, admission_decide
from compaction.engine import blocked_moment, compaction_blocked_until, compaction_hard
from compaction.lock import in_flight
from compaction.measure import (
    HISTORY_PAGE_SIZE,
    Measure,
    RoomView,
    bot_budget,
    context_measure,
    history_newest_first,
    history_row,
    in_context_before,
    seat_key,
    session_budget,
    system_part_tokens,
    tool_calls_load,
    tool_calls_text,
)
from compaction.models import ContextExpansion, SeatState, Summary
from compaction.provenance import (
    ChosenRow,
    admission_info,
    part,
    prompt_version,
    row_parts,
    trimmed_history_part,
)
from compaction.results import RunResult
from memory.queries import IndexLine

# Re-exported: callers that only build or report contexts need not know the measure module.
__all__ = [
    "HISTORY_PAGE_SIZE",
    "BuiltContext",
    "admission_record",
    "Measure",
    "bot_budget",
    "session_budget",
    "context_admit",
    "context_build",
    "context_fixed_fits",
    "context_measure",
    "context_precheck",
    "context_report",
    "context_bot",
    "seat_key",
]

log = structlog.get_logger(__name__)


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
        admission_record(self.measure, self.admission, path=self.path)


def _decide(measure: Measure, history: Iterable[HistoryRow]) -> Admission:
    return admission_decide(
        budget=measure.budget.budget,
        system_tokens=measure.system_tokens,
        new_message=measure.new_message,
        # An expanded span is sent whole, like pins (and is never part of the history).
        pinned=[*measure.pinned, *measure.expanded],
        summaries=measure.summaries,
        index_line_tokens=measure.index_line_tokens,
        index_block_tokens=measure.index_block_tokens,
        history_newest_first=history,
        history_totals=measure.history_totals,
        recalled=measure.recalled,
    )


def context_fixed_fits(measure: Measure) -> bool:
    """Do the system prompt, the new message, the recalled material, pins and summaries fit the
    budget? Only they can make a call impossible: the memory index and history are shortened
    to whatever room is left, so a measure taken without the index answers this too."""
    return _decide(measure, ()).decision != "reject"


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
    _last_admission_store(measure.session, fields)
    budget = measure.budget.budget
    recalled = sum(r.tokens for r in measure.recalled)
    details = {"budget_tokens": budget, "required_tokens": measure.fixed_tokens}
    if recalled and measure.fixed_tokens - recalled <= budget:
        # The user's message fits: what overflows is this turn's recall exchange (e.g. a model
        # that asked for thousands of records in one call). Say so instead of blaming the message.
        details["recalled_tokens"] = recalled
        raise ContextTooLarge(
            "The model's requests to read or search records, with what they returned, take "
            f"{recalled:,} tokens and do not fit in the bot's context budget of {budget:,} "
            "tokens. Your message itself fits.",
            details=details,
        )
    raise ContextTooLarge(
        "This message, with the system prompt and pinned messages, does not fit in the "
        f"bot's context budget of {budget:,} tokens.",
        details=details,
    )


def _log_fields(measure: Measure, admission: Admission, *, path: str) -> dict[str, Any]:
    return {
        "session_id": measure.session.pk,
        "bot_id": measure.session.bot_id,
        **admission.log_fields(),
        "path": path,
    }


def context_admit(
    measure: Measure,
    *,
    path: str,
    record: bool = True,
    history: Iterable[HistoryRow] | None = None,
) -> Admission:
    """Decide what the call carries (docs/compaction.md) and record it (``admission_record``); raise
    on reject, which is always recorded at once. ``record=False`` leaves recording an admitted call
    to the caller. ``history`` (newest first) is the history already read; else it is walked in
    keyset pages."""
    admission = _decide(measure, history_newest_first(measure) if history is None else history)
    if admission.decision == "reject":
        _reject(measure, admission, path=path)
    if record:
        admission_record(measure, admission, path=path)
    return admission


def admission_record(measure: Measure, admission: Admission, *, path: str) -> None:
    """The ``context_admission`` event, and the same fields as the session's ``last_admission``
    (the context report shows them)."""
    fields = _log_fields(measure, admission, path=path)
    log.info("context_admission", **fields)
    _last_admission_store(measure.session, fields)


def _last_admission_store(session: ChatSession, fields: dict[str, Any]) -> None:
    """The session's ``last_admission``; in a room, the bot's own (its seat's context report)."""
    key = seat_key(session)
    if key is None:
        ChatSession.objects.filter(pk=session.pk).update(last_admission=fields)
        return
    # One conditional UPDATE of that field; the seat's first admission creates its row.
    if not SeatState.objects.filter(session_id=session.pk, bot_id=key).update(
        last_admission=fields, updated_at=timezone.now()
    ):
        SeatState.objects.update_or_create(
            session_id=session.pk, bot_id=key, defaults={"last_admission": fields}
        )


# Rendered from the first six; the seq names the row in the call's provenance.
CHOSEN_FIELDS = ("pk", "role", "content", "calls", "tool_call_id", "bot_id", "seq")


def _fits_whole(measure: Measure) -> bool:
    """Do the running totals say the whole history fits, with everything else? Then admission
    will take every candidate, so their text is read with their counts (one query)."""
    return measure.pressure <= measure.budget.budget


def _whole_history(
    measure: Measure, new_message: Message | None
) -> tuple[list[HistoryRow], dict[int, tuple[Any, ...]]]:
    """Every candidate with its text, when the whole history fits (``_fits_whole``): the history
    rows for admission, newest first, and ``CHOSEN_FIELDS`` tuples by id for rendering (pins,
    the recalled exchange and the new message included).

    The running totals are read before the rows: if a concurrent turn made the history grow past
    the budget meanwhile, admission still decides on the rows read, and trims."""
    outside = _sent_whole_ids(measure, new_message)
    where = in_context_before(measure.session, measure.before_seq, measure.room)
    if outside:
        where |= Q(pk__in=outside)
    rows = (
        Message.objects.filter(where)
        .annotate(calls=tool_calls_text())
        .order_by("-seq")
        .values_list(*CHOSEN_FIELDS, "token_count", "pinned")
    )
    history: list[HistoryRow] = []
    texts: dict[int, tuple[Any, ...]] = {}
    room = measure.room
    for pk, role, content, calls, tool_call_id, bot_id, seq, tokens, pinned in rows:
        texts[pk] = (pk, role, content, calls, tool_call_id, bot_id, seq)
        if not pinned and pk not in outside:
            history.append(history_row(pk, seq, tokens, role, tool_call_id, calls, room, bot_id))
    return history, texts


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


def _chosen_from(
    texts: dict[int, tuple[Any, ...]],
    measure: Measure,
    admission: Admission,
    new_message: Message | None,
) -> list[tuple[Any, ...]]:
    """What admission chose, in seq order, from rows already read (``_whole_history``: newest
    first, so reversed)."""
    wanted = _chosen_ids(measure, admission, new_message)
    return [row for pk, row in reversed(texts.items()) if pk in wanted]


def _chosen_rows(
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


def _images_of(session: ChatSession, chosen: list[tuple[Any, ...]]) -> dict[int, list[str]]:
    """The images attached to the chosen user messages, as data URLs, when the chat's model
    accepts images (else the message's marker line is all it reads). Counted already: the
    message's stored token count includes them (``attachments.services``). One query, and
    only when a chosen message names an image."""
    named = {
        row[0]: row[2] for row in chosen if row[1] == Message.Role.USER and IMAGE_MARKER in row[2]
    }
    if not named or not gateway.model_supports_images(session.chat_model):
        return {}
    return images_for_messages(user_id=session.user_id, contents=named)


def _with_images(text: str, images: Sequence[str]) -> str | list[dict[str, Any]]:
    """OpenAI image content parts after the text, or the text alone."""
    if not images:
        return text
    return [
        {"type": "text", "text": text},
        *({"type": "image_url", "image_url": {"url": url}} for url in images),
    ]


def render_row(
    row: tuple[Any, ...], room: RoomView | None = None, images: Sequence[str] = ()
) -> dict[str, Any]:
    _, role, content, calls, tool_call_id, bot_id = row[:6]
    if room is not None and not (role == Message.Role.ASSISTANT and bot_id == room.bot_id):
        if role == Message.Role.TOOL or (
            role == Message.Role.ASSISTANT and calls not in (None, "[]")
        ):
            pass  # this bot's own recall exchange (others' never reach it: RoomView.where)
        else:
            # Another speaker (the user, another bot): a named user message (docs/rooms.md).
            slug, name = room.speakers.get(
                None if role == Message.Role.USER else bot_id, ("bot", "Another bot")
            )
            return {
                "role": "user",
                "name": slug,
                "content": _with_images(f"{name}: {content}", images),
            }
    rendered: dict[str, Any] = {"role": role, "content": _with_images(content, images)}
    tool_calls = tool_calls_load(calls) if role == Message.Role.ASSISTANT else []
    if tool_calls:
        rendered["tool_calls"] = tool_calls
    if role == Message.Role.TOOL:
        rendered["tool_call_id"] = tool_call_id
    return rendered


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
) -> BuiltContext:
    """The messages for the model call that produces ``reply``.

    ``extra_system`` is a system part of this call only (an API client's ``system`` message):
    sent right after the bot's system prompt, counted in the fixed part (so it is kept whole
    for the call, like the prompt, and never compacted: it is not stored as history).

    ``tools_tokens``: what the call's tool schemas cost (the platform's recall tools while
    recall is open, an API client's on every call; ``count_tools_tokens``): they go with the
    call, so they count in the fixed part like ``extra_system``.

    ``recalled`` is the turn's recall exchange so far (stored ``tool`` messages: the model's
    requests and the records it got back). It is the only way recalled material reaches a model:
    counted in the budget, sent whole after the new message, never trimmed away.

    ``recall_open`` says whether the model may still ask for records on this call: when not
    (recall disabled, or its rounds used up) the index block carries no invitation to ask.

    Raises ``ContextTooLarge`` when the system prompt, the new message, the recalled material,
    pins and summaries alone exceed the budget: nothing is sent.

    ``record=False``: the admission is decided but not yet logged or stored; the caller calls
    ``record_admission()`` on the result. The chat turn does so once the provider has taken the
    request, so that write is not on the way to the first token.
    """
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
    )
    waited: dict[str, Any] | None = None
    if session.bot.compaction_enabled and measure.budget.hard_due(measure.pressure):
        waited = _waited(compaction_hard(session=session, measure=measure))
        session.refresh_from_db(fields=["context_tokens", "context_messages"])
        measure = context_measure(
            session=session,
            new_message=new_message,
            before_seq=reply.seq,
            recalled=recalled,
            extra_system=extra_system,
            tools_tokens=tools_tokens,
            expand_for=expand_for,
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
            ),
        )
    history_tokens: dict[int, int] = {}  # id -> tokens of every history row admission read
    if _fits_whole(measure):
        history, texts = _whole_history(measure, new_message)
        history_tokens.update((row.id, row.tokens) for row in history)
        admission = context_admit(measure, path=path, record=record, history=history)
        chosen = _chosen_from(texts, measure, admission, new_message)
    else:
        admission = context_admit(
            measure,
            path=path,
            record=record,
            history=_tapped(history_newest_first(measure), history_tokens),
        )
        chosen = _chosen_rows(measure, admission, new_message)
    model = session.chat_model
    messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    bot = session.bot
    if bot.system_prompt:
        messages.append({"role": "system", "content": bot.system_prompt})
        parts.append(
            part(
                "system",
                {"bot": bot.pk, "version": prompt_version(bot.system_prompt)},
                system_part_tokens(bot.system_prompt, model=model),
            )
        )
    if session.extra_instruction:
        messages.append({"role": "system", "content": session.extra_instruction})
        parts.append(
            part(
                "system",
                {"chat_instruction": session.extra_instruction},
                system_part_tokens(session.extra_instruction, model=model),
            )
        )
    if measure.room is not None:
        messages.append({"role": "system", "content": measure.room.header})
        parts.append(
            part(
                "room",
                {
                    "bot": measure.room.bot_id,
                    "header": measure.room.header,
                    "speakers": {
                        "user" if key is None else str(key): [slug, name]
                        for key, (slug, name) in measure.room.speakers.items()
                    },
                },
                system_part_tokens(measure.room.header, model=model),
            )
        )
    if extra_system:
        messages.append({"role": "system", "content": extra_system})
        parts.append(
            part(
                "client_system",
                {"text": extra_system},
                system_part_tokens(extra_system, model=model),
            )
        )
    # Summaries are labelled system blocks naming what they cover, never user messages.
    summary_tokens = {s.id: s.tokens for s in measure.summaries}
    summaries = Summary.objects.filter(pk__in=list(summary_tokens)).order_by("first_seq")
    for summary in summaries:
        messages.append({"role": "system", "content": summary.block})
        parts.append(
            part(
                "summary",
                {
                    "id": summary.pk,
                    "level": summary.level,
                    "seqs": [summary.first_seq, summary.last_seq],
                },
                summary_tokens[summary.pk],
            )
        )
    index_block, index_lines = _index_block(measure, admission, recall_open=recall_open)
    if index_block:
        messages.append({"role": "system", "content": index_block})
        kept_lines = measure.index_lines[: admission.kept_index_lines]
        parts.append(
            part(
                "memory_index",
                # The lines as rendered (a record's description can change later); the block's
                # header and help line are fixed text (``index_block_render``).
                {
                    "names": [line.name for line in index_lines],
                    "lines": [line.text for line in index_lines],
                    "help": recall_open,
                },
                measure.index_block_tokens + sum(line.tokens for line in kept_lines),
            )
        )
    images = _images_of(session, chosen)
    messages.extend(render_row(m, measure.room, images.get(m[0], ())) for m in chosen)
    dropped_tokens = max(
        0,
        measure.history_totals.tokens
        - sum(history_tokens.get(i, 0) for i in admission.admitted_history_ids),
    )
    trimmed = trimmed_history_part(admission, dropped_tokens=dropped_tokens)
    if trimmed is not None:
        parts.append(trimmed)
    parts.extend(row_parts(_provenance_rows(measure, chosen, history_tokens, new_message, images)))
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
    )


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
    if measure.expanded and not context_fixed_fits(measure):
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


def _tapped(rows: Iterator[HistoryRow], seen: dict[int, int]) -> Iterator[HistoryRow]:
    """The lazily read history, noting each row's tokens as admission pulls it (no more rows
    than admission reads: the provenance of what it admitted)."""
    for row in rows:
        seen[row.id] = row.tokens
        yield row


def _provenance_rows(
    measure: Measure,
    chosen: list[tuple[Any, ...]],
    history_tokens: dict[int, int],
    new_message: Message | None,
    images: dict[int, list[str]],
) -> list[ChosenRow]:
    """Each rendered row with what it is and what admission counted for it."""
    pinned = {p.id: p.tokens for p in measure.pinned}
    recalled = {r.id: r.tokens for r in measure.recalled}
    expanded = {e.id: e.tokens for e in measure.expanded}
    new_id = new_message.pk if new_message is not None else None
    rows = []
    for row in chosen:
        pk, calls, seq = row[0], row[3], row[6]
        if pk == new_id and measure.new_message is not None:
            kind, tokens = "user", measure.new_message.tokens
        elif pk in recalled:
            kind, tokens = "recalled", recalled[pk]
        elif pk in pinned:
            kind, tokens = "pinned", pinned[pk]
        elif pk in expanded:
            # A compacted span sent verbatim for this reply: history, named by its record.
            kind, tokens = "history", expanded[pk]
        else:
            kind, tokens = "history", history_tokens.get(pk, 0)
        rows.append(
            ChosenRow(
                id=pk,
                seq=seq,
                kind=kind,
                tokens=tokens,
                calls=calls,
                image=pk in images,
                expanded=measure.expanded_record if pk in expanded else "",
            )
        )
    return rows


def index_block_render(lines: Sequence[str], *, recall_open: bool) -> str:
    """The index block from its lines: the header, the help line while the model may still ask
    for records, then one line per record."""
    head = f"{INDEX_HEADER}\n{INDEX_HELP}\n" if recall_open else f"{INDEX_HEADER}\n"
    return head + "\n".join(lines)


def _index_block(
    measure: Measure, admission: Admission, *, recall_open: bool
) -> tuple[str, list[IndexLine]]:
    """The index as a system block (after summaries, before history; docs/memory.md), newest first,
    with the lines admission kept, and those lines. Tokens of joined text can exceed the sum of
    its parts by a merge or two: drop further lines until the block costs no more than
    admission reserved."""
    kept = list(measure.index_lines[: admission.kept_index_lines])
    model = measure.session.chat_model
    while kept:
        # Reserved with the help line; without it (recall closed) the block only costs less.
        block = index_block_render([line.text for line in kept], recall_open=recall_open)
        reserved = measure.index_block_tokens + sum(line.tokens for line in kept)
        if count_message_tokens(block, model=model) <= reserved:
            return block, kept
        kept.pop()
    return "", []


@dataclass(frozen=True)
class ContextState:
    """The session's context as measured now, with compaction's own state: what the meter shows
    and what decides a soft compaction, read once for both."""

    session: ChatSession
    measure: Measure
    cooldown_until: Any  # datetime | None: when automatic compaction may run again
    in_flight: bool
    last_admission: Any = None


def context_state(*, session: ChatSession) -> ContextState:
    """In a room, ``session`` is a bot's seat (``bots.queries.session_seat``): the state is that
    bot's own — its measure, cool-down, lease and last admission (docs/rooms.md)."""
    session.refresh_from_db(
        fields=["context_tokens", "context_messages", "last_admission", "last_seq"]
    )
    key = seat_key(session)
    measure = context_measure(session=session)
    room = measure.room
    if room is None:
        last_admission = session.last_admission
        cooldown_until = compaction_blocked_until(session.pk, hard=False)
    else:
        # The seat's row was read with its totals by the measure: no second read of it.
        last_admission = room.last_admission
        cooldown_until = blocked_moment(
            backoff_until=room.backoff_until, cooldown_until=room.cooldown_until, hard=False
        )
    return ContextState(
        session=session,
        measure=measure,
        cooldown_until=cooldown_until,
        in_flight=in_flight(session.pk, key),
        last_admission=last_admission,
    )


def context_bot(session: ChatSession) -> dict[str, Any] | None:
    """The bot a room's context report and frames concern; None in a one-bot session."""
    if not session.is_room:
        return None
    bot = session.bot
    return {"id": bot.pk, "slug": bot.slug, "name": bot.name}


def soft_compaction_due(state: ContextState) -> bool:
    """The soft trigger (docs/compaction.md): compaction on, pressure at or past S, no cool-down and
    no run in flight. The one place that says so; the turn asks it after every reply."""
    return bool(
        state.session.bot.compaction_enabled
        and state.measure.budget.soft_due(state.measure.pressure)
        and state.cooldown_until is None
        and not state.in_flight
    )


def context_report(*, session: ChatSession, state: ContextState | None = None) -> dict[str, Any]:
    """What the next call would carry: the numbers behind the context meter (docs/api.md)."""
    if state is None:
        state = context_state(session=session)
    measure = state.measure
    budget = measure.budget
    # With compaction off no threshold acts (admission alone keeps a call within B): the marks
    # are null, so a meter draws none and never says compaction is due (docs/api.md).
    enabled = session.bot.compaction_enabled
    return {
        "window": budget.window,
        "reserve": budget.reserve,
        "budget": budget.budget,
        "soft": budget.soft if enabled else None,
        "hard": budget.hard if enabled else None,
        "target": budget.target if enabled else None,
        "pressure": measure.pressure,
        "parts": measure.parts,
        "last_admission": state.last_admission,
        "compaction": {
            "enabled": enabled,
            "in_flight": state.in_flight,
            "cooldown_until": iso_utc(state.cooldown_until),
        },
    }
