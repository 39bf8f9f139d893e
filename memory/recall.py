"""Recall (CONTRACT §10): what a model may ask of memory while it answers, and the answers.

The turn (``bots.turn``) runs the loop — at most ``RECALL_MAX_ROUNDS`` rounds, each a model call
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
"""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import structlog

from bots.models import ChatSession, Message
from chat_platform.errors import PlatformError
from chat_platform.llm.recall_protocol import (
    INDEX_HEADER,
    INDEX_HELP,
    READ_TOOL,
    SAVE_TOOL,
    SEARCH_TOOL,
    TOOLS,
    json_request,
)
from chat_platform.llm.tokens import count_tokens, truncate_to_tokens
from memory import services
from memory.queries import records_read, records_search

log = structlog.get_logger(__name__)

RECALL_MAX_ROUNDS = 2


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: dict[str, Any]

    def as_openai(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments)},
        }


@dataclass
class ToolResult:
    call: ToolCall
    content: str
    tokens: int = 0


def calls_from_completion(tool_calls: Sequence[dict[str, Any]]) -> list[ToolCall]:
    """The model's tool calls (OpenAI shape); bad JSON arguments become empty arguments."""
    calls = []
    for i, raw in enumerate(tool_calls):
        function = raw.get("function") or {}
        try:
            arguments = json.loads(function.get("arguments") or "{}")
        except (TypeError, ValueError):
            arguments = {}
        calls.append(
            ToolCall(
                id=str(raw.get("id") or f"call_{i}")[:100],
                name=str(function.get("name") or "")[:100],
                arguments=arguments if isinstance(arguments, dict) else {},
            )
        )
    return calls


def calls_from_text(text: str, *, call_id: str) -> list[ToolCall] | None:
    """A reply that is exactly one of the JSON requests of §10, as a tool call; else None."""
    request = json_request(text)
    if request is None:
        return None
    kind, value = request
    if kind == "read":
        return [ToolCall(id=call_id, name=READ_TOOL, arguments={"names": value})]
    return [ToolCall(id=call_id, name=SEARCH_TOOL, arguments={"query": value})]


def _fit(text: str, room: int, *, model: str) -> tuple[str, int]:
    """``text`` cut to what is left of the turn's recall room."""
    tokens = count_tokens(text, model=model)
    if tokens <= room:
        return text, tokens
    marker = "\n[cut: no room left in the context budget]"
    cut = truncate_to_tokens(text, max(0, room - count_tokens(marker, model=model)), model=model)
    text = f"{cut}{marker}" if cut else "[not sent: no room left in the context budget]"
    return text, count_tokens(text, model=model)


def _read(session: ChatSession, call: ToolCall, *, model: str) -> tuple[str, list[str], list[str]]:
    names = call.arguments.get("names")
    if not isinstance(names, list):
        names = [names] if isinstance(names, str) else []
    asked = [str(n) for n in names][:100]
    try:
        reads = records_read(session=session, names=asked, model=model)
    except PlatformError as exc:
        return f"[not read: {exc.message}]", asked, []
    parts = []
    for read in reads:
        if read.found:
            parts.append(f"[record {read.name}]\n{read.body}")
        else:
            parts.append(read.not_found_marker)
    return "\n\n".join(parts) or "[not found]", asked, [r.name for r in reads if r.found]


def _search(session: ChatSession, call: ToolCall) -> tuple[str, str, list[str]]:
    query = call.arguments.get("query")
    query = query if isinstance(query, str) else ""
    hits = records_search(session=session, query=query)
    if not hits:
        return "[no matches]", query, []
    body = "\n\n".join(f"[record {hit.name}]\n{hit.excerpt}" for hit in hits)
    return body, query, [hit.name for hit in hits]


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
    except PlatformError as exc:
        reasons = "; ".join(
            f"{key}: {' '.join(map(str, value))}" for key, value in (exc.details or {}).items()
        )
        return f"[not saved: {reasons or exc.message}]"
    return f"[saved: {record.name}]"


def recall_execute(
    *,
    session: ChatSession,
    reply: Message,
    recall_round: int,
    calls: Sequence[ToolCall],
    room_tokens: int,
    model: str,
) -> list[ToolResult]:
    """Answer one round of the model's requests, within ``room_tokens`` in all."""
    results = []
    room = max(0, room_tokens)
    for call in calls:
        if call.name == READ_TOOL:
            text, names, found = _read(session, call, model=model)
            text, tokens = _fit(text, room, model=model)
            services.recall_event_write(
                session=session,
                message=reply,
                recall_round=recall_round,
                tool="read",
                names=names,
                found=found,
                tokens=tokens,
            )
        elif call.name == SEARCH_TOOL:
            text, query, found = _search(session, call)
            text, tokens = _fit(text, room, model=model)
            services.recall_event_write(
                session=session,
                message=reply,
                recall_round=recall_round,
                tool="search",
                query=query,
                found=found,
                tokens=tokens,
            )
        elif call.name == SAVE_TOOL:
            text, tokens = _fit(_save(session, call), room, model=model)
        else:
            text, tokens = _fit(f"[unknown tool: {call.name}]", room, model=model)
        room = max(0, room - tokens)
        results.append(ToolResult(call=call, content=text, tokens=tokens))
    log.info(
        "recall_round",
        session_id=session.pk,
        message_id=reply.pk,
        round=recall_round,
        tools=[c.name for c in calls],
        tokens=sum(r.tokens for r in results),
    )
    return results


__all__ = [
    "INDEX_HEADER",
    "INDEX_HELP",
    "RECALL_MAX_ROUNDS",
    "TOOLS",
    "ToolCall",
    "ToolResult",
    "calls_from_completion",
    "calls_from_text",
    "recall_execute",
]
