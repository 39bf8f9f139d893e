"""A small dated conversation for hybrid search (issue 16 item 5), compacted into two snapshots,
searched by a bot whose ``embedding_model`` is the fake provider's bag-of-concepts embedding
(tests/fakeopenai.py: ``fake_embedding``): the same rows on PostgreSQL
(tests/memory/test_hybrid_search.py) and SQLite (tests/memory/hybrid_search_sqlite_script.py),
so both must give the same hits. Import only after Django is set up.
"""

from datetime import UTC, datetime

from bots.models import Bot, ChatSession
from tests.memory import message_search_data as data

EMBEDDING_MODEL = "openai/fake-embedding"

# Words of one concept of the fake embedding: ankle ~ hurt (injury), kayak ~ boat, cello.
TALKS = [
    (
        datetime(2024, 3, 8, 18, 0, tzinfo=UTC),
        [
            ("user", "I went over on my ankle on the stairs at work."),
            ("assistant", "Ouch. Keep it raised tonight."),
            ("user", "On Sunday we took the kayak across the reservoir."),
            ("assistant", "The reservoir is calm in the mornings."),
        ],
    ),
    (
        datetime(2024, 4, 19, 9, 30, tzinfo=UTC),
        [
            ("user", "My daughter has started cello lessons."),
            ("assistant", "Twice a week, at the school?"),
            ("user", "The boat club meets on Friday."),
            ("assistant", "Friday works for me."),
        ],
    ),
]
SNAPSHOTS = ["snapshot_1_4", "snapshot_5_8"]

# (question, lexical hits, hybrid hits) as (record, seqs) pairs, best first.
QUESTIONS = [
    # no word in common with its evidence (message 1): found by meaning alone
    "How did I get hurt?",
    # "boat" finds message 7 by its word; the kayak trip (3) only by meaning
    "When did we go out on the boat?",
    # an instrument: the cello (5), never said "instrument"
    "Which instrument is she learning?",
]


def build(owner, bot: Bot, other_user) -> tuple[ChatSession, list[ChatSession]]:
    """``TALKS`` in a session of ``bot`` and, in a sibling chat of the same user and a chat of
    ``other_user`` (both with the same bot), an injury and a boat trip of their own, all
    compacted; (session, [sibling, other's])."""
    session = ChatSession.objects.create(user=owner, bot=bot, title="hybrid")
    data.conversation(session, talks=TALKS)
    foreign = []
    for user in (owner, other_user):
        chat = ChatSession.objects.create(user=user, bot=bot, title="foreign")
        when = datetime(2024, 3, 9, 12, 0, tzinfo=UTC)
        data.said(chat, "user", "I sprained my wrist falling off the canoe.", when)
        data.said(chat, "assistant", "A sprained wrist from a canoe, poor you.", when)
        data.compact(chat, 1, 2)
        foreign.append(chat)
    return session, foreign


def hits(session: ChatSession, query: str, **kwargs) -> list[list]:
    from memory import queries

    return [
        [h.name, list(h.seqs)]
        for h in queries.records_search(session=session, query=query, **kwargs)
    ]


def answers(session: ChatSession) -> dict:
    """What search answers on the fixture, lexical and hybrid, as JSON-able data (the same on
    both databases), with the vector ranking's scores."""
    import numpy as np

    from memory import embeddings
    from tests.fakeopenai import fake_embedding

    bot = session.bot
    model = bot.embedding_model
    out: dict = {"hybrid": {q: hits(session, q) for q in QUESTIONS}}
    query = np.asarray(fake_embedding(QUESTIONS[1]), dtype="<f4")
    query /= np.linalg.norm(query)
    out["vector"] = [
        [m.seq, round(m.score, 5)]
        for m in embeddings.vector_ranked(session_id=session.pk, model=model, query=query)
    ]
    bot.embedding_model = ""
    out["lexical"] = {q: hits(session, q) for q in QUESTIONS}
    bot.embedding_model = model
    return out
