"""No lock is held across slow start-up work (docs/compaction.md, "Single flight"): litellm and
the summariser's model facts are loaded before a compaction takes the session's lease, and a
pass that finds nothing to do hands the lease on at once."""

from contextlib import contextmanager

import pytest

from chat_platform.llm import gateway
from chat_platform.llm.gateway import lazy_litellm
from compaction.engine import compaction_manual, runs
from compaction.lock import in_flight
from compaction.models import CompactionEvent
from compaction.services import compaction_notice_text
from tests.compaction.test_engine import GOOD, add_history, recount, summariser_requests
from tests.factories import SessionFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db

# Not the chat model: its window comes from litellm's model facts, not from the bot.
SUMMARISER = "openai/gpt-4o-mini"


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """One attempt per summariser call (see conftest)."""


@pytest.fixture
def session(owner, fake_bot):
    fake_bot.context_window = 20_000
    fake_bot.max_output_tokens = 1000
    fake_bot.system_prompt = ""
    fake_bot.memory_index_size = 0
    fake_bot.compaction_model = SUMMARISER
    fake_bot.save()
    session = SessionFactory(user=owner, bot=fake_bot)
    add_history(session, [3000, 3000, 3000, 3000, 100, 100])
    recount(session)
    return session


@pytest.fixture
def calls(monkeypatch) -> list[str]:
    """The order of: litellm asked for, the summariser's model facts read, the lease taken and
    given back."""
    order: list[str] = []
    litellm = lazy_litellm.get
    model_facts = gateway.model_max_input_tokens
    lease = runs.single_flight

    def recorded_litellm():
        order.append("litellm")
        return litellm()

    def recorded_model_facts(model, **kwargs):
        order.append(f"model facts {model}")
        return model_facts(model, **kwargs)

    @contextmanager
    def recorded_lease(*args, **kwargs):
        with lease(*args, **kwargs) as flight:
            order.append("lease taken")
            yield flight
        order.append("lease given back")

    monkeypatch.setattr(lazy_litellm, "get", recorded_litellm)
    monkeypatch.setattr(gateway, "model_max_input_tokens", recorded_model_facts)
    monkeypatch.setattr(runs, "single_flight", recorded_lease)
    return order


def before_lease(order: list[str]) -> list[str]:
    return order[: order.index("lease taken")]


def test_litellm_and_the_model_facts_are_ready_before_the_lease(session, fake_openai, calls):
    fake_openai.script(Reply(text=GOOD))
    result = compaction_manual(session=session)
    assert (result.outcome, len(summariser_requests(fake_openai))) == ("compacted", 1)
    assert summariser_requests(fake_openai)[0]["model"] == SUMMARISER.split("/", 1)[1]
    assert "litellm" in before_lease(calls)
    assert f"model facts {SUMMARISER}" in before_lease(calls)
    assert calls.count("lease taken") == calls.count("lease given back") == 1


def test_a_pass_with_nothing_to_do_gives_the_lease_back_at_once(session, fake_openai, calls):
    fake_openai.script(Reply(text=GOOD))
    assert compaction_manual(session=session).outcome == "compacted"
    calls.clear()

    late = compaction_manual(session=session)  # a late caller: everything is compacted

    assert (late.outcome, late.reason) == ("noop", "nothing_to_compact")
    assert compaction_notice_text(late) == "Nothing to compact right now."
    assert f"model facts {SUMMARISER}" in before_lease(calls)
    assert calls[-1] == "lease given back"
    assert not in_flight(session.pk)
    assert len(summariser_requests(fake_openai)) == 1  # no second summariser call
    assert list(
        CompactionEvent.objects.filter(session=session).order_by("id").values_list("outcome")
    ) == [("compacted",), ("noop",)]
