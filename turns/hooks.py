"""What another interface may add to a turn without writing a second one.

The OpenAI-compatible API (``openai_api``) sits above the turn, so the turn cannot ask it
anything directly. Instead it registers here, once, at start-up (its ``AppConfig.ready``):

- an **options provider**: ``reply -> TurnOptions | None``, read once when the turn starts
  (per-call ``temperature``, ``max_tokens``, ``stop``, an extra system part). The reply comes
  with its user message loaded (the claim reads it), so a provider can tell its own turns from
  that row (the API marks them by ``client_id``) and a chat page's turn costs no statement;
- **client tools** (``TurnOptions.tools``): offered to the model beside the platform's recall
  tools; a call the model makes to one ends the turn and is the reply (``client_calls``), for
  the interface to hand to its client. The client's results continue the turn: the options then
  carry the stored exchange (``TurnOptions.exchange``: the question, the call, the results
  before the newest one), sent whole like a recall exchange, never trimmed apart;
- a **completion listener**: ``(reply, user_message)``, told in the worker when a reply has
  completed (the API writes the conversation's fingerprint chain there, so it is written even
  when the client went away).

A turn of a reply no provider knows runs exactly as before (``TurnOptions()``). A listener that
raises is logged and never fails the turn: the reply is already complete.
"""

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from bots.models import Message
from chat_platform.llm.gateway import ModelConfig
from connections.usage import Limit

log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class TurnOptions:
    """Per-call overrides of the bot's settings. ``max_tokens`` can only lower the bot's output
    reserve (B is computed with it), never raise it."""

    temperature: float | None = None
    max_tokens: int | None = None
    stop: tuple[str, ...] = ()
    # A system part of this call only, after the bot's own prompt (counted, never compacted).
    system: str = ""
    # Daily token limits beyond the user's own that this call counts against (an API key's).
    quota: tuple[Limit, ...] = ()
    # Tools of the interface's client (OpenAI shape), offered beside the recall tools.
    tools: tuple[dict[str, Any], ...] = ()
    # A client tool exchange this turn continues (stored messages, oldest first): counted and
    # sent whole after the new message, like the turn's own recall exchange.
    exchange: tuple[Message, ...] = ()
    # The bots the API key that asked for this reply is limited to (None: no such limit): a
    # room's reply hands the floor over to these only, as the key's message reached only them.
    bots: frozenset[int] | None = None


OptionsProvider = Callable[[Message], TurnOptions | None]
CompletionListener = Callable[[Message, Message | None], None]

_providers: list[OptionsProvider] = []
_listeners: list[CompletionListener] = []


def register(
    *, options: OptionsProvider | None = None, completed: CompletionListener | None = None
) -> None:
    """Register once per process (idempotent: the same function twice is kept once)."""
    if options is not None and options not in _providers:
        _providers.append(options)
    if completed is not None and completed not in _listeners:
        _listeners.append(completed)


def options_for(reply: Message) -> TurnOptions:
    for provider in _providers:
        found = provider(reply)
        if found is not None:
            return found
    return TurnOptions()


def config_with(config: ModelConfig, options: TurnOptions) -> ModelConfig:
    """The bot's model config with the call's overrides (output only ever capped lower)."""
    changes: dict = {}
    if options.temperature is not None:
        changes["temperature"] = options.temperature
    if options.max_tokens is not None:
        changes["max_output_tokens"] = max(1, min(options.max_tokens, config.max_output_tokens))
    if options.stop:
        changes["stop"] = options.stop
    return replace(config, **changes) if changes else config


def notify_completed(reply: Message, *, user_message: Message | None) -> None:
    for listener in _listeners:
        try:
            listener(reply, user_message)
        except Exception:
            log.exception("turn_completion_listener_failed", message_id=reply.pk)


def client_calls(options: TurnOptions, tool_calls: list[dict[str, Any]], *, reply_id: int) -> list:
    """The calls of ``tool_calls`` (OpenAI shape, from the gateway) to the client's tools, each
    with an id (a provider may leave it out; the client answers by it). Empty without client
    tools: every call is the platform's own."""
    if not options.tools:
        return []
    names = {tool["function"]["name"] for tool in options.tools}
    calls = [c for c in tool_calls if c.get("function", {}).get("name") in names]
    return [
        {
            "id": call.get("id") or f"call_{reply_id}_{i}",
            "type": "function",
            "function": {
                "name": call["function"]["name"],
                "arguments": call["function"].get("arguments") or "",
            },
        }
        for i, call in enumerate(calls)
    ]


def platform_calls(options: TurnOptions, tool_calls: list[dict[str, Any]]) -> list:
    """The calls of ``tool_calls`` that are not to the client's tools (the recall tools')."""
    names = {tool["function"]["name"] for tool in options.tools}
    return [c for c in tool_calls if c.get("function", {}).get("name") not in names]
