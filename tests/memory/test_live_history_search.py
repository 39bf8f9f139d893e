"""Recall searches the history the model is not shown, compacted or not (issue 16; docs/memory.md).

With a small window, admission sends only the newest run of history; older turns wait for
compaction (soft compaction now waits for the session's replies, so they can wait a while). Those
turns were out of the model's sight *and* out of search's reach: ``search_records`` only searched
compacted messages. Seen in ``bench/memory_retrieval.py``: "When did Mei and Priya adopt their
cat?" — the evidence turn was live, not shown, and never found.

Now the turn passes the seq of the message it answers (``BuiltContext.recall_live_before``) and
search covers the session's uncompacted messages below it — also those the first request showed,
because the request after a recall round makes room for the results by dropping history — as one
hit under ``HISTORY_HEADER`` named ``(history)`` (there is no record to read). The records API
(``?q=``) still lists records only.
"""

import json
from datetime import UTC, datetime, timedelta

import pytest

from bots.models import Message
from bots.transitions import session_context_add
from chat_platform.transcript import line as transcript_line
from memory import queries, search_hits, services
from memory.models import RecallEvent
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tests.memory import message_search_data as data
from turns import turn

KEY = "The spare key is under the blue flowerpot by the shed."
WHEN = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)


def _said(session, role, content, when=WHEN, **fields):
    message = message_add(session, role=role, content=content, **fields)
    Message.objects.filter(pk=message.pk).update(created_at=when)
    services.messages_index_written(message_ids=[message.pk])
    session_context_add(session_id=session.pk, tokens=message.token_count)
    message.refresh_from_db()
    return message


def _line(message):
    return transcript_line(message.seq, message.created_at, message.role, message.content)


def _filler(session, exchanges):
    for n in range(exchanges):
        when = WHEN + timedelta(minutes=n + 1)
        _said(session, "user", f"Filler number {n}: nothing much happened today, just rain.", when)
        _said(session, "assistant", f"Noted, filler {n}. Rain again, then.", when)


def _call(arguments):
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search_records", "arguments": json.dumps(arguments)},
    }


# --- through the turn ---------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_search_tool_finds_live_history_the_request_left_out(owner, fake_bot, fake_openai):
    fake_bot.system_prompt = ""
    fake_bot.context_window, fake_bot.max_output_tokens = 1200, 200
    fake_bot.compaction_enabled = False  # nothing is compacted: the old turn stays live
    fake_bot.save()
    session = SessionFactory(user=owner, bot=fake_bot)
    key = _said(session, "user", KEY)
    noted = _said(session, "assistant", "Got it, the flowerpot by the shed.")
    _filler(session, 40)
    new = _said(session, "user", "Where did I say the spare key is?")
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    fake_openai.script(
        Reply(text="", tool_calls=[_call({"query": "spare key flowerpot"})]),
        Reply(text="Under the blue flowerpot."),
    )

    turn.turn_run(message_id=reply.pk)

    first = json.dumps(fake_openai.requests[0]["messages"])
    assert "flowerpot" not in first  # admission left the old turn out
    result = fake_openai.requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert result["content"] == f"{search_hits.HISTORY_HEADER}\n{_line(key)}\n{_line(noted)}"
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "Under the blue flowerpot.")
    event = RecallEvent.objects.get(session=session)
    assert (event.tool, event.found) == ("search", [search_hits.HISTORY_NAME])


# --- records_search(live_before=…) ----------------------------------------------------------------


def _hits(session, query, **kwargs):
    return [
        (h.name, h.seqs, h.history)
        for h in queries.records_search(session=session, query=query, **kwargs)
    ]


@pytest.fixture
def live(chat_session):
    """The fixture conversation (seqs 1–22 compacted, 23–24 not indexed), then live turns
    25–32."""
    data.conversation(chat_session)
    start = datetime(2024, 6, 20, 9, 0, tzinfo=UTC)
    turns = [
        ("user", KEY),
        ("assistant", "The blue flowerpot, noted."),
        ("user", "Meera sent a postcard from Lisbon with a tram on it."),
        ("assistant", "Lisbon trams are iconic."),
        ("user", "The boat engine quote came back at nine hundred pounds."),
        ("assistant", "That is steep for an engine."),
        ("user", "The flowerpot by the shed cracked in the frost."),
        ("assistant", "Time for a new flowerpot."),
    ]
    for n, (role, text) in enumerate(turns):
        _said(chat_session, role, text, start + timedelta(minutes=n))
    return chat_session


@pytest.mark.django_db
def test_without_live_before_only_compacted_messages_are_hit(live):
    assert _hits(live, "spare key flowerpot") == []
    assert _hits(live, "boat engine") == [
        ("snapshot_17_22", (21, 22), False),
        ("snapshot_1_8", (1,), False),
    ]


@pytest.mark.django_db
def test_live_messages_below_live_before_come_as_one_history_hit(live):
    # the request shows 29 onwards: 25-28 are live and out of sight, 29-32 are shown
    assert _hits(live, "spare key flowerpot", live_before=29) == [
        (search_hits.HISTORY_NAME, (25, 26), True),
    ]
    hit = queries.records_search(session=live, query="spare key flowerpot", live_before=29)[0]
    key = Message.objects.get(session=live, seq=25)
    reply = Message.objects.get(session=live, seq=26)
    assert hit.excerpt == f"{_line(key)}\n{_line(reply)}"
    assert hit.header == search_hits.HISTORY_HEADER


@pytest.mark.django_db
def test_nothing_from_live_before_on_is_a_hit(live):
    # with live_before 29, 31 (the cracked flowerpot) is not searched; 25-26 are
    assert _hits(live, "cracked flowerpot frost", live_before=29) == [
        (search_hits.HISTORY_NAME, (25, 26), True),
    ]
    assert _hits(live, "cracked frost", live_before=29) == []
    assert _hits(live, "cracked frost", live_before=33) == [(search_hits.HISTORY_NAME, (31,), True)]


@pytest.mark.django_db
def test_compacted_and_live_hits_rank_together(live):
    assert _hits(live, "boat engine quote", live_before=33) == [
        (search_hits.HISTORY_NAME, (29, 30), True),
        ("snapshot_17_22", (21, 22), False),
        ("snapshot_1_8", (1,), False),
    ]


@pytest.mark.django_db
def test_a_pinned_live_message_is_shown_so_never_a_hit(live):
    Message.objects.filter(session=live, seq=25).update(pinned=True)
    assert _hits(live, "spare key", live_before=29) == []


@pytest.mark.django_db
def test_other_sessions_live_messages_are_never_hit(live, sibling_session, other_user_session):
    for session in (sibling_session, other_user_session):
        _said(session, "user", "The zanzibar key is in the shed.")
    assert _hits(live, "zanzibar", live_before=10_000) == []
    assert [h[0] for h in _hits(live, "shed key zanzibar", live_before=10_000)] == [
        search_hits.HISTORY_NAME
    ]


@pytest.mark.django_db
def test_the_records_api_q_lists_records_only(live, owner_client):
    url = f"/api/v1/sessions/{live.pk}/records/"
    response = owner_client.get(url, {"q": "flowerpot"})
    assert response.status_code == 200
    assert response.json() == []
    assert [h["name"] for h in owner_client.get(url, {"q": "boat engine"}).json()] == [
        "snapshot_17_22",
        "snapshot_1_8",
    ]


# --- a room's late joiner -----------------------------------------------------------------------


@pytest.mark.django_db
def test_a_bot_that_sees_from_its_join_never_finds_live_history_from_before_it(live, owner):
    from bots.queries import session_seat
    from turns.services.participants import participant_add

    late = BotFactory(owner=owner, name="Late")
    participant_add(user=owner, session_id=live.pk, bot_id=late.pk, sees_from_join=True)
    after = _said(live, "user", "The new spare key is on the hook by the door.")
    live.refresh_from_db()
    seat = session_seat(live, late)
    assert _hits(seat, "spare key", live_before=after.seq + 1) == [
        (search_hits.HISTORY_NAME, (after.seq,), True)
    ]
    # the default bot, which saw everything, finds both
    assert _hits(live, "spare key", live_before=after.seq + 1) == [
        (search_hits.HISTORY_NAME, (25, after.seq), True)
    ]


@pytest.mark.django_db
def test_a_rooms_search_result_names_each_speaker_as_the_searching_seat_does(live, owner):
    """Every bot's turn in a room is an ``assistant`` message: a result that labelled them all so
    had a bot read another's words as its own. The seat that searches reads its own turns as
    ``assistant``, the user and the other bots by name (quoted when a name reads as a role), as
    in its transcripts (``compaction/engine/transcript.py``)."""
    from bots.queries import session_seat
    from turns.services.participants import participant_add

    critic = BotFactory(owner=owner, name="Tool")
    participant_add(user=owner, session_id=live.pk, bot_id=critic.pk)
    live.refresh_from_db()
    asked = _said(live, "user", "Which lighthouse keeper rang about the zanzibar lamp?")
    answered = _said(live, "assistant", "Morwenna rang about the zanzibar lamp.", bot=critic)
    ended = answered.seq + 1

    def excerpt(session):
        (hit,) = queries.records_search(session=session, query="zanzibar lamp", live_before=ended)
        return hit.excerpt

    user_name = owner.get_username()
    stamp = "2024-03-08 18:00Z"
    assert excerpt(live) == (
        f"[{asked.seq}] {stamp} {user_name}: Which lighthouse keeper rang about the zanzibar "
        f"lamp?\n[{answered.seq}] {stamp} «Tool»: Morwenna rang about the zanzibar lamp."
    )
    assert excerpt(session_seat(live, critic)) == (
        f"[{asked.seq}] {stamp} {user_name}: Which lighthouse keeper rang about the zanzibar "
        f"lamp?\n[{answered.seq}] {stamp} assistant: Morwenna rang about the zanzibar lamp."
    )
