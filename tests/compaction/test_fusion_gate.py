"""Frontier fusion never grows the frontier (docs/compaction.md, issue 8 item 6): a fused summary
that is not shorter than the parents it replaces is rejected, with and without snapshots, and the
parents stay active; the built-in extractive summariser fuses to at most half its parents."""

import pytest

from chat_platform.llm.tokens import count_message_tokens
from compaction import engine
from compaction.engine import fusion
from compaction.models import CompactionEvent, Summary
from tests.compaction.test_engine import (
    _two_active_summaries,
    compacted_seqs,
    summariser_requests,
    summary_text,
)
from tests.coverage import messages_covered
from tests.factories import SessionFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """One attempt per summariser call (see conftest)."""


@pytest.fixture
def session(owner, small_bot):
    return SessionFactory(user=owner, bot=small_bot)


def test_fusion_that_would_not_shrink_fails_and_the_parents_stay(session, fake_openai, monkeypatch):
    monkeypatch.setattr(fusion, "FUSION_INPUT_PERCENT", 400)  # the snapshots fit: two attempts
    a, b = _two_active_summaries(session, fake_openai)
    replaced = a.token_count + b.token_count
    # Both attempts (with snapshots, then from the summaries alone) answer longer than the parents.
    too_long = summary_text(replaced + 10)
    fake_openai.script(Reply(text=too_long), Reply(text=too_long))
    before = len(summariser_requests(fake_openai))

    engine.compaction_soft(session_id=session.pk)

    assert len(summariser_requests(fake_openai)) - before == 2
    assert set(Summary.objects.filter(session=session).values_list("pk", "status", "level")) == {
        (a.pk, "active", 1),
        (b.pk, "active", 1),
    }
    assert set(
        messages_covered(session).filter(seq__lte=10).values_list("compacted_by_id", flat=True)
    ) == {a.pk, b.pk}
    assert compacted_seqs(session) == list(range(1, 11))
    assert list(
        CompactionEvent.objects.filter(session=session, trigger="fusion")
        .order_by("id")
        .values_list("outcome", "reason", "summary")
    ) == [("rejected", "not_shorter", None), ("rejected", "not_shorter", None)]


def test_fusion_exactly_as_long_as_the_parents_is_rejected_too(session, fake_openai):
    a, b = _two_active_summaries(session, fake_openai)
    # The fused block (header + text + overhead) costing exactly what the parents cost.
    header = Summary(first_seq=1, last_seq=10, text="").label
    replaced = a.token_count + b.token_count
    text = summary_text(replaced - (count_message_tokens(header + "\nx") - 1))
    assert count_message_tokens(f"{header}\n{text}", model=session.bot.model) == replaced
    fake_openai.script(Reply(text=text), Reply(text=text))

    engine.compaction_soft(session_id=session.pk)

    assert Summary.objects.filter(session=session, status="active").count() == 2
    assert not Summary.objects.filter(session=session, level=2).exists()


def test_builtin_extractive_fusion_shrinks_to_half(session, fake_openai):
    a, b = _two_active_summaries(session, fake_openai)
    session.bot.compaction_model = "builtin/extractive"
    session.bot.save()

    engine.compaction_soft(session_id=session.pk)

    fused = Summary.objects.get(session=session, status="active")
    assert (fused.level, fused.first_seq, fused.last_seq) == (2, 1, 10)
    assert fused.token_count < a.token_count + b.token_count
    # at most half of the parents' text, plus the fused block's own header and overhead
    assert fused.token_count <= (a.token_count + b.token_count) // 2 + 20
