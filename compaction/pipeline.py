"""THE context pipeline: the one function that turns a session into the messages a model gets.

measure (stored token counts) -> [compact if hard: compaction engine] -> admit -> render.
The chat turn, recall re-invocations, the context report and the tests all call ``context_build``.
"""

from dataclasses import dataclass, field

from bots.models import ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens

HISTORY_KINDS = (Message.Kind.CHAT, Message.Kind.TOOL)


@dataclass
class BuiltContext:
    messages: list[dict]
    tokens: int
    history_ids: list[int] = field(default_factory=list)


def _render(message: Message) -> dict:
    rendered: dict = {"role": message.role, "content": message.content}
    if message.role == Message.Role.ASSISTANT and message.tool_calls:
        rendered["tool_calls"] = message.tool_calls
    if message.role == Message.Role.TOOL:
        rendered["tool_call_id"] = message.tool_call_id
    return rendered


def history_queryset(*, session: ChatSession, before_seq: int):
    """Messages a model may see: finished chat/tool messages (never commands or notices)."""
    return Message.objects.filter(
        session=session,
        seq__lt=before_seq,
        kind__in=HISTORY_KINDS,
        status__in=[Message.Status.COMPLETE, Message.Status.INTERRUPTED],
    ).exclude(role=Message.Role.ASSISTANT, content="", tool_calls=[])


def context_build(*, session: ChatSession, reply: Message) -> BuiltContext:
    bot = session.bot
    messages: list[dict] = []
    tokens = 0
    if bot.system_prompt:
        messages.append({"role": "system", "content": bot.system_prompt})
        tokens += count_message_tokens(bot.system_prompt, model=bot.model)
    history = list(history_queryset(session=session, before_seq=reply.seq).order_by("seq"))
    messages.extend(_render(m) for m in history)
    tokens += sum(m.token_count for m in history)
    return BuiltContext(messages=messages, tokens=tokens, history_ids=[m.pk for m in history])
