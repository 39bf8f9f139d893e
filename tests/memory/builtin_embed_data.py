"""A small conversation for the built-in embedding model (issue 33): questions that share no
word with the message that answers them, so word search finds nothing and search by meaning
(``builtin/embed``, the default) does. The same rows on PostgreSQL
(tests/memory/test_builtin_embed_search.py) and SQLite
(tests/memory/builtin_embed_sqlite_script.py). Import only after Django is set up.
"""

from datetime import UTC, datetime

from bots.models import Bot, ChatSession
from tests.memory import message_search_data as data

TALKS = [
    (
        datetime(2024, 3, 8, 18, 0, tzinfo=UTC),
        [
            ("user", "My plane to Tokyo takes off at nine on Saturday morning."),
            ("assistant", "Sure, I'll remind you the day before."),
            ("user", "We repainted the kitchen a pale green last weekend."),
            ("assistant", "Nice, green kitchens feel calm."),
        ],
    ),
    (
        datetime(2024, 4, 19, 9, 30, tzinfo=UTC),
        [
            ("user", "Our landlord is raising the rent again in March."),
            ("assistant", "That is frustrating, maybe ask for a longer lease."),
            ("user", "I've been learning to bake sourdough bread."),
            ("assistant", "Sourdough takes patience but it is worth it."),
        ],
    ),
]
# (question, the hits hybrid search answers with: record and seqs, best first); word search
# answers nothing. The kitchen's reply (4) and the rent (5) are near enough in meaning to come
# along after the answer (3).
QUESTIONS = [
    ("When does my flight depart?", [["snapshot_1_4", [1]]]),
    ("What colour did we paint the walls?", [["snapshot_1_4", [3, 4]], ["snapshot_5_8", [5]]]),
]
# Said after the compactions and never compacted: found by meaning in live history only.
LIVE = ("user", "The vet says our dog needs surgery on his hip.")
LIVE_QUESTION = "Is my puppy having an operation?"


def build(owner, bot: Bot) -> ChatSession:
    """``TALKS`` in a session of ``bot``, each talk compacted into its snapshot."""
    session = ChatSession.objects.create(user=owner, bot=bot, title="built-in embed")
    data.conversation(session, talks=TALKS)
    return session


def hits(session: ChatSession, query: str, **kwargs) -> list[list]:
    from memory import queries

    return [
        [h.name, list(h.seqs)]
        for h in queries.records_search(session=session, query=query, **kwargs)
    ]


def answers(session: ChatSession) -> dict:
    """What search answers, hybrid (the bot's built-in model) and words only, as JSON data."""
    bot = session.bot
    out: dict = {"hybrid": {q: hits(session, q) for q, _ in QUESTIONS}}
    model, bot.embedding_model = bot.embedding_model, ""
    out["lexical"] = {q: hits(session, q) for q, _ in QUESTIONS}
    bot.embedding_model = model
    return out
