"""A summary never leaves a chat that cannot take another message: what a pass writes fits
where compaction lands beside the parts every call sends (system prompt, pins, the other
summaries, the new message), and one that would leave those parts over the budget is not kept
(docs/compaction.md "A summary that fits")."""

import pytest

from bots.models import Message
from compaction import engine
from compaction.models import CompactionEvent, Summary
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("eager_tasks")]

LONG = " ".join(f"Fact {i}: the crate number {i} holds {i * 3} boxes." for i in range(120))


def _send(client, session, content):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True},
        format="json",
    )


@pytest.mark.parametrize(
    ("window", "reserve"),
    [(300, 100), (2048, 512), (4096, 1024)],
)
def test_a_message_too_big_for_a_small_window_leaves_the_chat_usable(
    owner, owner_client, window, reserve
):
    """W 300, R 100 -> B 200, H 150, Ts 80: the message over B is refused (kept, 422), and the
    next one compacts it before its call. The summary was 415 tokens, over B itself, and every
    message after it was refused as ``context_too_large``; in larger windows it stayed over H,
    and every turn compacted again for nothing."""
    bot = BotFactory(
        owner=owner, context_window=window, max_output_tokens=reserve, system_prompt=""
    )
    session = SessionFactory(user=owner, bot=bot)
    budget = window - reserve
    text = " ".join([LONG] * (1 + budget // 2000))
    first = _send(owner_client, session, text)
    if first.status_code == 422:
        assert first.json()["error"]["code"] == "context_too_large"

    for question in ("hello there", "and now?", "one more"):
        sent = _send(owner_client, session, question)
        assert sent.status_code == 201, sent.json()
        assert sent.json()["assistant_message"]["status"] == "complete"

    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/").json()
    assert report["parts"]["summaries"] <= report["target"]
    if window > 300:  # in B 200 the memory index's lines alone outweigh Ts (80)
        assert report["pressure"] < report["hard"]
    for summary in Summary.objects.filter(session=session, status="active"):
        assert summary.token_count <= report["target"]
    kept = CompactionEvent.objects.filter(session=session, outcome="compacted")
    assert kept.exists()
    assert Message.objects.filter(session=session, role="user").count() == 4


@pytest.mark.usefixtures("fast_llm")
def test_a_summary_that_would_leave_the_fixed_part_over_the_budget_is_not_kept(
    owner, small_bot, fake_openai
):
    """B 2000 with a pinned message of 1,500 tokens: a summary of the 900 tokens of history
    may cost 500 at most. The summariser's 600 (shorter than its source, so the other gates
    pass) would have left pins + summary over B, and no message could be sent again: it is
    rejected (``over_budget``), the history stays as it was, and admission trims it."""
    from tests.compaction.test_engine import add_history, message_rows, recount, summary_text

    session = SessionFactory(user=owner, bot=small_bot)
    message_add(session, role="user", content=summary_text(1490), pinned=True)
    add_history(session, [150] * 8)  # /compact takes all but the last exchange: 900
    recount(session)
    before = message_rows(session)
    fake_openai.script(Reply(text=summary_text(600)))

    result = engine.compaction_manual(session=session)

    assert (result.outcome, result.reason, result.summary) == ("rejected", "over_budget", None)
    assert not Summary.objects.filter(session=session).exists()
    assert message_rows(session) == before
    asked = fake_openai.requests[-1]
    assert asked["max_tokens"] == 1  # aim: T 800 less the pin's 1,500 leaves nothing
