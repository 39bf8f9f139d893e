"""Render: the chosen rows as the model's messages (a room's other speakers as named user
messages, images as content parts), the memory index block, and each row's provenance."""

from collections.abc import Sequence
from typing import Any

from attachments.queries import images_for_messages
from attachments.services import IMAGE_MARKER
from bots.models import ChatSession, Message
from chat_platform.llm import gateway
from chat_platform.llm.recall_protocol import INDEX_HEADER, INDEX_HELP
from chat_platform.llm.tokens import count_message_tokens
from compaction.admission import Admission
from compaction.measure import Measure, system_part_tokens
from compaction.models import Summary
from compaction.pipeline.history import tool_calls_load
from compaction.provenance import ChosenRow, part, prompt_version
from compaction.seats import RoomView
from memory.queries import IndexLine


def images_of(session: ChatSession, chosen: list[tuple[Any, ...]]) -> dict[int, list[str]]:
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


def provenance_rows(
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


def index_block(
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


def system_parts(
    session: ChatSession, measure: Measure, *, extra_system: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The call's system messages — the bot's prompt, the chat's instruction, a room's header,
    an API client's system part — and their provenance parts, in that order."""
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
    return messages, parts


def summary_parts(
    measure: Measure, messages: list[dict[str, Any]], parts: list[dict[str, Any]]
) -> None:
    """Summaries are labelled system blocks naming what they cover, never user messages.
    A context with none (most turns) builds no query: Django builds and compiles even a
    ``pk__in=[]`` filter before finding it matches nothing (docs/performance.md, "A turn's CPU,
    eighth pass")."""
    if not measure.summaries:
        return
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


def index_part(
    measure: Measure,
    admission: Admission,
    messages: list[dict[str, Any]],
    parts: list[dict[str, Any]],
    *,
    recall_open: bool,
) -> None:
    """The memory index block, if admission kept any of its lines."""
    block, lines = index_block(measure, admission, recall_open=recall_open)
    if not block:
        return
    messages.append({"role": "system", "content": block})
    kept_lines = measure.index_lines[: admission.kept_index_lines]
    parts.append(
        part(
            "memory_index",
            # The lines as rendered (a record's description can change later); the block's
            # header and help line are fixed text (``index_block_render``).
            {
                "names": [line.name for line in lines],
                "lines": [line.text for line in lines],
                "help": recall_open,
            },
            measure.index_block_tokens + sum(line.tokens for line in kept_lines),
        )
    )
