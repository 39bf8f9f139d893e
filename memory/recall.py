"""Recall (docs/memory.md): what a model may ask of memory while it answers, and the answers.

The turn (``turns.turn``) runs the loop — at most ``RECALL_MAX_ROUNDS`` rounds, each a model call
through the one context pipeline — and stores every exchange as ``tool`` messages. This module
holds the protocol and does the lookups:

* **tools** for models that call them: ``read_records(names)``, ``search_records(query)``,
  ``save_record(name, description, body, scope?)``;
* **JSON replies** for models that don't: a reply that is exactly
  ``{"read_files": {"files": [...]}}`` or ``{"search_records": {"query": "..."}}``;
* **results** framed as quoted data: ``[record <name>]`` then the body (or an excerpt), or
  ``[not found: <name>]``, ``[no matches]``, ``[saved: <name>]``, ``[not saved: <reason>]``.

Names and queries are data: names are matched against stored names (never a path), queries go
to the full-text search as parameters (never SQL). Only records readable from the session are
visible. Each body is capped at ``READ_BODY_MAX_TOKENS`` and everything recalled in a turn at
the room the caller passes (what is left of the budget B). Every read or search writes a
``RecallEvent``.

What a model sends is untrusted input, checked and cleaned in one place
(``memory.recall_calls``, for tool calls and JSON requests alike) before anything runs or is stored:

* at most ``RECALL_MAX_CALLS`` calls run a round; each further call is answered
  ``[not run: at most 8 tool calls a round]`` (every call gets a result: the protocol needs one
  per call id);
* text PostgreSQL or UTF-8 cannot hold (NUL, lone surrogates; ``chat_platform.textcheck``) is
  dropped from ids, names and arguments; a ``save_record`` whose fields held such text is refused
  (``[not saved: body: …]``), as the records API refuses it;
* ``read_records`` reads the first ``READ_MAX_NAMES`` distinct names and says how many it did
  not; a query is cut to ``QUERY_MAX_CHARS``; a save's body follows the records API's rule (at
  most ``MESSAGE_MAX_BYTES``);
* malformed or oversized arguments, arguments that are not an object, unknown tools and wrong
  types are answered with a result saying what was wrong;
* the transcript keeps a bounded copy of each call (``ToolCall.as_openai``; a call that did not
  run keeps ``{}``), so no call can push the context past its budget;
* an exception in one call becomes a ``[failed: …]`` result and a logged traceback, never a
  failed turn.
"""

from collections.abc import Sequence
from typing import Any

import structlog
from django.conf import settings

from bots.models import ChatSession, Message
from chat_platform.errors import PayloadTooLarge, PlatformError
from chat_platform.llm.recall_protocol import (
    INDEX_HEADER,
    INDEX_HELP,
    READ_TOOL,
    SAVE_TOOL,
    SEARCH_TOOL,
    TOOLS,
)
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from memory import recall_events, services
from memory.queries import records_read, records_search, search_room
from memory.recall_calls import (
    NOT_RUN_TEXT,
    RECALL_MAX_CALLS,
    ToolCall,
    ToolResult,
    calls_from_completion,
    calls_from_text,
    storable,
)

log = structlog.get_logger(__name__)

RECALL_MAX_ROUNDS = 2


# --- answering ----------------------------------------------------------------------------


def _fit(text: str, room: int, *, model: str) -> tuple[str, int]:
    """``text`` cut to what is left of the turn's recall room."""
    tokens = count_tokens(text, model=model)
    if tokens <= room:
        return text, tokens
    marker = "\n[cut: no room left in the context budget]"
    cut = truncate_to_tokens(text, max(0, room - count_tokens(marker, model=model)), model=model)
    text = f"{cut}{marker}" if cut else "[not sent: no room left in the context budget]"
    return text, count_tokens(text, model=model)


def _read(session: ChatSession, call: ToolCall, *, model: str) -> tuple[str, list[str]]:
    """(result, the names found); ``call.arguments["names"]`` holds at most READ_MAX_NAMES."""
    names = call.arguments["names"]
    try:
        reads = records_read(session=session, names=names, model=model)
    except PlatformError as exc:
        return f"[not read: {exc.message}]", []
    parts = []
    for read in reads:
        if read.found:
            parts.append(f"[record {read.name}]\n{read.body}")
        else:
            parts.append(read.not_found_marker)
    if call.note:
        parts.append(call.note)
    return "\n\n".join(parts) or "[not found]", [r.name for r in reads if r.found]


def _search(
    session: ChatSession, call: ToolCall, *, room: int, model: str, live_before: int | None
) -> tuple[str, list[str]]:
    """Whole messages (and info records) that fit what is left of B: the search fills its share
    of ``room`` itself (``search_room``: half, at least ``SEARCH_RESULT_TOKENS`` and at most
    ``SEARCH_RESULT_TOKENS_MAX``), so a hit is never cut mid-message to fit it. History older
    than ``live_before`` (the message the turn answers) is searched too, compacted or not."""
    hits = records_search(
        session=session,
        query=call.arguments["query"],
        budget=search_room(room),
        model=model,
        live_before=live_before,
    )
    if not hits:
        return "[no matches]", []
    body = "\n\n".join(f"{hit.header}\n{hit.excerpt}" for hit in hits)
    return body, [hit.name for hit in hits]


def _reasons(details: Any) -> str:
    if not isinstance(details, dict):
        return ""
    return "; ".join(
        f"{key}: {' '.join(map(str, value))}"
        for key, value in details.items()
        if isinstance(value, list | tuple)
    )


def _save(session: ChatSession, call: ToolCall) -> str:
    args = call.arguments
    try:
        record = services.record_save(
            session=session,
            name=args.get("name"),
            description=args.get("description", ""),
            body=args.get("body"),
            scope=args.get("scope"),
        )
    except PayloadTooLarge:
        size = len(str(args.get("body")).encode("utf-8"))
        return (
            f"[not saved: body: too large ({size:,} bytes); a record body holds at most "
            f"{settings.MESSAGE_MAX_BYTES:,} bytes]"
        )
    except PlatformError as exc:
        return f"[not saved: {_reasons(exc.details) or exc.message}]"
    return f"[saved: {record.name}]"


def _event(
    *,
    session: ChatSession,
    reply: Message,
    recall_round: int,
    call: ToolCall,
    found: list[str],
    tokens: int,
) -> None:
    read = call.name == READ_TOOL
    what = {"names": call.arguments["names"]} if read else {"query": call.arguments["query"]}
    recall_events.recall_event_write(
        session=session,
        message=reply,
        recall_round=recall_round,
        tool="read" if read else "search",
        found=found,
        tokens=tokens,
        **what,
    )


def _answer(
    session: ChatSession,
    reply: Message,
    call: ToolCall,
    *,
    recall_round: int,
    room: int,
    model: str,
    live_before: int | None = None,
) -> tuple[str, int]:
    if call.refusal:
        return _fit(call.refusal, room, model=model)
    if call.name == SAVE_TOOL:
        return _fit(_save(session, call), room, model=model)
    if call.name == READ_TOOL:
        text, found = _read(session, call, model=model)
    else:
        text, found = _search(session, call, room=room, model=model, live_before=live_before)
    text, tokens = _fit(text, room, model=model)
    _event(
        session=session,
        reply=reply,
        recall_round=recall_round,
        call=call,
        found=found,
        tokens=tokens,
    )
    return text, tokens


def _failed(session: ChatSession, reply: Message, call: ToolCall, *, recall_round: int) -> str:
    """A call that raised: logged with its traceback, answered so the model can go on; a read
    or search still leaves its (empty) RecallEvent."""
    log.exception(
        "recall_call_failed",
        session_id=session.pk,
        message_id=reply.pk,
        round=recall_round,
        tool=call.name,
        call_id=call.id,
    )
    text = f"[failed: {call.name} could not run because of an error on our side; answer without it]"
    if call.name in (READ_TOOL, SEARCH_TOOL) and not call.refusal:
        try:
            _event(
                session=session,
                reply=reply,
                recall_round=recall_round,
                call=call,
                found=[],
                tokens=0,
            )
        except Exception:
            log.warning("recall_event_write_failed", message_id=reply.pk, exc_info=True)
    return text


def recall_execute(
    *,
    session: ChatSession,
    reply: Message,
    recall_round: int,
    calls: Sequence[ToolCall],
    room_tokens: int,
    model: str,
    live_before: int | None = None,
) -> list[ToolResult]:
    """Answer one round of the model's (checked) requests, within ``room_tokens`` in all: one
    result per call, whatever happens in any of them. At most ``RECALL_MAX_CALLS`` run.
    ``live_before``: the seq of the message the turn answers (older live history is searched
    too; ``memory.queries.records_search``)."""
    results = []
    room = max(0, room_tokens)
    for index, call in enumerate(calls):
        if index >= RECALL_MAX_CALLS and call.refusal != NOT_RUN_TEXT:
            call = ToolCall(id=call.id, name=call.name, arguments={}, refusal=NOT_RUN_TEXT)
        try:
            text, tokens = _answer(
                session,
                reply,
                call,
                recall_round=recall_round,
                room=room,
                model=model,
                live_before=live_before,
            )
        except Exception:
            failure = _failed(session, reply, call, recall_round=recall_round)
            text, tokens = _fit(failure, room, model=model)
        room = max(0, room - tokens)
        results.append(ToolResult(call=call, content=text, tokens=tokens))
    log.info(
        "recall_round",
        session_id=session.pk,
        message_id=reply.pk,
        round=recall_round,
        tools=[c.name for c in calls[:RECALL_MAX_CALLS]],
        calls=len(calls),
        refused=sum(1 for r in results if r.call.refusal),
        tokens=sum(r.tokens for r in results),
    )
    return results


__all__ = [
    "INDEX_HEADER",
    "INDEX_HELP",
    "RECALL_MAX_CALLS",
    "RECALL_MAX_ROUNDS",
    "TOOLS",
    "ToolCall",
    "ToolResult",
    "calls_from_completion",
    "calls_from_text",
    "recall_execute",
    "storable",
]
