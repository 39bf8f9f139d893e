"""Context records: what the model saw for each reply (docs/context-records.md).

The turn accumulates its calls in memory (the pipeline's parts, the admission, the provider's
usage, the latency) and writes them here once when it ends, however it ends: one INSERT. A
record is immutable (no update path). ``record_rebuild`` renders each call's messages again
from the parts and what they name — through the pipeline's own row renderer — byte for byte
what the provider received.
"""

import datetime
from collections.abc import Iterable, Sequence
from functools import partial
from typing import Any

import structlog
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from attachments.queries import images_for_messages
from bots.models import Message
from chat_platform.errors import NotFound
from compaction.models import ContextRecord, PromptVersion, Summary
from compaction.pipeline.history import CHOSEN_FIELDS, tool_calls_text
from compaction.pipeline.render import index_block_render, render_row
from compaction.provenance import ROW_KINDS, prompt_version, seqs_of
from compaction.seats import RoomView

log = structlog.get_logger(__name__)

# (bot id, version) pairs this process knows are stored: a prompt version is written once, when
# the prompt changes or by the first record that sends it, not on every turn. A pair joins the
# set only once its row is committed (a rolled-back write leaves no row, so it must not be
# remembered). Per process and harmless across processes: a process that has not seen a pair
# writes it again, and the unique (bot, version) constraint makes that a no-op. A row goes only
# with its bot (cascade), whose id is never reused; the records sweep never deletes versions.
_known_versions: set[tuple[int, str]] = set()

# "Replies made from this summary": at most this many of the session's records are read.
SUMMARY_REPLIES_SCAN = 500


def prompt_version_store(*, bot_id: int, text: str) -> str:
    """Keep ``text`` as a version of the bot's prompt (idempotent); returns the version."""
    version = prompt_version(text)
    if (bot_id, version) not in _known_versions:
        PromptVersion.objects.bulk_create(
            [PromptVersion(bot_id=bot_id, version=version, text=text)], ignore_conflicts=True
        )
        # Outside a transaction this runs at once; inside one, only if it commits.
        transaction.on_commit(partial(_known_versions.add, (bot_id, version)))
    return version


def context_record_write(
    *, reply: Message, bot_id: int | None, calls: Sequence[dict[str, Any]], prompt: str = ""
) -> ContextRecord | None:
    """The reply's record, with every call its turn made. ``prompt``: the bot's system prompt as
    sent (its version is stored the first time this process sends it)."""
    if not calls:
        return None
    if prompt and bot_id is not None:
        prompt_version_store(bot_id=bot_id, text=prompt)
    return ContextRecord.objects.create(
        message_id=reply.pk, session_id=reply.session_id, bot_id=bot_id, calls=list(calls)
    )


def context_record_discard(*, message_ids: Iterable[int]) -> int:
    """Drop the records of replies that run again (a Retry): a record describes one run, and
    the rerun writes its own when it ends (docs/chat-turn.md "Retry")."""
    deleted, _ = ContextRecord.objects.filter(message_id__in=list(message_ids)).delete()
    return deleted


def record_get_for_user(*, user: AbstractBaseUser, message_id: object) -> ContextRecord:
    """The record of a reply in the user's own session (staff: any). One not-found whether the
    message is missing, someone else's, or has no record (a user message, a reply not run)."""
    try:
        pk = int(str(message_id))
    except ValueError:
        pk = 0
    if not 0 < pk < 2**63:  # no row has it; SQLite cannot even bind it (OverflowError)
        raise NotFound("Message not found.")
    records = ContextRecord.objects.select_related("message").filter(message_id=pk)
    if not getattr(user, "is_staff", False):
        records = records.filter(session__user=user)
    record = records.first()
    if record is None:
        raise NotFound("Message not found, or it has no context record.")
    return record


def record_payload(record: ContextRecord, *, payload: bool = False) -> dict[str, Any]:
    """docs/context-records.md: ``{message, calls: [...]}``; ``payload`` adds each call's rebuilt
    ``messages``."""
    calls = [dict(call) for call in record.calls]
    if payload:
        for call, messages in zip(calls, record_rebuild(record), strict=True):
            call["messages"] = messages
    return {"message": record.message_id, "calls": calls}


def record_rebuild(record: ContextRecord) -> list[list[dict[str, Any]]]:
    """Each call's ``messages`` as they were sent, rendered again from what the parts name."""
    calls = record.calls
    prompts = _prompts(record, calls)
    summaries = _summary_blocks(p for call in calls for p in call["parts"])
    return [_rebuild_call(record, call["parts"], prompts, summaries) for call in calls]


def _prompts(record: ContextRecord, calls: Iterable[dict[str, Any]]) -> dict[tuple[int, str], str]:
    wanted = {
        (p["ref"]["bot"], p["ref"]["version"])
        for call in calls
        for p in call["parts"]
        if p["kind"] == "system" and "version" in p["ref"]
    }
    if not wanted:
        return {}
    where = Q()
    for bot_id, version in wanted:
        where |= Q(bot_id=bot_id, version=version)
    return {
        (b, v): text
        for b, v, text in PromptVersion.objects.filter(where).values_list(
            "bot_id", "version", "text"
        )
    }


def _summary_blocks(parts: Iterable[dict[str, Any]]) -> dict[int, str]:
    ids = {p["ref"]["id"] for p in parts if p["kind"] == "summary"}
    return {s.pk: s.block for s in Summary.objects.filter(pk__in=ids)} if ids else {}


def _rebuild_call(
    record: ContextRecord,
    parts: list[dict[str, Any]],
    prompts: dict[tuple[int, str], str],
    summaries: dict[int, str],
) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = []
    room: RoomView | None = None
    seqs: list[int] = []
    ids: list[int] = []
    image_ids: set[int] = set()
    for entry in parts:
        kind, ref = entry["kind"], entry["ref"]
        if entry.get("trimmed") or kind == "tools":
            continue  # not sent (trimmed history) or not a message (the tools offered)
        if kind == "system":
            text = (
                prompts.get((ref["bot"], ref["version"]), "")
                if "version" in ref
                else ref["chat_instruction"]
            )
            messages.append({"role": "system", "content": text})
        elif kind == "room":
            room = _room(ref)
            messages.append({"role": "system", "content": ref["header"]})
        elif kind == "client_system":
            messages.append({"role": "system", "content": ref["text"]})
        elif kind == "summary":
            messages.append({"role": "system", "content": summaries.get(ref["id"], "")})
        elif kind == "memory_index":
            text = index_block_render(ref["lines"], recall_open=ref["help"])
            messages.append({"role": "system", "content": text})
        elif kind in ROW_KINDS:
            if kind == "history":
                seqs.extend(seqs_of(ref["seqs"]))
            else:
                ids.extend(ref["ids"])
            image_ids.update(ref.get("images", ()))
    rows = _rows(record.session_id, seqs, ids)
    images = (
        images_for_messages(
            user_id=record.session.user_id,
            contents={row[0]: row[2] for row in rows if row[0] in image_ids},
        )
        if image_ids
        else {}
    )
    messages.extend(render_row(row, room, images.get(row[0], ())) for row in rows)
    return messages


def _room(ref: dict[str, Any]) -> RoomView:
    speakers: dict[int | None, tuple[str, str]] = {
        None if key == "user" else int(key): (slug, name)
        for key, (slug, name) in ref["speakers"].items()
    }
    return RoomView(
        bot_id=ref["bot"], from_seq=1, header=ref["header"], speakers=speakers, prefix_tokens={}
    )


def _rows(session_id: int, seqs: list[int], ids: list[int]) -> list[tuple[Any, ...]]:
    """The named rows in seq order (history by seq range, the rest by id), as the pipeline
    reads them."""
    if not seqs and not ids:
        return []
    where = Q(pk__in=ids) if ids else Q()
    ranges: list[list[int]] = []
    for seq in sorted(seqs):
        if ranges and seq == ranges[-1][1] + 1:
            ranges[-1][1] = seq
        else:
            ranges.append([seq, seq])
    wanted_seqs = set(seqs)
    for first, last in ranges:
        where |= Q(session_id=session_id, seq__gte=first, seq__lte=last)
    rows = (
        Message.objects.filter(where)
        .annotate(calls=tool_calls_text())
        .order_by("seq")
        .values_list(*CHOSEN_FIELDS)
    )
    wanted_ids = set(ids)
    return [row for row in rows if row[0] in wanted_ids or row[6] in wanted_seqs]


def records_for_summary(*, summary: Summary, limit: int = 50) -> list[ContextRecord]:
    """Replies made from ``summary``: records of its session written since it was, whose calls
    carried it. Bounded: the session's next ``SUMMARY_REPLIES_SCAN`` records (index on
    ``(session, created_at)``), filtered here."""
    candidates = ContextRecord.objects.filter(
        session_id=summary.session_id, created_at__gte=summary.created_at
    ).order_by("created_at", "id")[:SUMMARY_REPLIES_SCAN]
    found = []
    for record in candidates:
        if any(
            p["kind"] == "summary" and p["ref"].get("id") == summary.pk
            for call in record.calls
            for p in call["parts"]
        ):
            found.append(record)
            if len(found) >= limit:
                break
    return found


def records_sweep(*, older_than_days: int, now: datetime.datetime | None = None) -> int:
    """Delete records older than ``older_than_days`` (0: keep all). Returns how many went."""
    if older_than_days <= 0:
        return 0
    cutoff = (now or timezone.now()) - datetime.timedelta(days=older_than_days)
    deleted, _ = ContextRecord.objects.filter(created_at__lt=cutoff).delete()
    if deleted:
        log.info("context_records_swept", deleted=deleted, older_than_days=older_than_days)
    return deleted


def _ranges_text(ranges: Iterable[Sequence[int]]) -> str:
    return ", ".join(f"{a}" if a == b else f"{a}–{b}" for a, b in ranges)


def part_describe(entry: dict[str, Any]) -> str:
    """One part in words, for the admin: what it is, where it came from, what it cost."""
    kind, ref, tokens = entry["kind"], entry["ref"], entry["tokens"]
    if kind == "system":
        what = (
            f"system prompt of bot {ref['bot']}, version {ref['version']}"
            if "version" in ref
            else "the chat's own instruction"
        )
    elif kind == "room":
        what = "room header"
    elif kind == "client_system":
        what = "the API client's system message"
    elif kind == "summary":
        first, last = ref["seqs"]
        what = f"summary #{ref['id']} (level {ref['level']}, messages {first}–{last})"
    elif kind == "memory_index":
        what = f"memory index: {', '.join(ref['names']) or 'empty'}"
    elif kind == "tools":
        what = f"tools offered: {', '.join(ref['names'])}"
    elif entry.get("trimmed"):
        before = f" before message {ref['before_seq']}" if "before_seq" in ref else ""
        what = f"history left out: {ref['messages']} messages{before}"
    elif kind == "history":
        what = f"history: messages {_ranges_text(ref['seqs'])}"
    elif kind == "recalled":
        asked = "; ".join(
            f"{r['tool']}({', '.join(r.get('names', [])) or r.get('query', '')})"
            for r in ref.get("requests", [])
        )
        what = f"recalled, round {ref.get('round', '?')}: {asked or 'results'}"
    elif kind == "tool":
        called = ", ".join(ref.get("calls", [])) or "results"
        what = f"tool round {ref.get('round', '?')}: {called}"
    else:  # pinned, user
        label = "pinned" if kind == "pinned" else "new message"
        what = f"{label}: message {', '.join(str(s) for s in ref['seqs'])}"
    return f"{what} — {tokens:,} tokens"
