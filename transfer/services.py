"""Import: a file of chats (the lossless JSON of one chat, or ChatGPT's ``conversations.json``)
becomes sessions of the signed-in user with one bot.

Validate, then write, then notify — per file: the whole file is one transaction, so a file
refused anywhere (bad JSON, a wrong type in its last message, nesting too deep) leaves nothing
behind. The file is read as a stream (``transfer.streaming``), one conversation or one message
at a time. Written history is token-counted with the bot's model, written through
``bots.bulk.messages_import``, indexed for search at once
(``memory.services.messages_index_written``), and after commit each new session gets a soft
compaction (``turns.dispatch.compact_soft_dispatch``) so the bot carries what it can of it.

Re-importing is idempotent: every conversation's digest (sha256 of its canonical JSON, ids left
out; of a ChatGPT conversation, the keys the import reads, ``CONVERSATION_KEYS``) is recorded
with its session (``ImportedConversation``); one seen before, whose session still exists, is
skipped and reported.
"""

import hashlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import IO, Any

import structlog
from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone

from bots.bulk import messages_import
from bots.models import Bot, ChatSession, Message
from bots.queries import bot_get_for_user
from bots.transitions import session_context_recount
from chat_platform.errors import NotFound, PayloadTooLarge
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.models import TRIGGERS, CompactionEvent, Summary
from memory.models import MemoryRecord
from memory.services import messages_index_written
from transfer import fields as f
from transfer.chatgpt import CONVERSATION_KEYS, Conversation, Turn, conversation_parse
from transfer.lossless import FORMAT, VERSION
from transfer.models import ImportedBranch, ImportedConversation
from transfer.streaming import CountingReader, Item, items, refused, top_level_kind
from turns.dispatch import compact_soft_dispatch
from turns.services.branch import ImportedBranchMessages, do_branches_import

log = structlog.get_logger(__name__)

BATCH = 500
TOKENS_MAX = 100_000_000
SUMMARY_STATUSES = [s for s in Summary.Status.values if s in ("active", "superseded")]
LOSSLESS_KEYS = ("session", "summaries", "records", "compaction_events", "messages", "branches")


@dataclass
class ImportResult:
    format: str
    imported: list[dict[str, Any]] = field(default_factory=list)
    skipped: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"format": self.format, "imported": self.imported, "skipped": self.skipped}


def check_import_size(*, size: int | None) -> None:
    """A file (or a request claiming a size) over ``IMPORT_MAX_BYTES`` is refused unread."""
    limit = settings.IMPORT_MAX_BYTES
    if size is not None and size > limit:
        raise PayloadTooLarge(
            f"The file is {size:,} bytes; imports take at most {limit:,} bytes.",
            details={"file": [f"At most {limit:,} bytes."], "max_bytes": limit, "size": size},
        )


def chats_import(
    *,
    user: AbstractBaseUser,
    bot_id: object,
    raw: IO[bytes],
    size: int | None,
    on_progress: Callable[[int], None] | None = None,
) -> ImportResult:
    """Import one file for ``user`` into chats with the bot ``bot_id`` (one they may use)."""
    check_import_size(size=size)
    bot = bot_get_for_user(user=user, bot_id=bot_id)
    if bot.owner_id != user.pk and not bot.is_shared:  # pragma: no cover - the selector's rule
        raise NotFound("Bot not found.")
    reader = CountingReader(raw, on_progress=on_progress)
    new_sessions: list[int] = []
    with transaction.atomic():
        kind, events = top_level_kind(reader)
        # A conversation's keys that the import does not read are skipped as they stream by,
        # never built (a conversation carrying a huge unused object costs no memory).
        keep = CONVERSATION_KEYS if kind == "array" else None
        stream = items(kind, events, reader, max_depth=settings.IMPORT_MAX_DEPTH, keep=keep)
        if kind == "array":
            result = _chatgpt_import(user=user, bot=bot, stream=stream, created=new_sessions)
        else:
            result = _lossless_import(user=user, bot=bot, stream=stream, created=new_sessions)
        for session_id in new_sessions:
            transaction.on_commit(partial(compact_soft_dispatch, session_id))
    log.info(
        "chats_imported",
        user_id=user.pk,
        format=result.format,
        imported=len(result.imported),
        skipped=len(result.skipped),
        bytes=reader.done,
    )
    return result


# Canonical JSON (sorted keys, no spaces), produced piece by piece: ``iterencode`` is the pure
# Python encoder, so a big value is hashed a chunk at a time and never held as one string by
# one C call that keeps the GIL for seconds (issue 30: that stalled a web process until
# uvicorn killed it). The bytes are exactly ``json.dumps``' with the same options.
_CANONICAL = json.JSONEncoder(sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _digest_update(hasher: Any, value: Any) -> None:
    for chunk in _CANONICAL.iterencode(value):
        hasher.update(chunk.encode("utf-8", "surrogatepass"))


def _without_ids(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _without_ids(v) for k, v in value.items() if k != "id"}
    return value


def _session_new(*, user: AbstractBaseUser, bot: Bot, title: str, created_at: Any) -> ChatSession:
    session = ChatSession.objects.create(user=user, bot=bot, title=title)
    if created_at is not None:
        ChatSession.objects.filter(pk=session.pk).update(created_at=created_at)
        session.created_at = created_at
    return session


def _claim_digest(
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


def _finish_session(session: ChatSession) -> int:
    tokens, _ = session_context_recount(session_id=session.pk)
    return tokens


class _MessageWriter:
    """Messages of one imported session, written in batches of ``BATCH`` and indexed for
    search with each batch."""

    def __init__(self, session: ChatSession) -> None:
        self.session = session
        self.pending: list[Message] = []
        self.reply_to: list[int | None] = []
        self.count = 0

    def add(self, message: Message, reply_to_seq: int | None = None) -> None:
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


# --- ChatGPT ----------------------------------------------------------------------------------


def _chatgpt_import(
    *, user: AbstractBaseUser, bot: Bot, stream: Any, created: list[int]
) -> ImportResult:
    result = ImportResult(format="chatgpt")
    any_item = False
    for item in stream:
        any_item = True
        where = f"conversations[{item.index}]"
        conversation = conversation_parse(item.value, where)
        hasher = hashlib.sha256()
        _digest_update(hasher, item.value)
        digest = hasher.hexdigest()
        done = ImportedConversation.objects.filter(user=user, digest=digest).select_related(
            "session"
        )
        seen = done.first()
        if seen is not None:
            result.skipped.append(_skipped(conversation.title, seen))
            continue
        session = _chatgpt_session(user=user, bot=bot, conversation=conversation)
        clash = _claim_digest(
            user=user,
            session=session,
            source=ImportedConversation.Source.CHATGPT,
            digest=digest,
            source_id=conversation.source_id,
        )
        if clash is not None:
            session.delete()
            result.skipped.append(_skipped(conversation.title, clash))
            continue
        _chatgpt_branches(session=session, bot=bot, conversation=conversation)
        created.append(session.pk)
        result.imported.append(
            {
                "session": session.pk,
                "title": session.title,
                "messages": len(conversation.transcript),
                "branches": len(conversation.branches),
                "skipped_nodes": conversation.skipped,
            }
        )
    if not any_item:
        raise refused("The file holds an empty list: no conversations to import.")
    return result


def _skipped(title: str, seen: ImportedConversation) -> dict[str, Any]:
    return {
        "title": title,
        "session": seen.session_id,
        "reason": "Imported before: this conversation is already a chat.",
    }


def _chatgpt_session(
    *, user: AbstractBaseUser, bot: Bot, conversation: Conversation
) -> ChatSession:
    first_time = conversation.created_at or (
        conversation.transcript[0].created_at if conversation.transcript else None
    )
    session = _session_new(user=user, bot=bot, title=conversation.title, created_at=first_time)
    writer = _MessageWriter(session)
    for message, reply_to in _chatgpt_messages(
        bot=bot,
        turns=conversation.transcript,
        first_seq=1,
        previous_user_seq=None,
        default_time=first_time or timezone.now(),
    ):
        message.session = session
        writer.add(message, reply_to)
    writer.flush()
    ImportedBranch.objects.bulk_create(
        [
            ImportedBranch(
                session=session,
                position=position,
                fork_seq=branch.fork_seq,
                messages=[
                    {
                        "role": t.role,
                        "kind": "chat",
                        "content": t.content,
                        "created_at": t.created_at.isoformat().replace("+00:00", "Z")
                        if t.created_at
                        else None,
                        "model": t.model,
                        "pinned": t.pinned,
                        "source_id": t.source_id,
                    }
                    for t in branch.turns
                ],
            )
            for position, branch in enumerate(conversation.branches, start=1)
        ]
    )
    _finish_session(session)
    return session


def _chatgpt_messages(
    *, bot: Bot, turns: list[Turn], first_seq: int, previous_user_seq: int | None, default_time: Any
) -> Iterator[tuple[Message, int | None]]:
    """``turns`` as unsaved messages at seqs from ``first_seq`` on, each with the seq of the
    message it answers (a reply answers the user message just before it: ``previous_user_seq``
    for the first one)."""
    stamp = default_time
    for seq, turn in enumerate(turns, start=first_seq):
        stamp = turn.created_at or stamp
        message = Message(
            seq=seq,
            role=turn.role,
            kind=Message.Kind.CHAT,
            content=turn.content,
            status=Message.Status.COMPLETE,
            token_count=count_message_tokens(turn.content, model=bot.model),
            pinned=turn.pinned,
            model=turn.model,
            finish_reason="stop" if turn.role == "assistant" else "",
            created_at=stamp,
            updated_at=stamp,
        )
        yield message, previous_user_seq if turn.role == "assistant" else None
        previous_user_seq = seq if turn.role == "user" else None


def _chatgpt_branches(*, session: ChatSession, bot: Bot, conversation: Conversation) -> None:
    """Each other branch of the tree as a branch chat of ``session`` (a version ‹ i/n › of the
    message where it leaves the transcript, flipped to and continued like an edit's), written in
    bulk (``do_branches_import``: the shared prefixes copied inside the database, the branches'
    own messages in one batched insert). Only their own messages are indexed for search (the
    prefix is found in the original, as for any branch); a branch compacts when it is
    continued, like any chat, so the import's background work stays one compaction per
    conversation. The branches also stay in ``ImportedBranch``, which the lossless export
    carries."""
    if not conversation.branches:
        return
    by_seq = dict(enumerate(conversation.transcript, start=1))
    branches = []
    for branch in conversation.branches:
        fork = by_seq.get(branch.fork_seq)
        written = list(
            _chatgpt_messages(
                bot=bot,
                turns=branch.turns,
                first_seq=branch.fork_seq + 1,
                previous_user_seq=branch.fork_seq if fork and fork.role == "user" else None,
                default_time=(fork.created_at if fork else None)
                or session.created_at
                or timezone.now(),
            )
        )
        branches.append(
            ImportedBranchMessages(
                fork_seq=branch.fork_seq,
                messages=[m for m, _ in written],
                reply_to_seqs=[r for _, r in written],
            )
        )
    own = do_branches_import(session=session, branches=branches)
    messages_index_written(message_ids=[m.pk for m in own])


# --- lossless ---------------------------------------------------------------------------------


class _Lossless:
    """The state of one lossless import while its items stream by."""

    def __init__(self, *, user: AbstractBaseUser, bot: Bot) -> None:
        self.user, self.bot = user, bot
        self.hasher = hashlib.sha256()
        self.session: ChatSession | None = None
        self.summaries: dict[int, Summary] = {}
        self.records: dict[str, MemoryRecord] = {}
        self.last_seq = 0
        self.seqs: set[int] = set()
        self.writer: _MessageWriter | None = None
        self.branches = 0
        self.unfinished = 0
        self.seen_keys: list[str] = []

    def need_session(self, where: str) -> ChatSession:
        if self.session is None:
            raise refused(f"{where}: comes before 'session'; the session must come first.")
        return self.session

    def feed(self, item: Item) -> None:
        key = item.key or ""
        if key not in LOSSLESS_KEYS and key not in ("format", "version"):
            # Refused before it is hashed: an unknown key's value is never encoded.
            raise refused(f"{key[:60]}: not a part of the {FORMAT} format.")
        if item.index is None and key in LOSSLESS_KEYS[1:]:
            raise refused(f"{key}: must be a list.")
        _digest_update(self.hasher, [key, item.index, _without_ids(item.value)])
        where = key if item.index is None else f"{key}[{item.index}]"
        if key == "format":
            return  # checked first, in _lossless_import
        if key == "version":
            f.integer(item.value, "version", minimum=VERSION, maximum=VERSION)
        elif key == "session":
            self.session_start(f.obj(item.value, "session"))
        elif key == "summaries":
            self.summary(f.obj(item.value, where), where)
        elif key == "records":
            self.record(f.obj(item.value, where), where)
        elif key == "compaction_events":
            self.event(f.obj(item.value, where), where)
        elif key == "messages":
            self.message(f.obj(item.value, where), where)
        elif key == "branches":
            self.branch(f.obj(item.value, where), where)
        else:
            raise refused(f"{key[:60]}: not a part of the {FORMAT} format.")
        if key not in self.seen_keys:
            self.seen_keys.append(key)

    def session_start(self, raw: dict[str, Any]) -> None:
        if self.session is not None:
            raise refused("session: appears twice.")
        title = f.text(raw.get("title", ""), "session.title", max_bytes=200)
        created = f.when(raw.get("created_at"), "session.created_at", allow_null=True)
        self.session = _session_new(user=self.user, bot=self.bot, title=title, created_at=created)
        self.writer = _MessageWriter(self.session)

    def summary(self, raw: dict[str, Any], where: str) -> None:
        session = self.need_session(where)
        ref = f.integer(raw.get("ref"), f"{where}.ref", minimum=1)
        if ref in self.summaries:
            raise refused(f"{where}.ref: {ref} is used twice.")
        first = f.integer(raw.get("first_seq"), f"{where}.first_seq", minimum=1)
        last = f.integer(raw.get("last_seq"), f"{where}.last_seq", minimum=first or 1)
        parents = []
        for i, parent in enumerate(f.listing(raw.get("parents", []), f"{where}.parents")):
            p = f.integer(parent, f"{where}.parents[{i}]", minimum=1)
            if p not in self.summaries:
                raise refused(f"{where}.parents[{i}]: names no summary listed before it.")
            parents.append(self.summaries[p])
        missing = f.listing(raw.get("missing_facts", []), f"{where}.missing_facts")
        for i, fact in enumerate(missing):
            f.text(fact, f"{where}.missing_facts[{i}]", max_bytes=1000)
        summary_text = f.text(raw.get("text"), f"{where}.text")
        summary = Summary.objects.create(
            session=session,
            level=f.integer(raw.get("level", 1), f"{where}.level", minimum=1, maximum=100),
            text=summary_text,
            token_count=max(
                f.integer(raw.get("token_count", 0), f"{where}.token_count", maximum=TOKENS_MAX)
                or 0,
                count_tokens(summary_text, model=self.bot.model),
            ),
            first_seq=first,
            last_seq=last,
            source_tokens=f.integer(
                raw.get("source_tokens", 0), f"{where}.source_tokens", maximum=TOKENS_MAX
            ),
            model=f.text(raw.get("model", ""), f"{where}.model", max_bytes=200),
            trigger=f.choice(raw.get("trigger"), f"{where}.trigger", TRIGGERS),
            status=f.choice(raw.get("status", "active"), f"{where}.status", SUMMARY_STATUSES),
            retention=f.number(
                raw.get("retention", 0.0), f"{where}.retention", minimum=0, maximum=1
            ),
            missing_facts=missing,
            focus=f.text(raw.get("focus", ""), f"{where}.focus", max_bytes=500),
        )
        if parents:
            summary.parents.set(parents)
        Summary.objects.filter(pk=summary.pk).update(
            created_at=f.when(raw.get("created_at"), f"{where}.created_at"),
            superseded_at=f.when(
                raw.get("superseded_at"), f"{where}.superseded_at", allow_null=True
            ),
        )
        self.summaries[ref or 0] = summary

    def record(self, raw: dict[str, Any], where: str) -> None:
        session = self.need_session(where)
        name = f.text(raw.get("name"), f"{where}.name", max_bytes=80)
        if not MemoryRecord.name_is_valid(name):
            raise refused(
                f"{where}.name: use 1–80 characters: lowercase letters, digits, '_' and '-'."
            )
        if name in self.records:
            raise refused(f"{where}.name: '{name}' is listed twice.")
        kind = f.choice(raw.get("kind"), f"{where}.kind", MemoryRecord.Kind.values)
        first = f.integer(raw.get("first_seq"), f"{where}.first_seq", minimum=1, allow_null=True)
        last = f.integer(raw.get("last_seq"), f"{where}.last_seq", minimum=1, allow_null=True)
        if (first is None) != (last is None) or (
            first is not None and last is not None and first > last
        ):
            raise refused(
                f"{where}: first_seq and last_seq must both be set (first ≤ last) or both null."
            )
        if kind == MemoryRecord.Kind.SNAPSHOT and first is None:
            raise refused(f"{where}: a snapshot needs first_seq and last_seq.")
        body = f.text(raw.get("body"), f"{where}.body", max_bytes=settings.MESSAGE_MAX_BYTES * 8)
        description = f.text(raw.get("description"), f"{where}.description", max_bytes=560)
        if len(description) > 140 or "\n" in description:
            raise refused(f"{where}.description: one line of at most 140 characters.")
        record = MemoryRecord.objects.create(
            session=session,
            scope=MemoryRecord.Scope.SESSION,
            name=name,
            kind=kind,
            description=description,
            body=body,
            token_count=count_tokens(body, model=self.bot.model),
            first_seq=first,
            last_seq=last,
            indexed=f.boolean(raw.get("indexed", True), f"{where}.indexed"),
        )
        MemoryRecord.objects.filter(pk=record.pk).update(
            created_at=f.when(raw.get("created_at"), f"{where}.created_at"),
            updated_at=f.when(raw.get("updated_at"), f"{where}.updated_at"),
        )
        self.records[name] = record

    def event(self, raw: dict[str, Any], where: str) -> None:
        session = self.need_session(where)
        snapshot = raw.get("snapshot")
        if snapshot is not None and snapshot not in self.records:
            raise refused(f"{where}.snapshot: names no record listed before it.")
        summary_ref = f.integer(raw.get("summary"), f"{where}.summary", minimum=1, allow_null=True)
        if summary_ref is not None and summary_ref not in self.summaries:
            raise refused(f"{where}.summary: names no summary listed before it.")
        values: dict[str, Any] = {
            "trigger": f.choice(raw.get("trigger"), f"{where}.trigger", TRIGGERS),
            "outcome": f.choice(
                raw.get("outcome"), f"{where}.outcome", CompactionEvent.Outcome.values
            ),
            "reason": f.text(raw.get("reason", ""), f"{where}.reason", max_bytes=64),
            "model": f.text(raw.get("model", ""), f"{where}.model", max_bytes=200),
            "error": f.text(raw.get("error", ""), f"{where}.error", max_bytes=20_000),
        }
        for name in (
            "tokens_before",
            "tokens_after",
            "source_tokens",
            "summary_tokens",
            "duration_ms",
        ):
            values[name] = f.integer(raw.get(name, 0), f"{where}.{name}", maximum=TOKENS_MAX)
        event = CompactionEvent.objects.create(
            session=session,
            snapshot=self.records[snapshot] if snapshot is not None else None,
            summary=self.summaries[summary_ref] if summary_ref is not None else None,
            **values,
        )
        CompactionEvent.objects.filter(pk=event.pk).update(
            created_at=f.when(raw.get("created_at"), f"{where}.created_at")
        )

    def message(self, raw: dict[str, Any], where: str) -> None:
        session = self.need_session(where)
        assert self.writer is not None
        seq = f.integer(raw.get("seq"), f"{where}.seq", minimum=1) or 0
        if seq <= self.last_seq:
            raise refused(f"{where}.seq: {seq} does not follow {self.last_seq}: seqs must rise.")
        self.last_seq = seq
        role = f.choice(raw.get("role"), f"{where}.role", Message.Role.values)
        kind = f.choice(raw.get("kind", "chat"), f"{where}.kind", Message.Kind.values)
        status = f.choice(raw.get("status", "complete"), f"{where}.status", Message.Status.values)
        if status in (Message.Status.PENDING, Message.Status.STREAMING):
            status = Message.Status.INTERRUPTED  # no turn runs for an imported reply
            self.unfinished += 1
        content = f.text(raw.get("content", ""), f"{where}.content")
        model = f.text(raw.get("model", ""), f"{where}.model", max_bytes=200)
        stated = (
            f.integer(raw.get("token_count", 0), f"{where}.token_count", maximum=TOKENS_MAX) or 0
        )
        # What reaches a model is counted here, never taken on trust (a file claiming 0 tokens
        # would slip past admission); commands and notices never reach one and keep theirs.
        in_context = kind in (Message.Kind.CHAT, Message.Kind.TOOL) and content
        counted = count_message_tokens(content, model=model or self.bot.model) if in_context else 0
        ref = f.integer(
            raw.get("compacted_by"), f"{where}.compacted_by", minimum=1, allow_null=True
        )
        if ref is not None and ref not in self.summaries:
            raise refused(f"{where}.compacted_by: names no summary listed before the messages.")
        reply_to = f.integer(raw.get("reply_to"), f"{where}.reply_to", minimum=1, allow_null=True)
        if reply_to is not None and reply_to not in self.seqs:
            raise refused(f"{where}.reply_to: names no earlier message.")
        tool_calls = f.listing(raw.get("tool_calls", []), f"{where}.tool_calls", max_items=100)
        f.text(json.dumps(tool_calls), f"{where}.tool_calls")
        created = f.when(raw.get("created_at"), f"{where}.created_at")
        updated = f.when(raw.get("updated_at"), f"{where}.updated_at", allow_null=True) or created
        self.seqs.add(seq)
        self.writer.add(
            Message(
                session=session,
                seq=seq,
                role=role,
                kind=kind,
                status=status,
                content=content,
                token_count=max(stated, counted),
                pinned=f.boolean(raw.get("pinned", False), f"{where}.pinned"),
                model=model,
                finish_reason=f.text(
                    raw.get("finish_reason", ""), f"{where}.finish_reason", max_bytes=32
                ),
                prompt_tokens=f.integer(
                    raw.get("prompt_tokens"), f"{where}.prompt_tokens", allow_null=True
                ),
                completion_tokens=f.integer(
                    raw.get("completion_tokens"), f"{where}.completion_tokens", allow_null=True
                ),
                tool_calls=tool_calls,
                tool_call_id=f.text(
                    raw.get("tool_call_id", ""), f"{where}.tool_call_id", max_bytes=100
                ),
                tool_name=f.text(raw.get("tool_name", ""), f"{where}.tool_name", max_bytes=100),
                error_code=f.text(raw.get("error_code", ""), f"{where}.error_code", max_bytes=64),
                error_message=f.text(raw.get("error_message", ""), f"{where}.error_message"),
                client_id=f.text(raw.get("client_id", ""), f"{where}.client_id", max_bytes=100),
                compacted_by_id=self.summaries[ref].pk if ref is not None else None,
                created_at=created,
                updated_at=updated,
            ),
            reply_to,
        )

    def branch(self, raw: dict[str, Any], where: str) -> None:
        session = self.need_session(where)
        position = f.integer(raw.get("position"), f"{where}.position", minimum=1)
        fork_seq = f.integer(raw.get("fork_seq"), f"{where}.fork_seq")
        messages = f.listing(raw.get("messages"), f"{where}.messages")
        for i, message in enumerate(messages):
            m = f.obj(message, f"{where}.messages[{i}]")
            f.choice(m.get("role"), f"{where}.messages[{i}].role", Message.Role.values)
            f.text(m.get("content"), f"{where}.messages[{i}].content")
        ImportedBranch.objects.create(
            session=session, position=position, fork_seq=fork_seq, messages=messages
        )
        self.branches += 1


def _lossless_import(
    *, user: AbstractBaseUser, bot: Bot, stream: Any, created: list[int]
) -> ImportResult:
    result = ImportResult(format="lossless")
    state = _Lossless(user=user, bot=bot)
    first = next(stream, None)
    if first is None or first.key != "format" or first.value != FORMAT:
        raise refused(
            "The file is a JSON object but not a chat export: a chat-platform export starts "
            f'with "format": "{FORMAT}"; a ChatGPT export is conversations.json (a list).'
        )
    state.feed(first)
    for item in stream:
        state.feed(item)
    if "version" not in state.seen_keys:
        raise refused(f"version: missing (this importer reads version {VERSION}).")
    session = state.need_session("the file")
    assert state.writer is not None
    state.writer.flush()
    _finish_session(session)
    digest = state.hasher.hexdigest()
    clash = _claim_digest(
        user=user, session=session, source=ImportedConversation.Source.LOSSLESS, digest=digest
    )
    if clash is not None:
        session.delete()
        result.skipped.append(_skipped(session.title, clash))
        return result
    created.append(session.pk)
    result.imported.append(
        {
            "session": session.pk,
            "title": session.title,
            "messages": state.writer.count,
            "branches": state.branches,
            "unfinished_as_interrupted": state.unfinished,
        }
    )
    return result
