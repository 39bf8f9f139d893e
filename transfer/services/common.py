"""What both import formats share: a result, the conversation digest, the chats a run made
(``ChatsMade``: each new session, and their undoing when the file fails), the digest's claim
(re-importing is idempotent) and the batched message writer."""

import json
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import islice
from time import monotonic, sleep
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import DatabaseError, IntegrityError, connection, transaction

from bots.bulk import messages_import
from bots.models import Bot, ChatSession, Message
from bots.transitions import session_context_recount
from memory.services import messages_index_written
from transfer.models import ImportedConversation, ImportJobSession
from turns.services.session import chats_delete

log = structlog.get_logger(__name__)

BATCH = 500
# Items of a lossless file written per step (transaction): the writer's batch.
STEP_ITEMS = BATCH
# SQLite (embedded mode) has one write lock, and a writer waiting for it looks again every
# 100 ms at most (its busy handler's longest sleep): one that looked while a step held the lock
# found it held again at its next look, step after step (another user's write waited up to
# 2.5 s behind a 1,000-conversation import). After each PACE_HOLD_SECONDS of steps the import
# lets go of the lock for PACE_GAP_SECONDS, one such interval, so every waiting writer finds it
# free: measured, 0.11 s at most behind one import on a quiet machine (more on a saturated one,
# and with two users importing at once: pacing is per run), for an import up to a quarter longer.
PACE_HOLD_SECONDS = 0.4
PACE_GAP_SECONDS = 0.1
PACED_VENDORS = frozenset({"sqlite"})


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


class ChatsMade:
    """The chats one import run makes. An import is written in steps, each its own transaction
    (docs/transfer.md, "Written in steps"), so a file refused at its end has committed chats
    already: ``undo`` deletes them (branch chats included: ``adopt``). Under a job, each new
    chat is also linked to it (``ImportJobSession``, in the chat's own transaction): a run
    stopped where it could not undo (a limit, a crash, a lost worker) is undone by the worker
    or the sweep (``chats_made_delete``)."""

    def __init__(self, *, job_id: int | None = None) -> None:
        self.job_id = job_id
        self.ids: list[int] = []
        # Under a job the worker embeds what was written once the job is done
        # (``jobs._embed_dispatch``); the child, whose steps commit as it goes, dispatches none.
        self.embed = job_id is None
        self._paced = connection.vendor in PACED_VENDORS
        self._held_since = monotonic()

    @contextmanager
    def step(self) -> Iterator[None]:
        """One step of the import: its own transaction, then, on SQLite, a pause for the other
        writers when the steps have held the lock long enough (``PACE_HOLD_SECONDS``)."""
        with transaction.atomic():
            yield
        if self._paced and monotonic() - self._held_since >= PACE_HOLD_SECONDS:
            sleep(PACE_GAP_SECONDS)
            self._held_since = monotonic()

    def session_new(
        self, *, user: AbstractBaseUser, bot: Bot, title: str, created_at: Any
    ) -> ChatSession:
        session = ChatSession.objects.create(user=user, bot=bot, title=title)
        if created_at is not None:
            ChatSession.objects.filter(pk=session.pk).update(created_at=created_at)
            session.created_at = created_at
        if self.job_id is not None:
            ImportJobSession.objects.create(job_id=self.job_id, session=session)
        self.ids.append(session.pk)
        return session

    def adopt(self, session_ids: list[int]) -> None:
        """Chats made for this run by others (an imported conversation's branch chats), in the
        current step: linked and undone like its own."""
        if self.job_id is not None:
            ImportJobSession.objects.bulk_create(
                [ImportJobSession(job_id=self.job_id, session_id=pk) for pk in session_ids]
            )
        self.ids.extend(session_ids)

    def undo(self) -> None:
        """Delete every chat this run made (committed or not: one rolled back is no longer
        there). Never raises: the error that called it is the one to report, and under a job
        the worker deletes what is left (``chats_made_delete``)."""
        if not self.ids:
            return
        try:
            _chats_delete_by_id(self.ids)
        except DatabaseError:
            log.exception("import_undo_failed", job_id=self.job_id, chats=len(self.ids))
        else:
            log.info("import_undone", job_id=self.job_id, chats=len(self.ids))


def chats_made_delete(*, job_id: int) -> int:
    """Delete the chats the job ``job_id`` made and still links (a run that did not finish),
    and with them the links. How many chats it made."""
    ids = list(ImportJobSession.objects.filter(job_id=job_id).values_list("session_id", flat=True))
    if ids:
        _chats_delete_by_id(ids)
        log.info("import_job_chats_deleted", job_id=job_id, chats=len(ids))
    return len(ids)


def _chats_delete_by_id(ids: list[int]) -> None:
    # By id: the import's branch chats are its own (``adopt``); found through ``branch_of``
    # they were missed once their chat was deleted first (the field is set null). A few hundred
    # chats per transaction: a file of thousands of conversations is taken back in steps too.
    for start in range(0, len(ids), BATCH):
        part = ids[start : start + BATCH]
        chats_delete(lambda part=part: ChatSession.objects.filter(pk__in=part))


def in_steps(stream: Iterable[Any], size: int) -> Iterator[list[Any]]:
    """``stream``'s items ``size`` at a time, each list read (parsed) before any of it is
    written, so the reading happens outside the step's transaction."""
    items = iter(stream)
    while step := list(islice(items, size)):
        yield step


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

    def __init__(self, session: ChatSession, *, embed: bool = True) -> None:
        self.session = session
        self.embed = embed
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
        messages_index_written(message_ids=[m.pk for m in written], embed=self.embed)
        self.count += len(written)
        self.pending, self.reply_to = [], []


def skipped_entry(title: str, seen: ImportedConversation) -> dict[str, Any]:
    return {
        "title": title,
        "session": seen.session_id,
        "reason": "Imported before: this conversation is already a chat.",
    }
