"""A failed reply keeps the refusal's words, and its error carries what ran out and when it
resets (``details``), read back from those words (connections.usage.refusal_details), so the
chat page can say it plainly (docs/connections.md "Daily token limits")."""

import datetime as dt

import pytest

from chat_platform.errors import QuotaExceeded
from connections import usage
from connections.models import TokenCounter, UserQuota

pytestmark = pytest.mark.django_db(transaction=True)

AT = dt.datetime(2026, 12, 3, 21, 30, tzinfo=dt.UTC)


def _tomorrow() -> str:
    return f"{(usage.today() + dt.timedelta(days=1)).isoformat()}T00:00:00+00:00"


def test_a_spent_user_limit_reads_back_from_its_words():
    TokenCounter.objects.create(subject="user:9", day=usage.today(), used=1200)
    with pytest.raises(QuotaExceeded) as caught:
        usage.quota_check([usage.Limit("user:9", 1000)])
    assert caught.value.message == (
        f"Your daily limit of 1,000 tokens is spent (1,200 used); it resets at {_tomorrow()}."
    )
    details = usage.refusal_details(caught.value.message, at=AT)
    assert details == {"resets_at": _tomorrow(), "limit": 1000, "used": 1200, "scope": "user"}
    assert details == caught.value.details


def test_a_key_limit_too_small_for_the_context_reads_back_from_its_words():
    with pytest.raises(QuotaExceeded) as caught:
        usage.quota_reserve([usage.Limit("key:4", 50)], tokens=80)
    assert caught.value.message.startswith("This API key's daily limit of 50 tokens has 50 left")
    details = usage.refusal_details(caught.value.message, at=AT)
    assert details == {"resets_at": _tomorrow(), "limit": 50, "used": 0, "scope": "key"}
    assert details == caught.value.details


def test_words_of_another_shape_still_say_when_the_day_resets():
    details = usage.refusal_details("The daily token limit is spent.", at=AT)
    assert details == {"resets_at": "2026-12-04T00:00:00+00:00"}


def test_the_failed_reply_carries_what_ran_out_over_rest(
    owner, owner_client, fake_session, fake_openai, eager_tasks
):
    # Room for the message (999 used of 1,000) but not for its context: the reply fails.
    UserQuota.objects.create(user=owner, daily_token_limit=1000)
    TokenCounter.objects.create(subject=f"user:{owner.pk}", day=usage.today(), used=999)
    response = owner_client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/",
        {"content": "hello", "wait": True},
        format="json",
    )
    assert response.status_code == 429
    listed = owner_client.get(f"/api/v1/sessions/{fake_session.pk}/messages/").json()
    assert [(m["role"], m["status"]) for m in listed] == [
        ("user", "complete"),
        ("assistant", "failed"),
    ]
    error = listed[1]["error"]
    assert error["code"] == "quota_exceeded"
    assert error["details"] == {
        "resets_at": _tomorrow(),
        "limit": 1000,
        "used": 999,
        "scope": "user",
    }
    assert fake_openai.requests == []


def test_a_refusal_in_a_notice_names_whose_limit_how_much_and_when_it_resets():
    """The words ``/compact``'s notice uses (a stored text: the reset in UTC)."""
    spent = {"resets_at": "2026-12-05T00:00:00+00:00", "limit": 50, "used": 61, "scope": "key"}
    assert usage.limit_words(spent, what="the summariser's input") == (
        "this API key's daily token limit is used up (61 of 50 tokens today); "
        "it resets at 00:00 UTC on Sat 5 Dec"
    )
    short = {"resets_at": "2026-12-05T00:00:00+00:00", "limit": 600, "used": 599, "scope": "user"}
    assert usage.limit_words(short, what="the summariser's input") == (
        "your daily token limit has too little left for the summariser's input (599 of 600 "
        "tokens used today); it resets at 00:00 UTC on Sat 5 Dec"
    )
