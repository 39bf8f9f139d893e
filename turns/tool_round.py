"""One round of MCP tool calls inside a reply (docs/tools.md, "The tool loop").

The model asked for some of the bot's tools (``tools.offer``: one function per tool); this
module runs those calls — concurrently, each within ``TOOL_CALL_TIMEOUT_SECONDS``, through
``tools.mcp_client`` — tells the session (``tool.started`` as the round starts, ``tool.finished``
as each call ends) and stores the round in the transcript as the reply's exchange: the request
as an assistant ``tool`` message with ``tool_calls``, one ``tool`` message per result (its
``tool_call_id``, the function's name, ``ok``), the reply moved after them
(``bots.exchanges.recall_exchange_store``, the store the memory tools' rounds use).

A call never fails the reply: an unknown function, arguments that are not a JSON object, a
server that is down, slow or answers an error, or a stop all become the result text
``[tool failed: <reason>]``. A result longer than ``TOOL_RESULT_MAX_TOKENS`` is stored whole as
the info record ``tool_<seq>`` (``seq``: its result message's) and the model gets its head and
how to read the rest. Tool results are data from outside: they reach the model only as tool
results, never as system text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import structlog
from django.conf import settings
from django.db import transaction

from bots import realtime
from bots.exchanges import recall_exchange_store
from bots.models import Bot, Message
from chat_platform.dbconn import connection_release
from chat_platform.errors import ValidationFailed
from chat_platform.llm.recall_protocol import MEMORY_TOOLS
from chat_platform.llm.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tokens,
    count_tools_tokens,
    truncate_to_tokens,
)
from chat_platform.textcheck import text_made_storable
from compaction.measure import bot_budget
from connections.crypto import KeyUnavailable
from memory.services import record_create
from tools.mcp_client import STOPPED, Call, CallOutcome, Endpoint
from tools.mcp_sessions import ToolSessions
from tools.offer import OfferedTool, entry_servers, tools_offered
from tools.queries import tool_servers_usable_named
from tools.realtime import notify_tool_finished, notify_tool_started
from tools.services import tool_server_endpoint

log = structlog.get_logger(__name__)

ARGUMENTS_MAX_CHARS = 20_000
# Room for the note that follows a cut result's head.
NOTE_TOKENS = 80
# A round's results may take this share of B beside the rest of the call; a result's head is
# never cut below RESULT_MIN_TOKENS (its note alone takes NOTE_TOKENS).
TOOL_ROUND_MAX_PERCENT = 50
RESULT_MIN_TOKENS = 200


def tool_failed(reason: str) -> str:
    return f"[tool failed: {reason}]"


def turn_tools(bot: Bot, *, taken: tuple[str, ...] = ()) -> list[OfferedTool]:
    """The functions ``bot`` offers its model: its ``tools`` on the servers its owner may use
    (a server since removed, or closed to the owner, offers nothing), named around ``taken``."""
    if not bot.tools:
        return []
    servers = tool_servers_usable_named(user=bot.owner, names=entry_servers(bot.tools))
    return _within_share(bot, tools_offered(bot.tools, servers, taken=taken))


def _within_share(bot: Bot, offered: list[OfferedTool]) -> list[OfferedTool]:
    """The tools, in order, while their schemas fit in ``TOOL_SCHEMAS_MAX_PERCENT`` of B: the
    bot's save checked that share, but a server refreshed since may list more (sixty large
    tools made every message of a small bot ``context_too_large``). What is left out is
    logged."""
    if not offered:
        return offered
    share = bot_budget(bot).budget * settings.TOOL_SCHEMAS_MAX_PERCENT // 100
    if count_tools_tokens([t.schema for t in offered], model=bot.model) <= share:
        return offered
    kept: list[OfferedTool] = []
    for tool in offered:
        if count_tools_tokens([*(t.schema for t in kept), tool.schema], model=bot.model) > share:
            break
        kept.append(tool)
    log.warning(
        "turn_tools_left_out",
        bot_id=bot.pk,
        offered=len(kept),
        left_out=len(offered) - len(kept),
        share_tokens=share,
    )
    return kept


@dataclass
class ToolOutcome:
    call_id: str
    name: str  # the function as the model called it
    arguments: str
    ok: bool
    content: str  # what the model gets
    tokens: int
    record: str = ""
    seconds: float = 0.0


def _arguments(raw: object) -> tuple[str, dict[str, Any] | None]:
    text = raw if isinstance(raw, str) else json.dumps(raw if raw is not None else {})
    text = text[:ARGUMENTS_MAX_CHARS]
    try:
        value = json.loads(text or "{}")
    except (ValueError, RecursionError):  # nested past the parser's stack: not an object either
        return text, None
    return text, value if isinstance(value, dict) else None


def _endpoints(offered: list[OfferedTool], owner: Any) -> dict[str, Endpoint | str]:
    """Each server's endpoint, or why it cannot be reached (its headers cannot be opened). Read
    every round, as the bot's ``owner`` may use them now: a server closed to the owner (or
    removed) since the reply began offers nothing more (docs/tools.md)."""
    found: dict[str, Endpoint | str] = {}
    names = {t.server for t in offered}
    for name, server in tool_servers_usable_named(user=owner, names=names).items():
        try:
            found[name] = tool_server_endpoint(server)
        except (KeyUnavailable, ValueError):
            found[name] = f"the headers of the tool server {name} cannot be read"
    return found


def result_limit(bot: Bot, *, model: str, calls: int) -> int:
    """The most of one result the model gets as is (the rest is a record): at most
    ``TOOL_RESULT_MAX_TOKENS``, and at most its share of ``TOOL_ROUND_MAX_PERCENT`` of the bot's
    budget B among the round's calls: in a small window a 4,000-token head left the newest round
    no room beside the fixed part, and the model never saw its call or result."""
    share = bot_budget(bot, model=model).budget * TOOL_ROUND_MAX_PERCENT // 100 // max(1, calls)
    return max(RESULT_MIN_TOKENS, min(settings.TOOL_RESULT_MAX_TOKENS, share))


def _result_for_model(
    *, reply: Message, outcome: CallOutcome, label: str, seq: int, model: str, limit: int
) -> tuple[str, str, int | None]:
    """The text the model gets for a call that succeeded, the record holding the whole result
    when it is longer than ``limit`` (``result_limit``; else ""), and what that text costs as a
    message when it is the whole result (else None: the head and its note are counted by the
    frame). A result is tokenised once, not once more for its frame (docs/performance.md)."""
    text = outcome.text
    total = count_tokens(text, model=model)
    if total <= limit:
        return text, "", total + MESSAGE_OVERHEAD_TOKENS
    try:
        name = _result_record(
            reply,
            seq=seq,
            body=text,
            description=(
                f"The whole result of the tool {label} (message {seq}, {total} tokens)"[:140]
            ),
        )
    except Exception as exc:  # the model still gets the head; it is told the rest is gone
        log.warning(
            "tool_result_record_failed", message_id=reply.pk, name=f"tool_{seq}", error=str(exc)
        )
        head = truncate_to_tokens(text, limit - NOTE_TOKENS, model=model)
        return (
            head + f"\n[… cut at {limit} of {total} tokens; the rest could not be kept]",
            "",
            None,
        )
    head = truncate_to_tokens(text, limit - NOTE_TOKENS, model=model)
    note = (
        f"\n[… the result is {total} tokens; this is its head. The whole result is the record "
        f'{name}: read_records(["{name}"]) reads it, search_records finds any part of it.]'
    )
    return head + note, name, None


def _result_record(reply: Message, *, seq: int, body: str, description: str) -> str:
    """A new info record holding a long result, named ``tool_<seq>`` (docs/tools.md); when this
    chat can already read a record of that name (the user's, or a bot-wide one), the first free
    ``tool_<seq>_<n>``: a result never rewrites a record it did not make. Its name."""
    for attempt in range(1, RESULT_RECORD_NAMES + 1):
        name = f"tool_{seq}" if attempt == 1 else f"tool_{seq}_{attempt}"
        try:
            record_create(session=reply.session, name=name, description=description, body=body)
        except ValidationFailed as exc:
            if "name" not in exc.details or attempt == RESULT_RECORD_NAMES:
                raise
            continue
        return name
    raise AssertionError("unreachable")  # pragma: no cover


# How many names a long result's record tries (``_result_record``).
RESULT_RECORD_NAMES = 5


def _refusal(
    name: str,
    tool: OfferedTool | None,
    arguments: dict[str, Any] | None,
    endpoint: Endpoint | str | None,
    *,
    alone: frozenset[str],
    runnable: int = 0,
) -> str:
    """Why a call is answered without being run ("" when it runs). ``runnable``: how many calls
    of the round run already (a round runs ``TOOL_CALLS_PER_ROUND`` at most: 500 at once ran)."""
    if runnable >= settings.TOOL_CALLS_PER_ROUND:
        most = settings.TOOL_CALLS_PER_ROUND
        return f"a round runs {most} calls at most: call it again in the next round"
    if name in alone:
        return f"{name} runs on its own: call it again without other tools"
    if tool is None:
        return f"no tool named {name[:100]}"
    if arguments is None:
        return "the arguments are not a JSON object"
    if not isinstance(endpoint, Endpoint):
        return endpoint or f"the tool server {tool.server} is no longer available to this bot"
    return ""


def tool_round_run(
    *,
    reply: Message,
    calls: list[dict[str, Any]],
    offered: list[OfferedTool],
    model: str,
    tool_round: int,
    should_stop: Callable[[], bool] | None = None,
    alone: frozenset[str] = frozenset(),
    sessions: ToolSessions | None = None,
    bot: Bot | None = None,
) -> list[ToolOutcome]:
    """Run the model's ``calls`` (OpenAI shape) to the bot's ``offered`` tools: one outcome per
    call, in the calls' order. Frames go out as the round starts and as each call ends.
    ``alone``: functions that run only in a round of their own (the memory tools): asked for
    beside the bot's tools, they are answered with a failure saying so. ``sessions``: the
    reply's open sessions (``ToolLoop``); without them the round opens and closes its own.
    ``bot``: the bot whose tools they are (default: the reply's)."""
    by_function = {t.function: t for t in offered}
    bot = bot or reply.bot or reply.session.bot
    endpoints = _endpoints([by_function[f] for f in by_function], bot.owner)
    limit = result_limit(bot, model=model, calls=len(calls))
    outcomes: list[ToolOutcome] = []
    runnable: list[tuple[int, Call]] = []
    for index, raw in enumerate(calls):
        function = raw.get("function") if isinstance(raw.get("function"), dict) else {}
        name = str(function.get("name") or "")
        call_id = str(raw.get("id") or f"call_{reply.pk}_{tool_round}_{index}")
        call_id = text_made_storable(call_id)[:100]  # the model's: stored as the call's id
        text, arguments = _arguments(function.get("arguments"))
        outcome = ToolOutcome(call_id, name, text, ok=False, content="", tokens=0)
        outcomes.append(outcome)
        notify_tool_started(
            session_id=reply.session_id,
            message_id=reply.pk,
            call_id=call_id,
            name=name,
            arguments=text,
        )
        tool = by_function.get(name)
        endpoint = endpoints.get(tool.server) if tool is not None else None
        refused = _refusal(name, tool, arguments, endpoint, alone=alone, runnable=len(runnable))
        if refused:
            outcome.content = tool_failed(refused)
        else:
            assert tool is not None and isinstance(endpoint, Endpoint) and arguments is not None
            runnable.append((index, Call(endpoint=endpoint, tool=tool.tool, arguments=arguments)))
    base_seq = reply.seq + 1  # the results' seqs once stored (recall_exchange_store)

    def finished(position: int, result: CallOutcome) -> None:
        index = runnable[position][0]
        label = by_function[outcomes[index].name].label
        _call_finished(
            reply,
            outcomes[index],
            result,
            label=label,
            seq=base_seq + index,
            model=model,
            limit=limit,
        )
        connection_release()  # the other calls may wait long yet

    # The calls wait on their servers (a minute each at most, ``TOOL_CALL_TIMEOUT_SECONDS``)
    # holding no pooled connection: ten replies waiting on one slow server held all ten of a
    # worker's, and its other replies' queries failed (docs/security.md, "Heavy work").
    connection_release()
    with ToolSessions() if sessions is None else nullcontext(sessions) as runner:
        runner.run(
            [call for _, call in runnable],
            timeout=settings.TOOL_CALL_TIMEOUT_SECONDS,
            should_stop=should_stop,
            on_finished=finished,
        )
    ran = {index for index, _ in runnable}
    for index, outcome in enumerate(outcomes):
        if index not in ran:
            _finished_frame(reply, outcome, model=model)
    _round_logged(reply, outcomes, tool_round=tool_round)
    return outcomes


def _round_logged(reply: Message, outcomes: list[ToolOutcome], *, tool_round: int) -> None:
    log.info(
        "tool_round_ran",
        message_id=reply.pk,
        round=tool_round,
        calls=len(outcomes),
        failed=sum(1 for o in outcomes if not o.ok),
        stopped=sum(1 for o in outcomes if o.content == tool_failed(STOPPED)),
    )


def _call_finished(
    reply: Message,
    outcome: ToolOutcome,
    result: CallOutcome,
    *,
    label: str,
    seq: int,
    model: str,
    limit: int,
) -> None:
    """A call ended: what the model gets (the result, or its failure), then its frame. A
    server's text is made storable first (no NUL, no lone surrogate): it is stored as the
    result's message and, when long, as a record."""
    result = replace(result, text=text_made_storable(result.text))
    outcome.ok, outcome.seconds = result.ok, result.seconds
    tokens: int | None = None
    if result.ok:
        outcome.content, outcome.record, tokens = _result_for_model(
            reply=reply, outcome=result, label=label, seq=seq, model=model, limit=limit
        )
    else:
        outcome.content = tool_failed(result.text)
    _finished_frame(reply, outcome, model=model, tokens=tokens)


def _finished_frame(
    reply: Message, outcome: ToolOutcome, *, model: str, tokens: int | None = None
) -> None:
    """``tokens``: what ``outcome.content`` costs as a message, when already counted."""
    outcome.tokens = (
        count_message_tokens(outcome.content, model=model) if tokens is None else tokens
    )
    notify_tool_finished(
        session_id=reply.session_id,
        message_id=reply.pk,
        call_id=outcome.call_id,
        name=outcome.name,
        ok=outcome.ok,
        tokens=outcome.tokens,
    )


def tool_round_store(
    *, reply: Message, text: str, outcomes: list[ToolOutcome], model: str
) -> list[Message]:
    """Store the round as the reply's exchange (the call, its results, the reply after them)
    and send their ``message.created`` frames after commit. Returns the stored messages."""
    tool_calls = [
        {
            "id": o.call_id,
            "type": "function",
            # The model's own name and arguments, stored as written, less what cannot be.
            "function": {
                "name": text_made_storable(o.name),
                "arguments": text_made_storable(o.arguments),
            },
        }
        for o in outcomes
    ]
    call_tokens = count_message_tokens(text + json.dumps(tool_calls), model=model)
    with transaction.atomic():
        stored, moved = recall_exchange_store(
            reply=reply,
            call={
                "content": text,
                "tool_calls": tool_calls,
                "token_count": call_tokens,
                "model": model,
            },
            results=[
                {
                    "content": o.content,
                    "tool_call_id": o.call_id,
                    "tool_name": text_made_storable(o.name)[:100],
                    "tool_ok": o.ok,
                    "token_count": o.tokens,
                }
                for o in outcomes
            ],
        )
        for message in [*stored, *moved]:
            transaction.on_commit(partial(realtime.notify_message_created, message))
    return stored


class ToolLoop:
    """The turn's MCP tool rounds: what it offers and how many rounds ran. While fewer than
    ``TOOL_MAX_ROUNDS`` ran the bot's tools are offered; after that the model must answer.
    Its rounds share one session per tool server (``tools.mcp_sessions``), opened by the first
    call to that server and closed by ``close()`` when the reply ends, however it ends."""

    def __init__(self, *, bot: Bot, taken: tuple[str, ...] = ()) -> None:
        self.offered = turn_tools(bot, taken=taken)
        self.bot = bot  # its owner is read when a round runs: a turn without one reads nothing
        self.functions = frozenset(t.function for t in self.offered)
        self.rounds = 0
        self.sessions = ToolSessions()

    def close(self) -> None:
        self.sessions.close()

    @property
    def open(self) -> bool:
        return bool(self.offered) and self.rounds < settings.TOOL_MAX_ROUNDS

    def schemas(self) -> list[dict[str, Any]]:
        return [t.schema for t in self.offered] if self.open else []

    def wanted(self, calls: list[dict[str, Any]]) -> bool:
        """Whether ``calls`` (the platform's share of a completion's calls) are a tool round:
        one names an offered tool, or anything but a memory tool (recall answers those). A
        name nobody offers (a model's own ``add`` for ``calc__add``) is the result ``[tool
        failed: no tool named …]``: recall's answer to it listed only the memory tools, as if
        the bot had no others, and stored the call's arguments as ``{}``."""
        return self.open and any(
            isinstance(c.get("function"), dict)
            and (
                c["function"].get("name") in self.functions
                or c["function"].get("name") not in MEMORY_TOOLS
            )
            for c in calls
        )

    def run(
        self,
        *,
        reply: Message,
        calls: list[dict[str, Any]],
        text: str,
        model: str,
        alone: frozenset[str] = frozenset(),
        should_stop: Callable[[], bool] | None = None,
    ) -> list[Message]:
        """One round: run, store, and return the stored exchange (the call, its results)."""
        self.rounds += 1
        outcomes = tool_round_run(
            reply=reply,
            calls=calls,
            offered=self.offered,
            model=model,
            tool_round=self.rounds,
            should_stop=should_stop,
            alone=alone,
            sessions=self.sessions,
            bot=self.bot,
        )
        return tool_round_store(reply=reply, text=text, outcomes=outcomes, model=model)
