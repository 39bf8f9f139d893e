"""A recall exchange that no longer fits never fails the turn (docs/memory.md: "all recalled text
at what is left of B"; REFERENCE: degrade only downward).

Each round's results are cut to what is left of B when the round runs, but the fixed part can
grow before the next call: the user pins a message, or a hard compaction adds a summary. Seen
in ``bench/memory_retrieval.py``: 11 of 613 turns ended ``context_too_large`` after two rounds.
Now the turn drops its oldest recall rounds until the call fits; the answer comes without them.
"""

import json

import pytest

from bots.models import Message
from bots.transitions import session_context_add
from memory import services
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from turns import recall_loop, turn

pytestmark = pytest.mark.django_db(transaction=True)


def _call(name, arguments, call_id):
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def test_a_pin_made_during_recall_drops_the_rounds_that_no_longer_fit_not_the_reply(
    owner, fake_openai, monkeypatch
):
    monkeypatch.setenv("CHAT_PLATFORM_TEST_FAKE_KEY", "sk-test-fake-key")
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env="CHAT_PLATFORM_TEST_FAKE_KEY",
        system_prompt="",
        context_window=3000,
        max_output_tokens=500,  # B = 2500
        compaction_enabled=False,
    )
    session = SessionFactory(user=owner, bot=bot)
    old = message_add(session, role="user", content="harbour " * 900)  # ~900 tokens, unpinned
    services.record_save(
        session=session,
        name="logbook",
        description="The harbour logbook",
        body="The boat left the harbour at dawn. " * 150,  # ~1200 tokens
        scope="session",
    )
    new = message_add(session, role="user", content="What does the logbook say?")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=old.token_count + new.token_count)
    fake_openai.script(
        Reply(text="", tool_calls=[_call("read_records", {"names": ["logbook"]}, "c1")]),
        Reply(text="", tool_calls=[_call("read_records", {"names": ["logbook"]}, "c2")]),
        Reply(text="It says the boat left at dawn."),
    )
    real_execute = turn.recall_execute
    rounds = []

    def execute_then_pin(**kwargs):
        results = real_execute(**kwargs)
        rounds.append(kwargs["recall_round"])
        if kwargs["recall_round"] == 2:
            # the user pins the long old message while the turn is looking things up
            Message.objects.filter(pk=old.pk).update(pinned=True)
        return results

    monkeypatch.setattr(recall_loop, "recall_execute", execute_then_pin)

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "It says the boat left at dawn.")
    assert rounds == [1, 2]
    final = fake_openai.requests[-1]["messages"]
    # the pin is sent, and only the rounds that still fit beside it
    assert any(m["content"] == old.content for m in final if m["role"] == "user")
    # round 1 is left out of the last call; round 2 (the newer lookup) is sent as it was cut
    assert [m["tool_call_id"] for m in final if m["role"] == "tool"] == ["c2"]
    assert [[c["id"] for c in m["tool_calls"]] for m in final if m.get("tool_calls")] == [["c2"]]
    [result] = [m["content"] for m in final if m["role"] == "tool"]
    assert "The boat left the harbour at dawn." in result
    # both rounds stay in the transcript
    assert Message.objects.filter(session=session, role="tool").count() == 2
