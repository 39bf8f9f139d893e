"""Messages that say little (docs/memory.md "Messages that say little"): a message of fewer than
``LOW_INFORMATION_TERMS`` distinct search terms is filled after the ranked messages that say
more, and still before a fusion's lexical tail."""

from datetime import UTC, datetime, timedelta

import pytest

from bots.models import ChatSession
from memory import embeddings, queries, search_hits
from memory.models import MemoryRecord
from memory.search import MessageScore
from tests.factories import BotFactory
from tests.memory import message_search_data as data

pytestmark = pytest.mark.django_db

WHEN = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
# Three snapshots of two messages each. "time" is in messages 1, 3 and 5; 1 and 5 are short
# (BM25 ranks them above 3, which is three times as long), and only 3 says when the ferry goes.
TURNS = [
    ("user", "Mei: Any time."),
    ("assistant", "Noted."),
    ("user", "Ravi: The ferry to the island leaves at seven, so be at the harbour pier in time."),
    ("assistant", "Noted."),
    ("user", "Mei: About time."),
    ("assistant", "Noted."),
]
QUESTION = "What time was it?"  # one term: time


@pytest.fixture
def talk(owner):
    bot = BotFactory(owner=owner, embedding_model="")  # words only: BM25's order is the ranking
    session = ChatSession.objects.create(user=owner, bot=bot, title="ferry")
    for i, (role, text) in enumerate(TURNS):
        data.said(session, role, text, WHEN + timedelta(minutes=i))
    for first in (1, 3, 5):
        data.compact(session, first, first + 1)
    return session


def _bm25(session):  # noqa: ANN001, ANN202 - the lexical ranking of QUESTION, as fill reads it
    scored, _ = queries.search.messages_ranked(session_id=session.pk, query=["time"])
    return [(s.score, s) for s in scored]


def test_in_a_fused_ranking_a_message_that_says_little_comes_after_one_that_says_more(talk):
    assert search_hits.LOW_INFORMATION_TERMS == 6
    # "Mei: Any time." is two terms (mei, time), message 3 is eleven
    ranked = _bm25(talk)
    assert [item.seq for _, item in ranked] == [5, 1, 3]  # BM25: the short ones first

    fused, _ = search_hits.fill(talk, ranked, room=2000, limit=20, model="", defer_low=True)
    words, _ = search_hits.fill(talk, ranked, room=2000, limit=20, model="")

    assert [(h.name, h.seqs) for h in fused] == [
        ("snapshot_3_4", (3,)),
        ("snapshot_5_6", (5,)),
        ("snapshot_1_2", (1,)),
    ]
    # words only (no fusion): BM25's order as it is
    assert [h.seqs for h in words] == [(5,), (1,), (3,)]
    assert [h.seqs for h in queries.records_search(session=talk, query=QUESTION)] == [
        (5,),
        (1,),
        (3,),
    ]


def test_with_room_for_one_message_it_is_the_one_that_says_more(talk):
    line = data_line(talk, 3)
    room = queries.count_tokens(f"[record snapshot_3_4]\n{line}\n\n")

    hits, _ = search_hits.fill(talk, _bm25(talk), room=room, limit=20, model="", defer_low=True)

    assert [(h.name, h.seqs, h.excerpt) for h in hits] == [("snapshot_3_4", (3,), line)]


def test_a_message_that_says_little_still_comes_before_a_fusions_lexical_tail(talk):
    ids = dict(talk.messages.values_list("seq", "id"))
    records = {
        seq: MemoryRecord.objects.get(session=talk, name=f"snapshot_{seq}_{seq + 1}").pk
        for seq in (1, 3, 5)
    }

    def scored(seq, score):  # noqa: ANN001, ANN202
        return (score, MessageScore(ids[seq], seq, records[seq], score, talk.pk))

    # 1 (short) and 3 fused, then 5 in the lexical tail (score 0, fusion.fused)
    ranked = [scored(1, 0.03), scored(3, 0.02), scored(5, 0.0)]

    hits, _ = search_hits.fill(talk, ranked, room=2000, limit=20, model="", defer_low=True)

    assert [h.seqs for h in hits] == [(3,), (1,), (5,)]


def data_line(session, seq):  # noqa: ANN001, ANN201
    message = session.messages.get(seq=seq)
    return f"[{seq}] {message.created_at:%Y-%m-%d %H:%M}Z {message.role}: {message.content}"


# A short message can be the only one holding the question's distinctive word: "flight" is in
# message 3 alone, while "number" is in many longer ones. Deferred as small talk, it was left out
# of a result whose room those filled (measured at a 400-token room: messages 1, 53, 55, 45, 33,
# 43, 23, … and not 3), and builtin/recall answered "What is the flight number?" with the
# invoice and gym numbers.
FLIGHT_TALK = [
    "Please pay invoice number 55120 by Monday.",
    "I'm on flight BA2490 tomorrow morning.",  # four terms: flight, ba2490, tomorrow, morn
    *(
        f"{text} Note {k}."
        for k, text in enumerate(
            [
                "Order number 7731 shipped from warehouse 12 on 3 May, tracking code ZX-0092.",
                "Meeting with Jonas Berg moved to room 4B at 15:00 on Tuesday.",
                "The parcel for account 88-1209 arrived damaged, claim C-5512 opened.",
                "Renewed the parking permit P-33018 until 30 June 2025.",
                "Gym membership number 66120 expires next spring, price 39 euros.",
            ]
            * 6
        )
    ),
]


def test_a_message_that_says_little_but_alone_holds_a_question_word_keeps_its_place(owner):
    session = ChatSession.objects.create(user=owner, bot=BotFactory(owner=owner), title="trip")
    assert session.bot.embedding_model == "builtin/embed"  # the default: hybrid search
    for i, text in enumerate(FLIGHT_TALK):
        data.said(session, "user", text, WHEN + timedelta(minutes=2 * i))
        data.said(session, "assistant", "Noted.", WHEN + timedelta(minutes=2 * i + 1))
    for first in range(1, session.last_seq, 4):
        data.compact(session, first, first + 3)
    embeddings.messages_embed_pending(session_id=session.pk)
    question = "What is the flight number?"

    hits = queries.records_search(session=session, query=question, budget=400)

    assert 3 in {seq for hit in hits for seq in hit.seqs}, [h.seqs for h in hits]
    # "Any time." still waits for the message that says more and holds "time" too
    # (test_in_a_fused_ranking_a_message_that_says_little_comes_after_one_that_says_more).
