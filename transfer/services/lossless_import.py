"""The lossless format (``chat-platform.session``, version 1): one chat with its summaries,
records, compaction events, messages and imported branches, validated field by field as its
items stream by (docs/transfer.md)."""

import hashlib
import json
from typing import Any

from django.conf import settings
from django.contrib.auth.base_user import AbstractBaseUser
from django.db.models import Exists, OuterRef
from django.utils import timezone

from attachments.queries import image_tokens_named
from bots.models import Bot, ChatSession, Message
from chat_platform.llm.tokens import count_message_tokens, count_tokens
from compaction.engine.coverage import seats_count
from compaction.models import TRIGGERS, CompactionEvent, Summary, SummaryCoverage
from memory.models import MemoryRecord
from memory.services import messages_index_snapshots
from transfer import fields as f
from transfer.lossless import FORMAT, VERSION
from transfer.models import ImportedBranch, ImportedConversation
from transfer.services.common import (
    STEP_ITEMS,
    ChatsMade,
    ImportResult,
    MessageWriter,
    digest_claim,
    digest_update,
    in_steps,
    session_finish,
    skipped_entry,
    without_ids,
)
from transfer.streaming import Item, refused

TOKENS_MAX = 100_000_000
# Undone (reverted) summaries too: an export of a chat with one, or of an imported room (whose
# seats' summaries are imported undone), is imported again (docs/transfer.md).
# The highest seq an imported message may have (``_Lossless.message``).
SEQ_MAX = 1_000_000_000
# Covered seqs looked up per statement (``_coverage_write``).
COVERAGE_BATCH = 2_000
SUMMARY_STATUSES = [s for s in Summary.Status.values if s in ("active", "superseded", "reverted")]
LOSSLESS_KEYS = ("session", "summaries", "records", "compaction_events", "messages", "branches")


class _Lossless:
    """The state of one lossless import while its items stream by."""

    def __init__(self, *, user: AbstractBaseUser, bot: Bot, made: ChatsMade) -> None:
        self.user, self.bot, self.made = user, bot, made
        self.hasher = hashlib.sha256()
        self.session: ChatSession | None = None
        self.summaries: dict[int, Summary] = {}
        self.records: dict[str, MemoryRecord] = {}
        self.last_seq = 0
        self.seqs: set[int] = set()
        # The seqs each summary covers (``compacted_by``), by summary id: its seat's coverage
        # rows once the messages are written (``_coverage_write``).
        self.covering: dict[int, list[int]] = {}
        self.writer: MessageWriter | None = None
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
        digest_update(self.hasher, [key, item.index, without_ids(item.value)])
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
        self.session = self.made.session_new(
            user=self.user, bot=self.bot, title=title, created_at=created
        )
        self.writer = MessageWriter(self.session, embed=self.made.embed)

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
        created_at = f.when(raw.get("created_at"), f"{where}.created_at")
        Summary.objects.filter(pk=summary.pk).update(
            created_at=created_at,
            superseded_at=f.when(
                raw.get("superseded_at"), f"{where}.superseded_at", allow_null=True
            ),
            # Undone, not held: the export says nothing of a hold, and a held span would never
            # be compacted again.
            reverted_at=created_at if summary.status == Summary.Status.REVERTED else None,
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
        # Room above it for the chat to go on: at the column's maximum every later send of
        # the chat failed (PostgreSQL: numeric value out of range).
        seq = f.integer(raw.get("seq"), f"{where}.seq", minimum=1, maximum=SEQ_MAX) or 0
        if seq <= self.last_seq:
            raise refused(f"{where}.seq: {seq} does not follow {self.last_seq}: seqs must rise.")
        self.last_seq = seq
        role = f.choice(raw.get("role"), f"{where}.role", Message.Role.values)
        kind = f.choice(raw.get("kind", "chat"), f"{where}.kind", Message.Kind.values)
        status = f.choice(raw.get("status", "complete"), f"{where}.status", Message.Status.values)
        if status in (Message.Status.PENDING, Message.Status.STREAMING):
            status = Message.Status.INTERRUPTED  # no turn runs for an imported reply
            self.unfinished += 1
        content = _content(raw, where)
        model = f.text(raw.get("model", ""), f"{where}.model", max_bytes=200)
        stated = (
            f.integer(raw.get("token_count", 0), f"{where}.token_count", maximum=TOKENS_MAX) or 0
        )
        # What reaches a model is counted here, never taken on trust (a file claiming 0 tokens
        # would slip past admission); commands and notices never reach one and keep theirs.
        in_context = kind in (Message.Kind.CHAT, Message.Kind.TOOL) and content
        counted = (
            count_message_tokens(content, model=model or self.bot.model)
            + (image_tokens_named(content) if role == Message.Role.USER else 0)
            if in_context
            else 0
        )
        ref = f.integer(
            raw.get("compacted_by"), f"{where}.compacted_by", minimum=1, allow_null=True
        )
        if ref is not None and ref not in self.summaries:
            raise refused(f"{where}.compacted_by: names no summary listed before the messages.")
        reply_to = f.integer(raw.get("reply_to"), f"{where}.reply_to", minimum=1, allow_null=True)
        if reply_to is not None and reply_to not in self.seqs:
            raise refused(f"{where}.reply_to: names no earlier message.")
        tool_calls = _tool_calls(raw.get("tool_calls", []), f"{where}.tool_calls", role=role)
        created = f.when(raw.get("created_at"), f"{where}.created_at")
        updated = f.when(raw.get("updated_at"), f"{where}.updated_at", allow_null=True) or created
        self.seqs.add(seq)
        if ref is not None:
            self.covering.setdefault(self.summaries[ref].pk, []).append(seq)
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
                tool_ok=_tool_ok(raw, where),
                error_code=f.text(raw.get("error_code", ""), f"{where}.error_code", max_bytes=64),
                error_message=f.text(raw.get("error_message", ""), f"{where}.error_message"),
                client_id=f.text(raw.get("client_id", ""), f"{where}.client_id", max_bytes=100),
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


def _content(raw: dict[str, Any], where: str) -> str:
    """A message's text, which holds its attached files' text too (docs/attachments.md): a
    chat with a 5 MB file attached was exported by a file its import refused."""
    return f.text(
        raw.get("content", ""),
        f"{where}.content",
        max_bytes=settings.MESSAGE_MAX_BYTES + settings.ATTACHMENT_MESSAGE_MAX_BYTES,
    )


def _tool_ok(raw: dict[str, Any], where: str) -> bool | None:
    value = raw.get("tool_ok")
    return None if value is None else f.boolean(value, f"{where}.tool_ok")


def _coverage_write(session: ChatSession, covering: dict[int, list[int]]) -> None:
    """What each summary covers (``compacted_by``), as the chat's bot's seat's coverage rows
    (the one store of "compacted", docs/rooms.md), then the seat's totals and covered floor."""
    for summary_id, seqs in covering.items():
        for start in range(0, len(seqs), COVERAGE_BATCH):
            pks = Message.objects.filter(
                session=session, seq__in=seqs[start : start + COVERAGE_BATCH]
            ).values_list("pk", flat=True)
            SummaryCoverage.objects.bulk_create(
                SummaryCoverage(summary_id=summary_id, bot_id=session.bot_id, message_id=pk)
                for pk in pks
            )
    if covering:
        seats_count(target=session)


def _summaries_of_nothing_undone(session: ChatSession) -> None:
    """An active summary that no message names (``compacted_by``) stands for nothing here: a
    room's export carries every bot's summaries, each over its own seat's coverage, which a chat
    of one bot cannot hold (docs/transfer.md). Imported as they were, the seats' summaries of
    one range stood in the context side by side and beside the very messages they summarise.
    They are kept, for the audit, as undone and not held: their messages are in the context,
    and compaction takes them again when it is due."""
    covering = SummaryCoverage.objects.filter(summary_id=OuterRef("pk"))
    Summary.objects.filter(session=session, status=Summary.Status.ACTIVE).exclude(
        Exists(covering)
    ).update(status=Summary.Status.REVERTED, reverted_at=timezone.now(), held=False)


def lossless_import(
    *, user: AbstractBaseUser, bot: Bot, stream: Any, made: ChatsMade
) -> ImportResult:
    """Written in steps (docs/transfer.md, "Written in steps"): ``STEP_ITEMS`` items read, then
    written in one transaction; the chat's last messages, its coverage, its search rows and its
    digest in a last one."""
    result = ImportResult(format="lossless")
    state = _Lossless(user=user, bot=bot, made=made)
    first = next(stream, None)
    if first is None or first.key != "format" or first.value != FORMAT:
        raise refused(
            "The file is a JSON object but not a chat export: a chat-platform export starts "
            f'with "format": "{FORMAT}"; a ChatGPT export is conversations.json (a list).'
        )
    state.feed(first)
    for step in in_steps(stream, STEP_ITEMS):
        with made.step():
            for item in step:
                state.feed(item)
    if "version" not in state.seen_keys:
        raise refused(f"version: missing (this importer reads version {VERSION}).")
    session = state.need_session("the file")
    with made.step():
        assert state.writer is not None
        state.writer.flush()
        _coverage_write(session, state.covering)
        _summaries_of_nothing_undone(session)
        # Written as live, the compacted messages are found in their snapshots, as in the
        # original.
        messages_index_snapshots(session_id=session.pk)
        session_finish(session)
        digest = state.hasher.hexdigest()
        clash = digest_claim(
            user=user, session=session, source=ImportedConversation.Source.LOSSLESS, digest=digest
        )
        if clash is not None:
            session.delete()
            result.skipped.append(skipped_entry(session.title, clash))
            return result
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


def _tool_calls(value: Any, where: str, *, role: str) -> list[Any]:
    """A message's calls, each ``{id, type: "function", function: {name, arguments}}``, on an
    assistant message only: a call of another shape was imported, and every later
    turn of the chat failed reading it (``'int' object has no attribute 'get'``)."""
    calls = f.listing(value, where, max_items=100)
    if calls and role != Message.Role.ASSISTANT:
        raise refused(f"{where}: only an assistant message calls tools.")
    for j, call in enumerate(calls):
        at = f"{where}[{j}]"
        function = call.get("function") if isinstance(call, dict) else None
        if not isinstance(function, dict) or call.get("type", "function") != "function":
            raise refused(f'{at}: must be {{"id", "type": "function", "function": {{...}}}}.')
        f.text(call.get("id", ""), f"{at}.id", max_bytes=100)
        if not f.text(function.get("name"), f"{at}.function.name", max_bytes=200):
            raise refused(f"{at}.function.name: must not be blank.")
        if not isinstance(function.get("arguments", ""), str | dict):
            raise refused(f"{at}.function.arguments: must be text (JSON) or an object.")
    f.text(json.dumps(calls), where)
    return calls
