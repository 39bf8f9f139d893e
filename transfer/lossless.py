"""The lossless JSON format of one chat (``chat-platform.session``, version 1).

Everything the platform keeps about a chat, in the order an importer needs it: ``format`` and
``version`` first, then ``session``, ``summaries`` (each with a file-local ``ref``, its
``parents`` as refs, its coverage as ``first_seq``–``last_seq`` and on each message
``compacted_by``), ``records`` (the chat's own snapshots and notes, by name), ``compaction_events``
(naming their snapshot by name and their summary by ref), ``messages`` (seq order, ``reply_to``
as a seq) and ``branches`` (alternate branches: empty until the branch feature lands, or the
ones an import of a ChatGPT tree kept). Database ids appear only under ``id`` keys, so an export
of an import equals the original export but for them (``tests/transfer``).

Written as a stream of JSON text (messages read in chunks), read as a stream of items
(``transfer.streaming``): neither side holds a long chat whole.
"""

import json
from collections.abc import Iterator
from typing import Any

from django.db.models import BigIntegerField, QuerySet, Value

from bots.models import ChatSession, Message
from chat_platform.isotime import iso_utc
from compaction.models import CompactionEvent, Summary
from compaction.seats import seat_covering
from memory.models import MemoryRecord
from transfer.models import ImportedBranch

FORMAT = "chat-platform.session"
VERSION = 1
EXPORT_CHUNK = 500

MESSAGE_FIELDS = (
    "seq",
    "role",
    "kind",
    "status",
    "content",
    "token_count",
    "pinned",
    "model",
    "finish_reason",
    "prompt_tokens",
    "completion_tokens",
    "tool_calls",
    "tool_call_id",
    "tool_name",
    "tool_ok",
    "error_code",
    "error_message",
    "client_id",
)
SUMMARY_FIELDS = (
    "level",
    "text",
    "token_count",
    "first_seq",
    "last_seq",
    "source_tokens",
    "model",
    "trigger",
    "status",
    "retention",
    "missing_facts",
    "focus",
)
RECORD_FIELDS = (
    "name",
    "kind",
    "description",
    "body",
    "token_count",
    "first_seq",
    "last_seq",
    "indexed",
)
EVENT_FIELDS = (
    "trigger",
    "outcome",
    "reason",
    "tokens_before",
    "tokens_after",
    "source_tokens",
    "summary_tokens",
    "model",
    "duration_ms",
    "error",
)


def _dump(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def session_head(session: ChatSession) -> dict[str, Any]:
    return {
        "id": session.pk,
        "title": session.title,
        "created_at": iso_utc(session.created_at),
        "bot": {"id": session.bot_id, "name": session.bot.name, "model": session.bot.model},
    }


def summary_refs(session: ChatSession) -> dict[int, int]:
    ids = Summary.objects.filter(session=session).order_by("pk").values_list("pk", flat=True)
    return {pk: position for position, pk in enumerate(ids, start=1)}


def summaries_export(session: ChatSession, refs: dict[int, int]) -> Iterator[dict[str, Any]]:
    summaries = Summary.objects.filter(session=session).order_by("pk").prefetch_related("parents")
    for summary in summaries:
        yield {
            "id": summary.pk,
            "ref": refs[summary.pk],
            **{field: getattr(summary, field) for field in SUMMARY_FIELDS},
            "parents": sorted(refs[p.pk] for p in summary.parents.all()),
            "created_at": iso_utc(summary.created_at),
            "superseded_at": iso_utc(summary.superseded_at),
        }


def records_export(session: ChatSession) -> Iterator[dict[str, Any]]:
    records = MemoryRecord.objects.filter(
        session=session, scope=MemoryRecord.Scope.SESSION
    ).order_by("pk")
    for record in records.defer("search_vector"):
        yield {
            "id": record.pk,
            **{field: getattr(record, field) for field in RECORD_FIELDS},
            "created_at": iso_utc(record.created_at),
            "updated_at": iso_utc(record.updated_at),
        }


def events_export(session: ChatSession, refs: dict[int, int]) -> Iterator[dict[str, Any]]:
    events = CompactionEvent.objects.filter(session=session).select_related("snapshot")
    for event in events.order_by("pk").defer("snapshot__body", "snapshot__search_vector"):
        yield {
            "id": event.pk,
            **{field: getattr(event, field) for field in EVENT_FIELDS},
            "snapshot": event.snapshot.name if event.snapshot else None,
            "summary": refs.get(event.summary_id) if event.summary_id else None,
            "created_at": iso_utc(event.created_at),
        }


def in_pages(rows: QuerySet[Any], *, key: str, size: int = EXPORT_CHUNK) -> Iterator[Any]:
    """``rows`` in ``key`` order (a unique column), read a page of ``size`` at a time, each page
    a query of its own: no cursor stays open between pages, so a download may give its
    database connection back between them (``transfer/api.py``) and take one again for the
    next page. A server-side cursor held it for the whole download, a client reading slowly
    included."""
    last = None
    while True:
        page = rows if last is None else rows.filter(**{f"{key}__gt": last})
        found = list(page.order_by(key)[:size])
        yield from found
        if len(found) < size:
            return
        last = getattr(found[-1], key)


def messages_with_cover(session: ChatSession) -> QuerySet[Message]:
    """The chat's messages in seq order, each with the summary of the chat's bot that covers it
    (``covering``, None: none), read from its seat's coverage as the rows stream. A room's stay
    None: each of its bots covers the room from its own seat, which a chat of one bot, the
    export's reader, cannot hold (docs/transfer.md)."""
    messages = Message.objects.filter(session=session).order_by("seq")
    if session.is_room:
        return messages.annotate(covering=Value(None, output_field=BigIntegerField()))
    return messages.annotate(covering=seat_covering(session.bot_id))


def messages_export(session: ChatSession, refs: dict[int, int]) -> Iterator[dict[str, Any]]:
    seqs: dict[int, int] = {}
    for message in in_pages(messages_with_cover(session), key="seq"):
        seqs[message.pk] = message.seq
        yield {
            "id": message.pk,
            **{field: getattr(message, field) for field in MESSAGE_FIELDS},
            "compacted_by": refs.get(message.covering) if message.covering else None,
            "reply_to": seqs.get(message.reply_to_id) if message.reply_to_id else None,
            "created_at": iso_utc(message.created_at),
            "updated_at": iso_utc(message.updated_at),
        }


def branches_export(session: ChatSession) -> Iterator[dict[str, Any]]:
    for branch in ImportedBranch.objects.filter(session=session).order_by("position"):
        yield {
            "position": branch.position,
            "fork_seq": branch.fork_seq,
            "messages": branch.messages,
        }


def session_json_chunks(session: ChatSession) -> Iterator[str]:
    """The lossless export of ``session`` as JSON text, piece by piece."""
    refs = summary_refs(session)
    yield f'{{"format":{_dump(FORMAT)},"version":{VERSION},"session":{_dump(session_head(session))}'
    lists = (
        ("summaries", summaries_export(session, refs)),
        ("records", records_export(session)),
        ("compaction_events", events_export(session, refs)),
        ("messages", messages_export(session, refs)),
        ("branches", branches_export(session)),
    )
    for key, entries in lists:
        yield f',"{key}":['
        for position, entry in enumerate(entries):
            yield ("," if position else "") + _dump(entry)
        yield "]"
    yield "}"
