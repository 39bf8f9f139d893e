"""End-to-end compaction with the built-in models: /compact, then the summary in the context."""

import pytest

from bots.transitions import session_context_recount
from compaction.models import CompactionEvent, Summary
from memory.models import MemoryRecord
from tests.coverage import (
    in_context_recount,
    in_context_totals,
    message_covering,
    messages_covered,
)
from tests.factories import message_add, turn_pending

pytestmark = pytest.mark.django_db(transaction=True)

FACTS = [
    "Alice booked the venue in Lisbon for 14 March.",
    "The budget is 12,500 EUR and Bob approved it on Tuesday.",
    "Ticket INV-2024-001 tracks the catering order.",
    "We decided the keynote starts at 09:30.",
]


def _conversation(session, turns=12):
    for i in range(turns):
        message_add(session, role="user", content=f"{FACTS[i % 4]} Note {i} about planning.")
        message_add(
            session,
            role="assistant",
            content=f"Understood, noted item {i}: {FACTS[i % 4]} I will keep that in mind.",
        )
    return session_context_recount(session_id=session.pk)[0]


def test_compact_command_with_builtin_extractive(owner_client, chat_session, eager_tasks):
    # 24 exchanges: the extractive summary keeps most of each line, so fewer would not lower
    # the context once the summary's label and the snapshot's index line are counted (a
    # compaction that would not is refused: tests/compaction/test_compact_not_lower.py).
    _conversation(chat_session, turns=24)
    before = session_context_recount(session_id=chat_session.pk)[0]
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "/compact"}, format="json"
    )
    assert response.status_code == 200, response.json()
    body = response.json()
    compaction = body["compaction"]
    assert compaction["outcome"] == "compacted"
    summary = Summary.objects.get(session=chat_session)
    # everything but the latest exchange (messages 47 and 48)
    assert (summary.first_seq, summary.last_seq, summary.trigger) == (1, 46, "manual")
    assert summary.model == "builtin/extractive"
    assert body["notice"]["content"] == (
        f"Context compacted: {compaction['tokens_before']:,} -> {compaction['tokens_after']:,} "
        "tokens (messages 1–46)."
    )
    assert (body["notice"]["role"], body["notice"]["kind"]) == ("system", "notice")
    covered = messages_covered(chat_session).filter(compacted_by_id=summary.pk)
    assert covered.count() == 46
    assert set(
        messages_covered(chat_session)
        .filter(seq__in=[47, 48])
        .values_list("compacted_by_id", flat=True)
    ) == {None}
    remaining = in_context_recount(chat_session)
    assert in_context_totals(chat_session) == remaining and remaining[0] < before
    snapshot = MemoryRecord.objects.get(session=chat_session, name="snapshot_1_46")
    assert snapshot.indexed is True
    assert snapshot.description.startswith("Pre-compaction snapshot of messages 1–46")
    event = CompactionEvent.objects.get(session=chat_session)
    assert (event.outcome, event.snapshot_id, event.summary_id) == (
        "compacted",
        snapshot.pk,
        summary.pk,
    )
    assert 0 < summary.retention <= 1

    # the next turn: the summary is a labelled system block, commands/notices are never sent
    reply = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/",
        {"content": "Where is the venue?", "wait": True},
        format="json",
    )
    assert reply.status_code == 201
    assert "Lisbon" in reply.json()["assistant_message"]["content"]
    summaries = owner_client.get(f"/api/v1/sessions/{chat_session.pk}/summaries/").json()
    assert [s["id"] for s in summaries] == [summary.pk]
    report = owner_client.get(f"/api/v1/sessions/{chat_session.pk}/context/").json()
    assert report["parts"]["summaries"] == summary.token_count


def test_compact_with_nothing_to_compact(owner_client, chat_session):
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "/compact"}, format="json"
    )
    assert response.status_code == 200
    assert response.json()["notice"]["content"] == "Nothing to compact right now."
    assert Summary.objects.count() == 0


def test_compact_while_a_reply_runs_leaves_its_question_and_everything_after(
    owner_client, chat_session, eager_tasks
):
    """`/compact` sent while a reply streams and another waits: the current turn begins at the
    question of the reply still running, not at the newest question. Taking the running reply's
    question and leaving the reply sent an assistant turn with no question before it in every
    later request."""
    _conversation(chat_session, turns=24)  # 1–48
    turn_pending(chat_session, "What is Zeta-3?", content="Zeta-3 is", status="streaming")  # 49
    turn_pending(chat_session, "And what is Zeta-5?")  # 51, queued behind it
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "/compact"}, format="json"
    )
    assert response.status_code == 200, response.json()
    summary = Summary.objects.get(session=chat_session)
    assert (summary.first_seq, summary.last_seq) == (1, 48)
    assert (
        list(messages_covered(chat_session).filter(seq__gte=49, compacted_by_id__isnull=False))
        == []
    )


def test_a_message_longer_than_the_summariser_can_read_is_compacted_by_its_head(
    owner_client, chat_session, eager_tasks, settings
):
    """A message over the summariser's window on its own (stored when its send was refused as
    too large) stood first in every range and was never taken: nothing behind it was ever
    compacted again ("Nothing to compact right now."). It is taken alone, its text cut to fit
    with a mark saying so; the message itself stays whole."""
    settings.CONTEXT_ABSOLUTE_CAP_TOKENS = 8_000
    chat_session.bot.max_output_tokens = 500
    chat_session.bot.save(update_fields=["max_output_tokens"])
    huge = " ".join(f"Line {i}: the parcel code is PX-{i:05d}." for i in range(1_500))
    first = message_add(chat_session, role="user", content=huge)
    assert first.token_count > 8_000
    message_add(chat_session, role="assistant", content="", status="failed", token_count=0)
    _conversation(chat_session, turns=12)  # 3–26
    session_context_recount(session_id=chat_session.pk)
    response = owner_client.post(
        f"/api/v1/sessions/{chat_session.pk}/messages/", {"content": "/compact"}, format="json"
    )
    assert response.status_code == 200, response.json()
    assert response.json()["compaction"]["outcome"] == "compacted"
    first.refresh_from_db()
    assert message_covering(first) is not None and first.content == huge
    snapshot = MemoryRecord.objects.get(session=chat_session, name="snapshot_1_1")
    assert "is longer than the summariser can read" in snapshot.body
    assert "PX-00000" in snapshot.body and "PX-01499" not in snapshot.body
    # the history behind it was compacted too: all but the latest exchange
    left = (
        messages_covered(chat_session)
        .filter(kind="chat", compacted_by_id__isnull=True)
        .exclude(status="failed")
    )
    assert sorted(left.values_list("seq", flat=True)) == [25, 26]
