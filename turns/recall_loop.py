"""A turn's recall loop: the model calls of one turn, each streamed (``turns.stream``), until
one answers. While recall is possible (at most ``RECALL_MAX_ROUNDS`` rounds), a call that asks
to look something up is answered (``memory.recall.recall_execute``), the exchange stored in the
transcript before the reply, and the model called again with it (docs/memory.md).

The bot's MCP tools (docs/tools.md) go through the same loop: a call that asks for them is a
tool round (``turns.tool_round.ToolLoop``: run, stored the same way), up to ``TOOL_MAX_ROUNDS``;
then they are no longer offered and the model must answer."""

import json
from dataclasses import dataclass
from functools import partial
from typing import Any

import structlog
from django.db import transaction

from bots import realtime
from bots.exchanges import recall_exchange_store
from bots.models import Bot, ChatSession, Message
from bots.queries import BOT_UNAVAILABLE, bot_usable_in
from chat_platform.compiled import CompiledValues
from chat_platform.errors import ContextTooLarge, NotFound
from chat_platform.llm import gateway
from chat_platform.llm.tokens import (
    MESSAGE_OVERHEAD_TOKENS,
    count_message_tokens,
    count_tools_tokens,
)
from compaction.measure import bot_budget
from compaction.pipeline import BuiltContext, context_build, still_in_context
from connections import usage
from memory.recall import (
    RECALL_MAX_ROUNDS,
    ToolCall,
    calls_from_completion,
    calls_from_text,
    recall_execute,
)
from memory.recall import TOOLS as RECALL_TOOLS
from turns import hooks as turn_hooks
from turns.liveness import TurnHandle
from turns.stream import TurnState, stream_round
from turns.tool_round import ToolLoop

log = structlog.get_logger(__name__)

# Slack per recalled result under what is left of B: joined text can cost a token or two more
# than its parts.
RECALL_MARGIN_TOKENS = 8


@dataclass
class Answered:
    """How the loop ended: the last call's stream and context, and the calls the model made to
    the client's tools (``turns.hooks``), which end the turn."""

    stream: gateway.ChatStream
    context: BuiltContext
    asked: list[dict[str, Any]]
    # The user stopped the reply during (or right after) a tool round.
    stopped_in_tools: bool = False


RECALL_NAMES = frozenset(t["function"]["name"] for t in RECALL_TOOLS)


def _stop_asked(reply: Message, handle: TurnHandle) -> bool:
    """During tool calls: the user stopped the reply. The watcher's flag, which it sets within
    ``CHECKPOINT_SECONDS`` of the stop request (turns/liveness.py, one query for every turn of
    the process); a read of the reply's row each time asked four statements a second of every
    waiting reply and kept a pooled connection borrowed through the wait."""
    return handle.stopped.is_set()


def calls_until_answer(
    reply: Message,
    handle: TurnHandle,
    state: TurnState,
    session: ChatSession,
    bot: Bot,
    model: str,
    config: gateway.ModelConfig,
    options: turn_hooks.TurnOptions,
    spent: usage.Meter,
) -> Answered:
    """Call the model until it answers (or is stopped, or asks the client's tools). The bot's
    MCP tools, named around the memory tools and the client's, run on sessions the reply keeps
    open and closes as it ends, however it ends (``ToolLoop.close``)."""
    client_names = tuple(t["function"]["name"] for t in options.tools)
    tool_loop = ToolLoop(bot=bot, taken=(*RECALL_NAMES, *client_names))
    try:
        return _calls_until_answer(
            reply, handle, state, session, bot, model, config, options, spent, tool_loop
        )
    finally:
        tool_loop.close()


def _calls_until_answer(
    reply: Message,
    handle: TurnHandle,
    state: TurnState,
    session: ChatSession,
    bot: Bot,
    model: str,
    config: gateway.ModelConfig,
    options: turn_hooks.TurnOptions,
    spent: usage.Meter,
    tool_loop: ToolLoop,
) -> Answered:
    # memory_index_size = 0 disables recall with the index; recall_enabled = false keeps the
    # index visible but offers no recall (docs/memory.md).
    recall_on = bot.recall_enabled and bot.memory_index_size > 0
    rounds: list[list[Message]] = []  # the turn's recall exchange, one list per round
    recall_round = 0
    asked: list[dict[str, Any]] = []  # calls to the client's tools (turn_hooks): end the turn
    while True:
        may_recall = recall_on and recall_round < RECALL_MAX_ROUNDS
        tools = [*(RECALL_TOOLS if may_recall else []), *tool_loop.schemas(), *options.tools]
        context, tools = _call_context(reply, rounds, tools, tool_loop, options, model, may_recall)
        stream = stream_round(
            reply,
            handle,
            state,
            config,
            context,
            tools=tools or None,
            # The call's round in the reply, as its context record names it: 0 first, then
            # one more after each recall or tool round.
            recall_round=recall_round + tool_loop.rounds,
        )
        completion = stream.completion
        if completion is None:
            break
        _call_counted(completion, spent, state)
        asked = turn_hooks.client_calls(options, completion.tool_calls, reply_id=reply.pk)
        if handle.stopped.is_set():
            break
        own_calls = turn_hooks.platform_calls(options, completion.tool_calls)
        if tool_loop.wanted(own_calls):
            rounds.append(
                _tool_round(
                    reply, handle, state, session, tool_loop, own_calls, model, text=completion.text
                )
            )
            _totals_add(reply.session, rounds[-1])
            if handle.stopped.is_set():
                return Answered(stream=stream, context=context, asked=[], stopped_in_tools=True)
            if asked:
                # The same answer called the client's tools too: the bot's ran first, as a
                # round of their own, and the client's end the turn (docs/tools.md).
                break
            # Each call of a long tool loop sends the whole context again: what the calls so
            # far spent is counted, and a limit they spent refuses the next call
            # (``quota_exceeded``: the rounds stay stored). The turn's hold covered its first
            # call only; up to TOOL_MAX_ROUNDS calls ran past a spent limit before.
            spent.count_so_far()
            usage.payer_check(user_id=session.user_id)
            continue
        if asked or not may_recall:
            break
        calls = calls_from_completion(own_calls) or calls_from_text(
            completion.text, call_id=f"recall-{reply.pk}-{recall_round + 1}"
        )
        if not calls:
            break
        check_bot_usable(session, fresh=True)
        recall_round += 1
        rounds.append(
            _recall_round(reply, context, calls, recall_round=recall_round, text=completion.text)
        )
        _totals_add(reply.session, rounds[-1])
        state.parts.clear()  # the answer is what the model says after its lookups
    return Answered(stream=stream, context=context, asked=asked)


def _call_counted(completion: gateway.Completion, spent: usage.Meter, state: TurnState) -> None:
    """A model call's usage: on the turn's daily-limit meter and in the reply's own usage."""
    spent.add(completion.prompt_tokens + completion.completion_tokens)
    state.prompt_tokens += completion.prompt_tokens
    state.completion_tokens += completion.completion_tokens


def _tool_round(
    reply: Message,
    handle: TurnHandle,
    state: TurnState,
    session: ChatSession,
    tool_loop: ToolLoop,
    calls: list[dict[str, Any]],
    model: str,
    *,
    text: str,
) -> list[Message]:
    """Run and store one round of the bot's MCP tools; the model answers after it."""
    check_bot_usable(session, fresh=True)
    stored = tool_loop.run(
        reply=reply,
        calls=calls,
        text=text,
        model=model,
        alone=RECALL_NAMES,
        should_stop=partial(_stop_asked, reply, handle),
    )
    # ``reply.seq`` is where the store moved it (``recall_exchange_store``): no read back.
    state.parts.clear()  # the answer is what the model says after its tool calls
    return stored


def _call_context(
    reply: Message,
    rounds: list[list[Message]],
    tools: list[dict[str, Any]],
    tool_loop: ToolLoop,
    options: turn_hooks.TurnOptions,
    model: str,
    recall_open: bool,
) -> tuple[BuiltContext, list[dict[str, Any]]]:
    """The call's context and the tools it goes with: all of them, or, when the fixed part
    leaves the uncounted memory tools no room in B, the others only."""
    counted, reserve = _tools_tokens(tools, tool_loop, options, model=model)
    context = _context_with_rounds(
        reply,
        rounds,
        recall_open=recall_open,
        extra_system=options.system,
        tools_tokens=counted,
        exchange=options.exchange,
        reserve_tokens=reserve,
    )
    if reserve and context.admission.selected_tokens + reserve > context.measure.budget.budget:
        tools = [*tool_loop.schemas(), *options.tools]
    return context, tools


def _tools_tokens(
    tools: list[dict[str, Any]],
    tool_loop: ToolLoop,
    options: turn_hooks.TurnOptions,
    *,
    model: str,
) -> tuple[int, int]:
    """(counted in B, sent uncounted): what goes with the call uncounted (the memory tools of a
    bot without MCP tools) is a reserve admission leaves room for, so the call stays within B."""
    counted = _counted_tools_tokens(tools, tool_loop, options, model=model)
    return counted, max(0, count_tools_tokens(tools, model=model) - counted) if tools else 0


def _counted_tools_tokens(
    tools: list[dict[str, Any]],
    tool_loop: ToolLoop,
    options: turn_hooks.TurnOptions,
    *,
    model: str,
) -> int:
    """What the call's tool schemas count in B. An API client's and the bot's MCP tools go with
    every call: counted like a system part. The platform's own recall tools are not counted for
    a bot without MCP tools (the context record reports them): counting them took ~290 tokens
    from every small bot's fixed part, so its hard compaction kept next to no raw history
    (issue 17). A bot with MCP tools has them counted too: its long tool tasks run at B, and no
    request may exceed it (docs/tools.md)."""
    return count_tools_tokens(tools if tool_loop.offered else options.tools, model=model)


def _totals_add(session: ChatSession, stored: list[Message]) -> None:
    """The round just stored joins the session's running totals (``recall_exchange_store``
    added it in the database): the turn's copy counts it too, without a read, so the pressure of
    the next call (what a hard compaction goes by) sees it, sent whole or left out."""
    session.context_tokens += sum(m.token_count for m in stored)
    session.context_messages += len(stored)


def check_bot_usable(session: ChatSession, *, fresh: bool = False) -> None:
    """The session's user may still run its bot (owner, or shared): checked when the turn starts
    (a send queued before the owner un-shared it) and before each recall round."""
    bot = _bot_usable_read(session.bot_id) if fresh else None
    if not bot_usable_in(session=session, bot=bot):
        raise NotFound(BOT_UNAVAILABLE)


_USABLE_FIELDS = ("owner_id", "is_shared", "retired_at")
# Before every tool round: compiled once per process (docs/performance.md, "The tool task,
# eighth pass").
_BOT_USABLE = CompiledValues(
    lambda bot_id: Bot.objects.filter(pk=bot_id).values_list(*_USABLE_FIELDS),
    name="bot_usable",
)


def _bot_usable_read(bot_id: int) -> Bot:
    """The bot's owner, sharing and retirement, as ``Bot.objects.only(...).get(pk=bot_id)``."""
    rows = _BOT_USABLE.rows(bot_id=bot_id)
    if not rows:
        raise Bot.DoesNotExist("Bot matching query does not exist.")
    return Bot(pk=bot_id, **dict(zip(_USABLE_FIELDS, rows[0], strict=True)))


def _recall_round(
    reply: Message,
    context: BuiltContext,
    calls: list[ToolCall],
    *,
    recall_round: int,
    text: str,
) -> list[Message]:
    """Answer the model's requests and store the exchange in the transcript: the request as an
    assistant ``tool`` message, one ``tool`` message per result, the reply moved after them.

    Everything recalled fits in what is left of B once the turn's fixed part is sent."""
    session = reply.session
    model = session.chat_model
    # A JSON request is stored as the tool call it became, not as text as well.
    call_content = "" if calls_from_text(text, call_id="-") else text
    call_tokens = count_message_tokens(
        call_content + json.dumps([c.as_openai() for c in calls]), model=model
    )
    room = (
        context.measure.budget.budget
        - context.measure.fixed_tokens
        - call_tokens
        - (MESSAGE_OVERHEAD_TOKENS + RECALL_MARGIN_TOKENS) * len(calls)
    )
    results = recall_execute(
        session=session,
        reply=reply,
        recall_round=recall_round,
        calls=calls,
        room_tokens=room,
        model=model,
        live_before=context.recall_live_before,
    )
    with transaction.atomic():
        # seqs: the request takes the reply's place, results follow, then the reply, then what
        # was sent meanwhile (queued behind this reply)
        stored, moved = recall_exchange_store(
            reply=reply,
            call={
                "content": call_content,
                "tool_calls": [c.as_openai() for c in calls],
                "token_count": call_tokens,
                "model": model,
            },
            results=[
                {
                    "content": result.content,
                    "tool_call_id": result.call.id,
                    "tool_name": result.call.name,
                    "token_count": count_message_tokens(result.content, model=model),
                }
                for result in results
            ],
        )
        for message in [*stored, *moved]:
            # A moved message's frame carries its new seq: the page re-sorts it.
            transaction.on_commit(partial(realtime.notify_message_created, message))
    return stored


def _context_with_rounds(
    reply: Message,
    rounds: list[list[Message]],
    *,
    recall_open: bool,
    extra_system: str = "",
    tools_tokens: int = 0,
    exchange: tuple[Message, ...] = (),
    reserve_tokens: int = 0,
) -> BuiltContext:
    """The call's context with the turn's rounds (recall and tool rounds).

    Past the hard threshold, the reply's earlier rounds — all but the newest — may be compacted
    inside the reply before this call (docs/tools.md, "Compaction inside a reply"): a snapshot
    and a summary stand in for them, and they leave ``rounds`` for the rest of the turn.

    Rounds that are still too many (compaction off, failing, or the fixed part grew: the user
    pins a message, a summary comes in) are left out of this call oldest first rather than
    failing the reply (degrade only downward). They stay in the transcript. Without any round
    left, a ``ContextTooLarge`` is the message's own. Those that could not fit even alone with
    the call's tool schemas (their stored tokens past B) are left out before the first build,
    so a call costs one or two builds, not one per round."""
    budget = bot_budget(reply.session.bot, model=reply.session.chat_model).budget
    within = _earlier_rounds(rounds)
    kept = list(rounds)
    room = budget - tools_tokens - sum(m.token_count for m in exchange)
    while kept and sum(m.token_count for round_ in kept for m in round_) > room:
        kept = kept[1:]
    if len(kept) < len(rounds):
        _left_out(reply, rounds, kept)
    while True:
        try:
            context = context_build(
                session=reply.session,
                reply=reply,
                # A client tool exchange the turn continues is never left out (its results
                # would lose their call); the turn's own recall rounds may be.
                recalled=[*exchange, *(m for round_ in kept for m in round_)],
                recall_open=recall_open,
                record=False,
                extra_system=extra_system,
                tools_tokens=tools_tokens,
                compact_within=within,
                reserve_tokens=reserve_tokens,
            )
        except ContextTooLarge:
            if not kept:
                raise
            kept = kept[1:]
            _left_out(reply, rounds, kept)
            continue
        if within is not None and (context.waited_for_compaction or {}).get("outcome") == (
            "compacted"
        ):
            _rounds_settle(rounds, context)
        return context


def _left_out(reply: Message, rounds: list[list[Message]], kept: list[list[Message]]) -> None:
    log.warning(
        "turn_recall_round_left_out",
        message_id=reply.pk,
        session_id=reply.session_id,
        rounds=len(rounds),
        kept=len(kept),
    )


def _earlier_rounds(rounds: list[list[Message]]) -> tuple[int, int] | None:
    """The (first, last) seqs of the turn's rounds but the newest: what a compaction inside the
    reply may take (the model keeps its latest call and results verbatim)."""
    earlier = [m.seq for round_ in rounds[:-1] for m in round_]
    return (min(earlier), max(earlier)) if earlier else None


def _rounds_settle(rounds: list[list[Message]], context: BuiltContext) -> None:
    """Drop from ``rounds`` those a compaction inside the reply took (a round goes whole: its
    call and results share one summary). The build read which of the rounds it sent are still
    in context (``BuiltContext.recalled_alive``); only rounds it left out are asked about."""
    known = context.recalled_alive
    unknown = [r[0] for r in rounds if r[0].pk not in known]
    alive = {pk for pk, kept in known.items() if kept}
    alive.update(m.pk for m in still_in_context(context.measure, unknown))
    rounds[:] = [round_ for round_ in rounds if round_[0].pk in alive]
