"""Snapshot descriptions name what sets a snapshot apart from the rest of its session
(docs/memory.md; issue 16, item 3): TF-IDF-like against the session's other records, names, dates
and numbers with their context, the user's turns over the replies, never filler every snapshot
shares, within 140 characters, deterministic. Written by ``snapshot_write``, the call every
compaction attempt makes before its summariser."""

import pytest

from memory import services
from memory.models import MemoryRecord
from tests.factories import SessionFactory

pytestmark = pytest.mark.django_db

PREFIX = "Pre-compaction snapshot of messages"


def _reply(seq):
    # What a fake provider answers every turn: shared by every snapshot, it says nothing.
    return f"[{seq}] assistant: ACK {seq} messages received. The answer is forty-two."


def _transcript(first, user_lines):
    lines = []
    seq = first
    for text in user_lines:
        lines.append(f"[{seq}] user: {text}")
        lines.append(_reply(seq + 1))
        seq += 2
    return "\n".join(lines)


LISBON = [
    "We are planning a trip to Lisbon on May 3.",
    "Our flight BA117 leaves from Heathrow in the morning.",
    "We booked Hotel Avenida Palace near the river.",
]
CELLO = [
    "My sister Clara plays the cello in the Porto orchestra.",
    "Her first concert was on 2024-03-08 at the conservatory.",
    "Her teacher is called Henrik Dahl and her locker code is 4471.",
]


def _write(session, first, body):
    """A snapshot as a pass that succeeded leaves it: written, then listed in the index (a
    failed pass's is never listed, and no other description is set apart from it)."""
    last = first + body.count("\n")
    record = services.snapshot_write(session=session, first_seq=first, last_seq=last, body=body)
    MemoryRecord.objects.filter(pk=record.pk).update(indexed=True)
    return record


def _terms(description):
    head, _, terms = description.partition(": ")
    assert head.startswith(PREFIX)
    return terms.split(", ") if terms else []


def test_two_topics_in_one_session_get_descriptions_naming_their_own_terms(chat_session):
    lisbon = _write(chat_session, 1, _transcript(1, LISBON))
    cello = _write(chat_session, 7, _transcript(7, CELLO))
    assert lisbon.description == (
        "Pre-compaction snapshot of messages 1–6: May 3, Lisbon, flight BA117, Heathrow, "
        "Hotel Avenida Palace, planning"
    )
    assert cello.description == (
        "Pre-compaction snapshot of messages 7–12: 2024-03-08, Clara, Porto, code 4471, "
        "Henrik Dahl, sister"
    )


def test_filler_every_snapshot_shares_never_appears(chat_session):
    topics = [LISBON, CELLO, ["Quick update: the garden needs tomatoes and basil by Friday."]]
    descriptions = []
    first = 1
    for lines in topics:
        # The user opens every batch the same way too: shared by all, it names none of them.
        body = _transcript(first, ["Quick update from the cabin.", *lines])
        descriptions.append(_write(chat_session, first, body).description)
        first += 2 * (len(lines) + 1)
    for description in descriptions:
        words = " ".join(_terms(description)).lower().split()
        for filler in ("ack", "messages", "received", "answer", "forty-two", "update"):
            assert filler not in words, (filler, description)
    # The user's opener is in every batch: once another record holds it, it is not distinctive
    # (the first snapshot, written when no other record exists, cannot know that yet).
    for description in descriptions[1:]:
        words = " ".join(_terms(description)).lower().split()
        assert "quick" not in words and "cabin" not in words, description
    assert "tomatoes" in descriptions[2] and "Friday" in descriptions[2]


def test_the_users_terms_outrank_terms_only_the_assistant_says(chat_session):
    body = "\n".join(
        [
            "[1] user: Can you suggest something to cook for Saturday with saffron?",
            "[2] assistant: A paella from Valencia with chorizo, or paella with chorizo and rice.",
            "[3] user: The saffron is from my aunt in Toledo.",
            "[4] assistant: Valencia paella with chorizo then.",
        ]
    )
    terms = _terms(_write(chat_session, 1, body).description)
    assert terms[:3] == ["saffron", "Saturday", "Toledo"]
    assert "paella" in terms and terms.index("Toledo") < terms.index("paella")


def test_names_dates_and_numbers_appear_with_their_context(chat_session):
    body = _transcript(
        1,
        [
            "My manager Henrik Dahl moved the review to 14 March 2025.",
            "The invoice number is 88231 and the rent is 1250 a month.",
            "The train ICE 578 leaves Munich at noon.",
        ],
    )
    description = _write(chat_session, 1, body).description
    for term in ("Henrik Dahl", "14 March 2025", "number 88231", "rent 1250", "Munich", "ICE 578"):
        assert term in description, (term, description)


def test_a_snapshot_full_of_distinct_rare_words_stays_within_140_chars(chat_session):
    rare = [f"Zorvath{chr(97 + i % 26)}{chr(97 + i // 26)}qux" for i in range(300)]
    body = "\n".join(
        f"[{n + 1}] user: I met {word} Quintessentially-Longnamed and Xylophonist {word}x today."
        for n, word in enumerate(rare)
    )
    description = _write(chat_session, 1, body).description
    assert len(description) <= 140
    assert description.startswith("Pre-compaction snapshot of messages 1–300: ")
    terms = _terms(description)
    assert len(terms) >= 2
    assert all(term in body for term in terms), terms  # whole terms, never cut off


def test_descriptions_are_deterministic_and_nul_free(owner, bot):
    bodies = [_transcript(1, LISBON), _transcript(7, CELLO)]
    first = SessionFactory(user=owner, bot=bot)
    second = SessionFactory(user=owner, bot=bot)
    _write(first, 7, bodies[1])
    _write(second, 7, bodies[1])
    one = _write(first, 1, bodies[0]).description
    two = _write(second, 1, bodies[0]).description
    again = _write(first, 1, bodies[0]).description  # a retried range rewrites it the same way
    assert (
        one
        == two
        == again
        == (
            "Pre-compaction snapshot of messages 1–6: May 3, Lisbon, flight BA117, Heathrow, "
            "Hotel Avenida Palace, planning"
        )
    )
    assert "\x00" not in one and "\n" not in one and one.isprintable()


def test_document_frequency_counts_documents_holding_every_word_of_a_term():
    """``_frequencies`` (one set intersection per document) counts as a term-by-document check
    would: single words, word groups (all must be there), and a term of no words (every one)."""
    from memory.descriptions import _frequencies

    docs = [frozenset({"henrik", "dahl", "flight"}), frozenset({"henrik"}), frozenset({"ba117"})]
    wanted = {
        "henrik": frozenset({"henrik"}),
        "henrik dahl": frozenset({"henrik", "dahl"}),
        "flight ba117": frozenset({"flight", "ba117"}),
        "lisbon": frozenset({"lisbon"}),
        "": frozenset(),
    }
    assert _frequencies(wanted, docs) == {
        "henrik": 2,
        "henrik dahl": 1,
        "flight ba117": 0,
        "lisbon": 0,
        "": 3,
    }


def test_document_frequency_moves_with_the_list_as_a_fresh_count_would():
    """The per-process counts follow each list by difference (a record more, one gone, one
    listed twice, another session's list, an empty one): every answer equals a count made from
    scratch, and the counts move rather than start over when one record changes."""
    from memory import descriptions

    a, b, c = frozenset({"henrik", "x"}), frozenset({"henrik", "dahl"}), frozenset({"ba117"})
    d = frozenset({"x", "y"})
    wanted = {w: frozenset({w}) for w in ("henrik", "dahl", "ba117", "x", "y", "lisbon")} | {
        "henrik dahl": frozenset({"henrik", "dahl"})
    }
    counter = descriptions._DocumentFrequency()
    rebuilt: list[int] = []
    original = counter._move_to

    def move(docs):  # noqa: ANN001, ANN202
        before = counter._words
        original(docs)
        rebuilt.append(counter._words is not before)

    counter._move_to = move
    lists = [[a, b], [a, b, c], [b, c], [b, c, c], [b, c, d], [d], [], [a, b, c, d]]
    for docs in lists:
        expected = {key: sum(1 for doc in docs if parts <= doc) for key, parts in wanted.items()}
        assert counter.frequencies(wanted, docs) == expected, docs
    # A record more, one gone, one twice, one swapped: moved, not recounted; a list whose
    # change from the last holds more words than the list itself ([d] after [b, c, d], then
    # the empty list) is counted afresh.
    assert rebuilt == [False, False, False, False, False, True, True, False]


def test_a_one_word_term_is_split_as_every_term_is():
    """``_Terms.take``'s one-word path (a word ``str.isalnum`` accepts is one ``_WORD`` match)
    gives the parts the general path gives, on words of every kind of letter and digit."""
    from memory.descriptions import _WORD, _Terms, _tokens

    words = ["w123", "Ä", "ß", "²", "½", "٣٤", "İstanbul", "ﬁle", "Clara's", "snake_case", "a-b"]
    found = _Terms(_tokens(" ".join(words)))
    for i in range(len(found.words)):
        found.take(i, i + 1, "word", found.words[i])
    assert [term.parts for term in found.terms] == [
        tuple(w.lower() for w in _WORD.findall(word)) for word in found.words
    ]
    assert found.terms[0].parts == ("w123",)
    assert found.terms[6].parts == ("i̇stanbul",)


def test_a_tool_result_is_described_by_its_head():
    """A tool's result is read as far as ``TOOL_RESULT_CHARS`` (docs/tools.md): a term past its
    head names nothing, the same words in a person's message do."""
    from memory.descriptions import TOOL_RESULT_CHARS, distinctive_terms

    padding = "and the " * (TOOL_RESULT_CHARS // 8)  # stop words: no term of their own
    tool = f"[3] 2026-12-05 tool (stock__list): Warehouse Kestrel holds crates. {padding} Zanzibar"
    user = f"[4] 2026-12-05 user: {padding} Zanzibar"

    assert TOOL_RESULT_CHARS == 2_000
    assert distinctive_terms(tool, []) == ["Kestrel", "warehouse", "holds", "crates"]
    assert distinctive_terms(user, []) == ["Zanzibar"]
