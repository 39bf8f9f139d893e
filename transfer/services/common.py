"""What both import formats share: a result, the conversation digest, a new session, the
digest's claim (re-importing is idempotent) and the batched message writer."""

import json
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction

from bots.bulk import messages_import
from bots.models import Bot, ChatSession, Message
from bots.transitions import session_context_recount
from memory.services import messages_index_written
from transfer.models import ImportedConversation

BATCH = 500


@dataclass
class ImportResult:
    format: str
    imported: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"format": self.format, "imported": self.imported, "skipped": self.skipped}


# Canonical JSON (sorted keys, no spaces), produced piece by piece: ``iterencode`` is the pure
# Python encoder, so a big value is hashed a chunk at a time and never held as one string by
# one C call that keeps the GIL for seconds (issue 30: that stalled a web process until
# uvicorn killed it). The bytes are exactly ``json.dumps``' with the same options.
CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def digest_update(hasher: Any, value: Any) -> None:
    for chunk in CANONICAL.iterencode(value):
        hasher.update(chunk.encode("utf-8", "surrogatepass"))


def without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_ids(v) for k, v in value.items() if k != "id"}
    return value


def session_new(*, user: AbstractBaseUser, bot: Bot, title: str, created_at: Any) -> ChatSession:
    session = ChatSession.objects.create(user=user, bot=bot, title=title)
    if created_at is not None:
        ChatSession.objects.filter(pk=session.pk).update(created_at=created_at)
        session.created_at = created_at
    return session


def digest_claim(
    *, user: AbstractBaseUser, session: ChatSession, source: str, digest: str, source_id: str = ""
) -> ImportedConversation | None:
    """Record the digest with the new session; the existing record when it was imported before
    (the caller then drops what it wrote)."""
    existing = (
        ImportedConversation.objects.filter(user=user, digest=digest)
        .exclude(session=session)
        .select_related("session")
        .first()
    )
    if existing is not None:
        return existing
    try:
        with transaction.atomic():
            ImportedConversation.objects.create(
                user=user, session=session, source=source, digest=digest, source_id=source_id
            )
    except IntegrityError:  # a concurrent import of the same conversation won
        return (
            ImportedConversation.objects.filter(user=user, digest=digest)
            .select_related("session")
            .first()
        )
    return None


def session_finish(session: ChatSession) -> int:
    tokens, _ = session_context_recount(session_id=session.pk)
    return tokens


class MessageWriter:
    """Messages of one imported session, written in batches of ``BATCH`` and indexed for
    search with each batch."""

    def __init__(self, session: ChatSession) -> None:
        self.session = session
        self.pending: list[Message] = []
        self.reply_to: list[int | None] = []
        self.count = 0

    def add(self, message: Message, reply_to_seq: int | None = None) -> None:
        if message.role == Message.Role.ASSISTANT and message.bot_id is None:
            # Its bot is the chat's: an imported reply named none (``bot: null``).
            message.bot_id = self.session.bot_id
        self.pending.append(message)
        self.reply_to.append(reply_to_seq)
        if len(self.pending) >= BATCH:
            self.flush()

    def flush(self) -> None:
        if not self.pending:
            return
        written = messages_import(
            session_id=self.session.pk, messages=self.pending, reply_to_seqs=self.reply_to
        )
        messages_index_written(message_ids=[m.pk for m in written])
        self.count += len(written)
        self.pending, self.reply_to = [], []


def skipped_entry(title: str, seen: ImportedConversation) -> dict[str, Any]:
    return {
        "title": title,
        "session": seen.session_id,
        "reason": "Imported before: this conversation is already a chat.",
    }
