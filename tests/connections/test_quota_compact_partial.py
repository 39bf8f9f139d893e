"""``/compact`` whose daily token limit runs out part-way (issue 32, gap (a); docs/compaction.md
"/compact in chat"): the passes it made stay, whole; the refused pass writes nothing; the
notice says what was compacted, what ran out and when it resets, instead of "Context compacted";
the REST answer carries ``stopped``.

History [800] x 6 + [100, 100] (``small_bot``: W 2200) takes three manual passes of messages
1–2, 3–4 and 5–6; each summariser input holds 235 tokens and each call reports 100 used. With a
daily limit of 300 the first pass fits (0 + 235 <= 300, then 100 used) and the second does not
(100 + 235 > 300)."""

import datetime as dt

import pytest

from bots.models import Message
from compaction.models import CompactionEvent, Summary
from connections import usage
from connections.models import UserQuota
from tests.compaction.test_engine import GOOD, add_history, compacted_seqs, recount
from tests.connections.test_quota_charges import (  # noqa: F401 (fixtures)
    SUMMARY_USAGE,
    counter,
    fast_llm,
    session,
    small_bot,
    tomorrow,
)
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):  # noqa: F811
    """One attempt per summariser call: request counts stay exact."""


def _history_and_limit(owner, session, fake_openai, *, limit: int) -> None:  # noqa: F811
    add_history(session, [800] * 6 + [100, 100])
    recount(session)
    UserQuota.objects.create(user=owner, daily_token_limit=limit)
    fake_openai.default = Reply(text=GOOD, usage=SUMMARY_USAGE)


def test_compact_in_chat_that_runs_out_of_quota_part_way_says_so(
    owner,
    owner_client,
    session,  # noqa: F811
    fake_openai,
):
    _history_and_limit(owner, session, fake_openai, limit=300)

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    reset = usage.today() + dt.timedelta(days=1)
    tokens_after = body["compaction"]["tokens_after"]
    assert body["notice"]["content"] == (
        f"Context compacted in part: 5,000 -> {tokens_after:,} tokens (messages 1–2). Then your "
        "daily token limit has too little left for the summariser's next input (100 of 300 "
        f"tokens used today); it resets at 00:00 UTC on {reset:%a} {reset.day} {reset:%b}. The "
        "rest of the history was not compacted; /compact again after the reset to finish."
    )
    assert (body["compaction"]["outcome"], body["compaction"]["stopped"]) == (
        "compacted",
        {
            "reason": "quota_exceeded",
            "details": {"resets_at": tomorrow(), "limit": 300, "used": 100, "scope": "user"},
        },
    )
    # One summariser call, one summary of 1–2; 3–6 stay raw; the refused pass wrote nothing.
    assert len(fake_openai.requests) == 1
    assert compacted_seqs(session) == [1, 2]
    assert list(Summary.objects.values_list("first_seq", "last_seq", "status")) == [
        (1, 2, "active")
    ]
    assert list(CompactionEvent.objects.values_list("trigger", "outcome")) == [
        ("manual", "compacted")
    ]
    assert counter(f"user:{owner.pk}") == (100, 0)  # nothing left held
    kinds = list(Message.objects.filter(session=session).order_by("seq").values_list("kind"))
    assert kinds[-2:] == [("command",), ("notice",)]


def test_compact_that_the_limit_lets_finish_reports_no_stop(
    owner,
    owner_client,
    session,  # noqa: F811
    fake_openai,
):
    """The same chat with room for all three passes: plain "Context compacted", ``stopped`` null."""
    _history_and_limit(owner, session, fake_openai, limit=1000)

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
    )

    body = response.json()
    assert body["notice"]["content"] == (
        f"Context compacted: 5,000 -> {body['compaction']['tokens_after']:,} tokens (messages 1–6)."
    )
    assert body["compaction"]["stopped"] is None
    assert len(fake_openai.requests) == 3
    assert compacted_seqs(session) == [1, 2, 3, 4, 5, 6]


def test_the_api_compact_that_runs_out_part_way_answers_stopped(
    owner,
    owner_client,
    session,  # noqa: F811
    fake_openai,
):
    _history_and_limit(owner, session, fake_openai, limit=300)

    response = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")

    assert response.status_code == 200
    assert response.json()["stopped"] == {
        "reason": "quota_exceeded",
        "details": {"resets_at": tomorrow(), "limit": 300, "used": 100, "scope": "user"},
    }
    assert compacted_seqs(session) == [1, 2]
