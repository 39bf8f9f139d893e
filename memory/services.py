"""Writes of the memory app.

Snapshots: the exact transcript each compaction attempt sent to its summariser, written before the
call, kept on failure, indexed only once the compaction succeeded (``snapshot_*``).

Info records (``record_*``): saved by the bot (``save_record`` tool), by ``builtin/recall`` on
"remember …", or by the user over the API. Validate (``check_record_fields``), then write, then
notify after commit (``memory.updated`` to every chat whose index changed).

Names: one name means one record inside a session. ``record_create`` refuses a name the session can
already read; ``record_save`` is an upsert: saving a name again rewrites that record's description
and body (a bot correcting a fact keeps one record, not two), keeping its scope.
"""

from functools import partial
from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.db import IntegrityError, transaction
from django.db.models import Exists, F, Q
from django.utils import timezone

from bots.models import ChatSession, Message
from bots.queries import session_seat_read
from chat_platform.celery_app import runs_task
from chat_platform.errors import PayloadTooLarge, ValidationFailed
from chat_platform.llm.tokens import count_tokens
from connections import usage
from memory import embed_after_turns, embeddings, realtime
from memory.descriptions import snapshot_description
from memory.models import MemoryRecord, MessageIndex
from memory.queries import record_get_for_session, records_for_session
from memory.record_heads import other_record_heads
from memory.search_schema import (
    messages_index_copy_rows,
    messages_index_rows,
    messages_index_written_rows,
)

# The other records a snapshot's description is measured against: the newest ones, each read
# only as far as its first OTHERS_BODY_CHARS characters (one bounded query).
OTHERS_MAX = 50
OTHERS_BODY_CHARS = 20_000


def snapshot_name(first_seq: int, last_seq: int, seat_bot_id: int | None = None) -> str:
    """``snapshot_<first>_<last>``; in a room each bot snapshots the room from its own seat, so
    the name carries the bot (``snapshot_<first>_<last>_b<bot id>``: two bots compacting the same
    range keep two snapshots)."""
    if seat_bot_id is None:
        return f"snapshot_{first_seq}_{last_seq}"
    return f"snapshot_{first_seq}_{last_seq}_b{seat_bot_id}"


def _other_bodies(*, session: ChatSession, name: str) -> list[str]:
    """The bodies (heads) of the records the index may list beside ``name`` (no failed pass's)."""
    return other_record_heads(session=session, name=name, chars=OTHERS_BODY_CHARS, limit=OTHERS_MAX)


def snapshot_write(
    *,
    session: ChatSession,
    first_seq: int,
    last_seq: int,
    body: str,
    seat_bot_id: int | None = None,
) -> MemoryRecord:
    """Write (or refresh, on a retried range) the snapshot before the summariser is called. It
    names the bot whose compaction wrote it (``session``'s bot: in a room, the seat's)."""
    name = snapshot_name(first_seq, last_seq, seat_bot_id)
    fields = {
        "bot_id": session.bot_id,
        "kind": MemoryRecord.Kind.SNAPSHOT,
        "description": snapshot_description(
            first_seq, last_seq, body, _other_bodies(session=session, name=name)
        ),
        "body": body,
        "token_count": count_tokens(body),
        "first_seq": first_seq,
        "last_seq": last_seq,
        "indexed": False,
    }
    # A range is snapshotted by its seat's compaction, which holds the seat's lease: no one
    # writes this name meanwhile. A retried range's snapshot is refreshed; a new one (the usual
    # case) is one UPDATE that finds nothing and one INSERT — ``update_or_create`` made six
    # statements of it (two savepoints and a locking read), every pass of a long tool task.
    existing = MemoryRecord.objects.filter(session=session, name=name)
    if existing.update(**fields, updated_at=timezone.now()):
        return existing.get()
    return MemoryRecord.objects.create(session=session, name=name, **fields)


def snapshot_mark_indexed(*, snapshot: MemoryRecord, covered: Any = None) -> None:
    """The compaction succeeded: the snapshot joins the index, and open chats see it (after
    commit, like every ``memory.updated``). ``covered``: the ids of the messages its summary
    covers (a subquery of compaction's coverage rows; None: every finished, unpinned message
    of its span)."""
    MemoryRecord.objects.filter(pk=snapshot.pk).update(indexed=True, updated_at=timezone.now())
    assert snapshot.session_id is not None and snapshot.first_seq is not None
    assert snapshot.last_seq is not None
    session = session_seat_read(session_id=snapshot.session_id, bot_id=snapshot.bot_id)
    messages_index(
        session_id=snapshot.session_id,
        first_seq=snapshot.first_seq,
        last_seq=snapshot.last_seq,
        record_id=snapshot.pk,
        covered=covered,
    )
    transaction.on_commit(partial(realtime.notify_memory_updated, session=session))
    if session.bot.embedding_model:
        # Embedded after commit, on the compaction queue: an embedding outage never fails or
        # slows the compaction, and what it leaves pending the next compaction takes again.
        transaction.on_commit(
            partial(
                embeddings.messages_embed_dispatch,
                session.pk,
                quota=usage.scope_pairs() or None,
            )
        )


def messages_index(
    *, session_id: int, first_seq: int, last_seq: int, record_id: int, covered: Any = None
) -> int:
    """Index the compacted messages ``first_seq``–``last_seq`` of a session not indexed yet,
    each held by the record ``record_id``; how many were indexed.

    Called when a compaction succeeds (its snapshot joins the index), inside its transaction.
    A fusion's snapshot spans messages indexed by the passes before it, so they keep the
    snapshot that holds them verbatim (the fusion's holds summaries): a hit never names a
    fusion copy when the source message matches."""
    return messages_index_rows(
        Message,
        MessageIndex,
        session_id=session_id,
        first_seq=first_seq,
        last_seq=last_seq,
        record_id=record_id,
        covered=covered,
    )


def messages_index_snapshots(*, session_id: int) -> int:
    """Take a session's compacted messages into the snapshots that hold them, narrowest first
    (a pass's before a fusion's, as migration 0004's backfill did): what an import does once
    its messages, summaries and records are written. How many were taken or indexed."""
    snapshots = (
        MemoryRecord.objects.filter(session_id=session_id, kind="snapshot", indexed=True)
        .annotate(width=F("last_seq") - F("first_seq"))
        .order_by("width", "id")
        .values_list("pk", "first_seq", "last_seq")
    )
    return sum(
        messages_index(session_id=session_id, first_seq=first, last_seq=last, record_id=pk)
        for pk, first, last in snapshots
    )


def messages_index_written(
    *, message_ids: list[int], here: bool = False, embed: bool = True
) -> int:
    """Make just-written messages searchable across the user's chats at once (the turn calls
    it when a reply ends, for the reply and the message it answers; an import, for everything it
    wrote). Compaction later takes them into its snapshot (``messages_index``). For a bot with
    an embedding model they are embedded too, after commit, on the compaction queue
    (``memory.embeddings``: live messages are searched by meaning before any compaction).

    ``here``: the caller is a turn, whose process may run the embedding itself. When it serves
    the embedding task's queue (a worker of the default fleet, an embedded server), the
    embedding is queued on this process's after-turns thread (``memory.embed_after_turns``),
    where that task would put it anyway, without the task's round trip through the broker.

    ``embed=False``: indexed only; the caller has their embedding dispatched otherwise (an
    import job's child: its worker does, once the job is done)."""
    by_session: dict[int, list[int]] = {}
    done = messages_index_written_rows(
        Message, MessageIndex, message_ids=message_ids, to_embed=by_session
    )
    if not done or not embed:
        return done
    if done < len(set(message_ids)):
        # Some were indexed before (or have nothing to index): any of them still without a
        # vector is embedded too. When every one was indexed now, the read above said which
        # to embed (a turn's question and reply: one statement less).
        by_session = {}
        for pk, session_id in (
            MessageIndex.objects.filter(message_id__in=message_ids, embedding__isnull=True)
            .exclude(session__bot__embedding_model="")
            .values_list("message_id", "session_id")
        ):
            by_session.setdefault(session_id, []).append(pk)
    in_place = here and runs_task(embeddings.EMBED_TASK)
    # The API key whose action wrote them pays for their embedding too.
    quota = usage.scope_pairs() or None
    for session_id, pending in by_session.items():
        if in_place:
            work = partial(
                embed_after_turns.messages_embed_after_turns,
                session_id=session_id,
                message_ids=sorted(pending),
                quota=quota,
            )
        else:
            work = partial(embeddings.messages_embed_dispatch, session_id, sorted(pending), quota)
        transaction.on_commit(work)
    return done


def snapshots_for(
    *, session: ChatSession, ranges: list[tuple[int, int]], seat_bot_id: int | None = None
) -> dict[tuple[int, int], str]:
    names = {snapshot_name(first, last, seat_bot_id): (first, last) for first, last in ranges}
    return {
        names[name]: body
        for name, body in MemoryRecord.objects.filter(
            session=session, name__in=list(names), kind=MemoryRecord.Kind.SNAPSHOT
        ).values_list("name", "body")
    }


# --- info records -----------------------------------------------------------------------------

SNAPSHOT_PREFIX = "snapshot_"
SCOPES = tuple(MemoryRecord.Scope.values)


def _text_or_error(value: object, field: str, errors: dict[str, list[str]]) -> str:
    if not isinstance(value, str):
        errors[field] = ["This field is required and must be text."]
        return ""
    return value


def _clean_or_raise(record: MemoryRecord) -> None:
    """The model's field validation (name pattern, lengths, storable text). Uniqueness is checked
    by the callers with a clear message, and held by the database's constraints."""
    try:
        record.full_clean(exclude=["session", "user", "bot"], validate_constraints=False)
    except DjangoValidationError as exc:
        raise ValidationFailed(details=exc.message_dict) from None


def check_record_fields(
    *, name: object, description: object, body: object, scope: object
) -> tuple[str, str, str, str]:
    """Types, size and the rules the model cannot express: (name, description, body, scope).

    The description is one line of the index, so runs of whitespace (newlines too) become one
    space. A body over 1 MB is ``payload_too_large``, the same rule as message content."""
    errors: dict[str, list[str]] = {}
    name = _text_or_error(name, "name", errors)
    description = " ".join(_text_or_error(description, "description", errors).split())
    body = _text_or_error(body, "body", errors)
    if scope not in SCOPES:
        errors["scope"] = [f"Must be one of: {', '.join(SCOPES)}."]
    if "body" not in errors:
        if len(body.encode("utf-8", "surrogatepass")) > settings.MESSAGE_MAX_BYTES:
            raise PayloadTooLarge(
                "The record body is larger than 1 MB.",
                details={"body": ["At most 1 MB."], "max_bytes": settings.MESSAGE_MAX_BYTES},
            )
        if not body.strip():
            errors["body"] = ["This field may not be blank."]
    if "description" not in errors and not description:
        errors["description"] = ["This field may not be blank."]
    if "name" not in errors and name.startswith(SNAPSHOT_PREFIX):
        errors["name"] = [f"Names starting with '{SNAPSHOT_PREFIX}' are reserved for snapshots."]
    if errors:
        raise ValidationFailed(details=errors)
    return name, description, body, str(scope)


def _owner_fields(*, session: ChatSession, scope: str) -> dict[str, Any]:
    if scope == MemoryRecord.Scope.BOT:
        return {"session": None, "user_id": session.user_id, "bot_id": session.bot_id}
    return {"session": session, "user_id": None, "bot_id": None}


def _readable(*, session: ChatSession, name: str) -> MemoryRecord | None:
    if not MemoryRecord.name_is_valid(name):
        return None
    return records_for_session(session=session).filter(name=name).first()


def _notify_on_commit(*, record: MemoryRecord, session: ChatSession) -> None:
    transaction.on_commit(partial(realtime.notify_record_changed, record=record, session=session))


def _name_taken(name: str) -> ValidationFailed:
    return ValidationFailed(
        details={"name": [f"A record named '{name}' already exists in this chat."]}
    )


def do_record_insert(
    *, session: ChatSession, name: str, description: str, body: str, scope: str
) -> MemoryRecord:
    record = MemoryRecord(
        name=name,
        kind=MemoryRecord.Kind.INFO,
        scope=scope,
        description=description,
        body=body,
        token_count=count_tokens(body, model=session.bot.model),
        **_owner_fields(session=session, scope=scope),
    )
    _clean_or_raise(record)
    with transaction.atomic():
        record.save()
    return record


def do_record_rewrite(
    *, record: MemoryRecord, session: ChatSession, description: str, body: str
) -> MemoryRecord:
    record.description = description
    record.body = body
    record.token_count = count_tokens(body, model=session.bot.model)
    _clean_or_raise(record)
    record.save(update_fields=["description", "body", "token_count", "updated_at"])
    return record


def _check_writable(record: MemoryRecord) -> None:
    if record.kind == MemoryRecord.Kind.SNAPSHOT:
        raise ValidationFailed(
            "Snapshots are read-only.", details={"kind": ["Snapshots are read-only."]}
        )


def record_create(
    *,
    session: ChatSession,
    name: object,
    description: object,
    body: object,
    scope: object = MemoryRecord.Scope.SESSION,
) -> MemoryRecord:
    """A new info record (the user's API). A name this chat can already read is refused."""
    name, description, body, scope = check_record_fields(
        name=name, description=description, body=body, scope=scope
    )
    with transaction.atomic():
        if _readable(session=session, name=name) is not None:
            raise _name_taken(name)
        try:
            record = do_record_insert(
                session=session, name=name, description=description, body=body, scope=scope
            )
        except IntegrityError:  # a concurrent create of the same name won
            raise _name_taken(name) from None
        _notify_on_commit(record=record, session=session)
    return record


def record_save(
    *,
    session: ChatSession,
    name: object,
    description: object,
    body: object,
    scope: object = None,
) -> MemoryRecord:
    """Save an info record by name, for the bot's ``save_record`` tool and "remember …".

    Upsert: a readable info record of that name is rewritten (description and body) and keeps
    its scope; otherwise a new one is made in ``scope`` (default ``session``). Asking for a
    different scope than the existing record's, or naming a snapshot, is ``validation_error``."""
    requested = scope
    name, description, body, scope = check_record_fields(
        name=name,
        description=description,
        body=body,
        scope=MemoryRecord.Scope.SESSION if scope is None else scope,
    )
    for attempt in (1, 2):
        try:
            with transaction.atomic():
                record = _record_save_once(
                    session=session,
                    name=name,
                    description=description,
                    body=body,
                    scope=scope,
                    scope_given=requested is not None,
                )
                _notify_on_commit(record=record, session=session)
            return record
        except IntegrityError:
            if attempt == 2:  # pragma: no cover - needs two lost races in a row
                raise _name_taken(name) from None
    raise AssertionError("unreachable")  # pragma: no cover


def _record_save_once(
    *,
    session: ChatSession,
    name: str,
    description: str,
    body: str,
    scope: str,
    scope_given: bool,
) -> MemoryRecord:
    existing = _readable(session=session, name=name)
    if existing is None:
        return do_record_insert(
            session=session, name=name, description=description, body=body, scope=scope
        )
    _check_writable(existing)
    if scope_given and existing.scope != scope:
        raise ValidationFailed(
            details={
                "scope": [f"'{name}' is a {existing.scope}-scoped record; its scope cannot change."]
            }
        )
    locked = MemoryRecord.objects.select_for_update().get(pk=existing.pk)
    return do_record_rewrite(record=locked, session=session, description=description, body=body)


def record_update(
    *,
    session: ChatSession,
    name: object,
    description: object | None = None,
    body: object | None = None,
) -> MemoryRecord:
    """Change an info record's description and/or body (``None``: keep). Names and scopes are
    immutable: the name is the record's address (URLs, the index the model has already seen)."""
    record = record_get_for_session(session=session, name=name)
    _check_writable(record)
    if description is None and body is None:
        return record
    _, description, body, _ = check_record_fields(
        name=record.name,
        description=record.description if description is None else description,
        body=record.body if body is None else body,
        scope=record.scope,
    )
    with transaction.atomic():
        locked = MemoryRecord.objects.defer("search_vector").select_for_update().get(pk=record.pk)
        record = do_record_rewrite(
            record=locked, session=session, description=description, body=body
        )
        _notify_on_commit(record=record, session=session)
    return record


def record_delete(*, session: ChatSession, name: object) -> None:
    """Delete an info record readable from ``session`` (a bot-scoped one leaves every chat)."""
    record = record_get_for_session(session=session, name=name)
    _check_writable(record)
    with transaction.atomic():
        MemoryRecord.objects.filter(pk=record.pk).delete()
        _notify_on_commit(record=record, session=session)


def messages_index_copy(*, source_id: int, targets: list[tuple[int, int]]) -> int:
    """Branches of chat ``source_id`` (each ``(chat, before_seq)``) indexed for their copies
    of its messages as their originals are (``messages_index_copy_rows``)."""
    return messages_index_copy_rows(Message, MessageIndex, source_id=source_id, targets=targets)


def records_copy_prefix(*, source: ChatSession, target: ChatSession, before_seq: int) -> int:
    """A branch carries over the chat's own records as they stood at the branch point: its notes
    (info records of the session) made before the first message it leaves out — one saved
    later belongs to the version left behind — and the snapshots of compactions that covered
    only messages before the branch point, with their copied messages indexed for search; the
    other copies are indexed as the original's messages are (``messages_index_copy_rows``).
    Bot- and user-wide records are shared anyway."""
    cut = Message.objects.filter(session=source, seq=before_seq).values("created_at")[:1]
    notes = Q(kind=MemoryRecord.Kind.INFO) & (Q(created_at__lt=cut) | ~Exists(cut))
    records = MemoryRecord.objects.filter(session=source, scope=MemoryRecord.Scope.SESSION).filter(
        notes | Q(kind=MemoryRecord.Kind.SNAPSHOT, last_seq__lt=before_seq)
    )
    copied = 0
    for record in records.order_by("pk"):
        stamps = (record.created_at, record.updated_at)
        record.pk = None
        record.session = target
        record.save(force_insert=True)
        MemoryRecord.objects.filter(pk=record.pk).update(created_at=stamps[0], updated_at=stamps[1])
        if record.kind == MemoryRecord.Kind.SNAPSHOT and record.indexed:
            assert record.first_seq is not None and record.last_seq is not None
            messages_index(
                session_id=target.pk,
                first_seq=record.first_seq,
                last_seq=record.last_seq,
                record_id=record.pk,
            )
        copied += 1
    messages_index_copy(source_id=source.pk, targets=[(target.pk, before_seq)])
    if copied and target.bot.embedding_model:
        # The copies are the branch's own index rows: embedded like a compaction's.
        transaction.on_commit(
            partial(
                embeddings.messages_embed_dispatch, target.pk, quota=usage.scope_pairs() or None
            )
        )
    return copied
