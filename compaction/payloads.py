"""The public shapes of summaries, events and compaction results (REST and websocket)."""

from typing import Any

from chat_platform.isotime import iso_utc
from compaction.models import CompactionEvent, Summary
from compaction.results import RunResult


def event_payload(event: CompactionEvent) -> dict[str, Any]:
    return {
        "id": event.pk,
        "session": event.session_id,
        "bot": event.bot_id,  # the seat it compacted (docs/rooms.md)
        "trigger": event.trigger,
        "outcome": event.outcome,
        "reason": event.reason,
        "tokens_before": event.tokens_before,
        "tokens_after": event.tokens_after,
        "source_tokens": event.source_tokens,
        "summary_tokens": event.summary_tokens,
        "model": event.model,
        "duration_ms": event.duration_ms,
        "error": event.error,
        "snapshot": event.snapshot.name if event.snapshot_id else None,
        "summary": event.summary_id,
        "created_at": iso_utc(event.created_at),
    }


def summary_payload(summary: Summary) -> dict[str, Any]:
    return {
        "id": summary.pk,
        "session": summary.session_id,
        "bot": summary.bot_id,  # the seat it was written from (docs/rooms.md)
        "level": summary.level,
        "text": summary.text,
        "token_count": summary.token_count,
        "first_seq": summary.first_seq,
        "last_seq": summary.last_seq,
        "source_tokens": summary.source_tokens,
        "model": summary.model,
        "trigger": summary.trigger,
        "status": summary.status,
        "parents": sorted(p.pk for p in summary.parents.all()),
        "retention": summary.retention,
        "missing_facts": summary.missing_facts,
        "focus": summary.focus,
        "created_at": iso_utc(summary.created_at),
        "reverted_at": iso_utc(summary.reverted_at),
        # An undone span automatic compaction leaves alone until released (docs/context-records.md).
        "held": summary.held,
        "superseded_by": summary.superseded_by_id,
    }


def result_payload(result: RunResult) -> dict[str, Any]:
    return {
        "outcome": result.outcome,
        "reason": result.reason,
        "tokens_before": result.tokens_before,
        "tokens_after": result.tokens_after,
        "summary": summary_payload(result.summary) if result.summary else None,
        "event": event_payload(result.event) if result.event else None,
        # A run that compacted part of what it was asked and stopped: why, and the limit's
        # details (``quota_exceeded``: whose limit, used, when it resets); None when it finished.
        "stopped": (
            None
            if result.stopped is None
            else {"reason": result.stopped, "details": result.quota or {}}
        ),
    }
