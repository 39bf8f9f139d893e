"""Dates everywhere recall shows a message (issue 16, item 2): every transcript line of a
snapshot carries when its message was said (``[12] 2024-03-08 13:56Z user: …``, UTC), so
``read_records`` and ``search_records`` bring it back, and a summary keeps the date of a fact."""

import json
from datetime import UTC, datetime

import pytest

from bots.models import Message
from bots.transitions import session_context_add, session_context_recount
from chat_platform.llm.builtin import generate
from chat_platform.llm.builtin.extractive import summarise
from compaction.engine import compaction_manual
from compaction.engine.transcript import transcript_line
from memory.models import MemoryRecord
from tests.factories import message_add
from tests.fakeopenai import Reply
from turns import turn

pytestmark = pytest.mark.django_db(transaction=True)

FILLER = (
    "It was a quiet afternoon and we talked about this and that for a while. "
    "Nothing much happened, and the weather was fine as it usually is around here. "
)
SAID = datetime(2024, 3, 8, 13, 56, 41, tzinfo=UTC)
SAID_LINE = "[1] 2024-03-08 13:56Z user: My sister Clara moved to Porto."


def _dated(session, content, when, **fields):
    message = message_add(session, role="user", content=content, **fields)
    Message.objects.filter(pk=message.pk).update(created_at=when)
    message.refresh_from_db()
    return message


def _compacted(session):
    """A compacted range whose first message was said at SAID: the snapshot's name."""
    _dated(session, "My sister Clara moved to Porto.", SAID)
    for i in range(5):
        _dated(session, f"{FILLER * 4}Chat number {i}.", datetime(2024, 3, 9, 9, i, tzinfo=UTC))
    message_add(session, role="user", content="latest")
    session_context_recount(session_id=session.pk)
    result = compaction_manual(session=session, focus="")
    assert result.outcome == "compacted"
    return f"snapshot_1_{result.last_seq}"


def _turn(session, content):
    new = message_add(session, role="user", content=content)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    return reply


def _call(name, arguments):
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def test_a_transcript_line_carries_its_messages_time_in_utc(chat_session):
    message = _dated(chat_session, "  My sister Clara moved to Porto. ", SAID)

    assert transcript_line(message) == SAID_LINE


def test_a_snapshot_body_line_carries_its_messages_time(chat_session):
    name = _compacted(chat_session)

    body = MemoryRecord.objects.get(session=chat_session, name=name).body
    assert body.splitlines()[0] == SAID_LINE
    assert "[2] 2024-03-09 09:00Z user: " in body


@pytest.fixture
def extractive_fake_session(fake_session):
    """A bot on the fake server that summarises with builtin/extractive (no summary scripted)."""
    fake_session.bot.compaction_model = "builtin/extractive"
    fake_session.bot.save(update_fields=["compaction_model"])
    return fake_session


def test_read_records_through_the_turn_returns_the_dated_line(extractive_fake_session, fake_openai):
    session = extractive_fake_session
    name = _compacted(session)
    reply = _turn(session, "When did my sister move?")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("read_records", {"names": [name]})]),
        Reply(text="On 2024-03-08."),
    )

    turn.turn_run(message_id=reply.pk)

    result = fake_openai.requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert result["content"].startswith(f"[record {name}]\n")
    assert SAID_LINE in result["content"].splitlines()


def test_search_records_hit_carries_the_date_of_the_matched_line(
    extractive_fake_session, fake_openai
):
    session = extractive_fake_session
    name = _compacted(session)
    reply = _turn(session, "When did Clara move to Porto?")
    fake_openai.script(
        Reply(text="", tool_calls=[_call("search_records", {"query": "Clara Porto"})]),
        Reply(text="On 2024-03-08."),
    )

    turn.turn_run(message_id=reply.pk)

    result = fake_openai.requests[1]["messages"][-1]["content"]
    assert result.startswith(f"[record {name}]\n")
    # the excerpt is a ts_headline fragment around the match: the matched line is in it whole,
    # with the date its label carries (highlight markers aside)
    assert "[1] 2024-03-08 13:56Z user: My sister" in result.replace("**", "")


def test_extractive_keeps_the_date_of_a_kept_fact_line():
    transcript = "\n".join(
        [
            "[1] 2024-03-08 13:56Z user: My sister Clara moved to Porto.",
            f"[2] 2024-03-08 13:57Z assistant: {FILLER}",
            f"[3] 2024-03-09 09:00Z user: {FILLER}",
            f"[4] 2024-03-09 09:01Z assistant: {FILLER}",
        ]
    )

    summary = summarise(transcript)

    assert "[1] 2024-03-08 user: My sister Clara moved to Porto." in summary.splitlines()


def test_builtin_recall_quotes_the_sentence_of_a_dated_line_not_its_label_and_says_the_day():
    body = (
        "[1] 2024-03-08 13:56Z user: My sister Clara moved to Porto.\n"
        "[2] 2024-03-08 13:57Z assistant: Noted.\n"
        "[3] 2024-03-09 09:00Z user: My sister Clara plays the cello."
    )
    messages = [
        {"role": "user", "content": "What about my sister Clara?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("read_records", {"names": ["snapshot_1_3"]})],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "[record snapshot_1_3]\n" + body},
    ]

    reply = generate("recall", messages)

    assert reply.text.splitlines()[1:] == [
        "> My sister Clara moved to Porto. — you said in message 1, on 2024-03-08",
        "> My sister Clara plays the cello. — you said in message 3, on 2024-03-09",
    ]


def test_builtin_recall_quotes_a_dated_line_inside_a_search_excerpt():
    excerpt = (
        "… [52] 2024-03-08 13:56Z user: My **sister** Clara **plays** the cello. "
        "[53] 2024-03-08 13:57Z assistant: Noted. …"
    )
    messages = [
        {"role": "user", "content": "What instrument does my sister play?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("search_records", {"query": "instrument sister play"})],
        },
        {
            "role": "tool",
            "tool_call_id": "call_1",
            "content": "[record snapshot_41_80]\n" + excerpt,
        },
    ]

    reply = generate("recall", messages)

    assert reply.text.splitlines()[1:] == [
        "> My sister Clara plays the cello. — you said in message 52, on 2024-03-08"
    ]


def test_an_excerpt_is_widened_to_whole_lines_with_their_labels():
    from memory.search import with_line_label

    body = (
        "[1] 2024-03-08 13:56Z user: My sister Clara moved to Porto last May.\n"
        "[2] 2024-03-08 13:57Z assistant: Noted, thanks."
    )

    # ts_headline (PostgreSQL) and snippet() (SQLite, with ellipses) start at a match and stop
    # after some words: the hit gets its line's label back, and the rest of the line it ends in
    assert with_line_label(body, "**Clara** moved to **Porto**") == (
        "[1] 2024-03-08 13:56Z user: My sister **Clara** moved to **Porto** last May."
    )
    assert with_line_label(body, "… **Clara** moved to **Porto** …") == (
        "[1] 2024-03-08 13:56Z user: My sister **Clara** moved to **Porto** last May."
    )
    # a last line that is only a label cut short is dropped
    assert with_line_label(body, "**Clara** moved to **Porto** last May.\n[2] 2024-03-08") == (
        "[1] 2024-03-08 13:56Z user: My sister **Clara** moved to **Porto** last May."
    )
    # whole lines already, or not placeable in the body: unchanged
    assert with_line_label(body, "[2] 2024-03-08 13:57Z assistant: **Noted**, thanks.") == (
        "[2] 2024-03-08 13:57Z assistant: **Noted**, thanks."
    )
    assert with_line_label("I live in **Porto** now.", "nowhere **Porto**") == "nowhere **Porto**"
