"""A turn whose recall exchange overflows the budget says so
(compaction/pipeline/admit.py ``_reject``).

Before, a model asking for 10,000 record names in one call failed the reply (REST: 422) with
"This message, with the system prompt and pinned messages, does not fit", blaming a user message
of a few tokens, and its ``required_tokens`` left the recalled tokens out. (The read call itself
is now cut to 5 names by memory/recall.py; any recall exchange that still overflows is named.)
"""

import pytest

from chat_platform.errors import ContextTooLarge
from compaction.pipeline import context_build
from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db


def _turn_with_recall(owner, *, new_tokens: int, recalled_tokens: tuple[int, int]):
    bot = BotFactory(
        owner=owner,
        system_prompt="",
        context_window=1300,
        max_output_tokens=1000,  # B = 300
        compaction_enabled=False,
    )
    session = SessionFactory(user=owner, bot=bot)
    new = message_add(session, role="user", content="read many", token_count=new_tokens)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    request_tokens, result_tokens = recalled_tokens
    recalled = [
        message_add(session, role="assistant", kind="tool", content="", token_count=request_tokens),
        message_add(
            session,
            role="tool",
            kind="tool",
            tool_name="read_records",
            content="[not found: name_0]",
            token_count=result_tokens,
        ),
    ]
    return session, reply, recalled


def test_an_overflowing_recall_exchange_is_named_not_the_message(owner):
    session, reply, recalled = _turn_with_recall(owner, new_tokens=6, recalled_tokens=(59_039, 16))
    with pytest.raises(ContextTooLarge) as excinfo:
        context_build(session=session, reply=reply, recalled=recalled)
    assert excinfo.value.message == (
        "The model's requests to read or search records, with what they returned, take 59,055 "
        "tokens and do not fit in the bot's context budget of 300 tokens. Your message itself "
        "fits."
    )
    assert excinfo.value.details == {
        "budget_tokens": 300,
        "required_tokens": 59_061,
        "recalled_tokens": 59_055,
    }
    session.refresh_from_db()
    assert session.last_admission["decision"] == "reject"


def test_a_message_that_does_not_fit_by_itself_is_still_named(owner):
    session, reply, recalled = _turn_with_recall(owner, new_tokens=400, recalled_tokens=(50, 50))
    with pytest.raises(ContextTooLarge) as excinfo:
        context_build(session=session, reply=reply, recalled=recalled)
    assert excinfo.value.message == (
        "This message, with the system prompt and pinned messages, does not fit in the bot's "
        "context budget of 300 tokens."
    )
    assert excinfo.value.details == {"budget_tokens": 300, "required_tokens": 500}
