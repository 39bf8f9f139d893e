"""Export: one chat as Markdown or as the lossless JSON (``transfer.lossless``), and all of a
user's chats as one zip (each chat's JSON and Markdown), every one of them produced piece by piece
so a response can stream it."""

import re
import zipfile
from collections.abc import Iterator
from typing import IO

from django.contrib.auth.base_user import AbstractBaseUser

from bots.models import ChatSession, Message
from bots.queries import participants_of, session_list_for_user
from chat_platform.isotime import iso_utc
from transfer.lossless import in_pages, messages_with_cover, session_json_chunks

ROLE_NAMES = {"user": "User", "assistant": "Assistant", "system": "System", "tool": "Tool"}
_UNSAFE = re.compile(r"[^a-z0-9]+")


def session_filename(session: ChatSession, extension: str) -> str:
    slug = _UNSAFE.sub("-", (session.title or "chat").lower()).strip("-")[:60] or "chat"
    return f"chat-{session.pk}-{slug}.{extension}"


def session_markdown_chunks(session: ChatSession) -> Iterator[str]:
    """A readable transcript: a heading per message (who, when, and what became of it)."""
    title = session.title or f"Chat {session.pk}"
    yield f"# {title}\n\n"
    started = iso_utc(session.created_at)
    # A room's replies are every bot's: each is headed by its bot's name, not "Assistant".
    names: dict[int, str] = {}
    if session.is_room:
        bots = [p.bot for p in participants_of(session=session, include_removed=True)]
        names = {b.pk: b.name for b in bots}
        yield f"Bots: {', '.join(f'{b.name} ({b.model})' for b in bots)} · started {started}\n"
    else:
        yield f"Bot: {session.bot.name} ({session.bot.model}) · started {started}\n"
    for m in in_pages(messages_with_cover(session), key="seq"):
        who = ROLE_NAMES.get(m.role, m.role)
        if names and m.role == Message.Role.ASSISTANT:
            # (a reply from before the chat became a room carries no bot: the session's)
            who = names.get(m.bot_id or session.bot_id, who)
        if m.kind == Message.Kind.NOTICE:
            who = "Notice"
        elif m.kind == Message.Kind.COMMAND:
            who = "Command"
        notes = [iso_utc(m.created_at) or ""]
        if m.model and m.role == Message.Role.ASSISTANT:
            notes.append(m.model)
        if m.pinned:
            notes.append("pinned")
        if m.covering:
            notes.append("summarised")
        if m.status != Message.Status.COMPLETE:
            notes.append(m.status)
        yield f"\n## {m.seq}. {who} · {' · '.join(notes)}\n\n"
        if m.kind == Message.Kind.TOOL:
            body = m.content or _tool_calls_text(m.tool_calls)
            fence = "````" if "```" in body else "```"
            yield f"{fence}\n{body}\n{fence}\n" if body else "_(no text)_\n"
        else:
            yield f"{m.content}\n" if m.content else "_(no text)_\n"
        if m.error_message:
            yield f"\n> Failed: {m.error_message}\n"


def _tool_calls_text(calls: object) -> str:
    """A tool call message's calls, one line each (``name(arguments)``): the message has no
    text of its own, and its block was empty in the export."""
    if not isinstance(calls, list):
        return ""
    lines = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            lines.append(f"{function.get('name', '')}({function.get('arguments', '')})")
    return "\n".join(lines)


class _Sink:
    """A write-only file that keeps what ``zipfile`` wrote until the response takes it."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.offset = 0

    def write(self, data: bytes) -> int:
        self.parts.append(bytes(data))
        self.offset += len(data)
        return len(data)

    def tell(self) -> int:
        return self.offset

    def flush(self) -> None:
        return None

    def take(self) -> bytes:
        data = b"".join(self.parts)
        self.parts = []
        return data


def _write_entry(
    archive: zipfile.ZipFile, sink: _Sink, name: str, chunks: Iterator[str]
) -> Iterator[bytes]:
    info = zipfile.ZipInfo(name)
    info.compress_type = zipfile.ZIP_DEFLATED
    target: IO[bytes]
    with archive.open(info, "w", force_zip64=True) as target:
        for chunk in chunks:
            target.write(chunk.encode("utf-8", "surrogatepass"))
            if sink.offset and sink.parts:
                yield sink.take()
    yield sink.take()


def user_zip_chunks(*, user: AbstractBaseUser) -> Iterator[bytes]:
    """All of ``user``'s chats as one zip, streamed: each chat's ``.json`` and ``.md`` in turn
    (an unseekable stream: zipfile writes data descriptors)."""
    sink = _Sink()
    with zipfile.ZipFile(sink, "w") as archive:  # type: ignore[arg-type]
        for session in in_pages(session_list_for_user(user=user), key="pk", size=100):
            yield from _write_entry(
                archive, sink, session_filename(session, "json"), session_json_chunks(session)
            )
            yield from _write_entry(
                archive, sink, session_filename(session, "md"), session_markdown_chunks(session)
            )
    yield sink.take()
