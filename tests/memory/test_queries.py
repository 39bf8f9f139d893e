"""Memory reads (docs/memory.md): who may read what, the index lines, recall reads and search on
PostgreSQL. The SQLite (embedded) search runs in test_search_sqlite.py."""

import pytest

from chat_platform.errors import NotFound, ValidationFailed
from chat_platform.llm.tokens import count_tokens
from memory import queries, services
from memory.descriptions import snapshot_description
from memory.models import MemoryRecord
from tests.factories import MemoryRecordFactory

pytestmark = pytest.mark.django_db


def _save(session, name, body, *, description=None, scope=None):
    return services.record_save(
        session=session,
        name=name,
        description=description or f"About {name}",
        body=body,
        scope=scope,
    )


def _snapshot(session, first, last, body="[1] user: We talked about the garden.", indexed=True):
    record = services.snapshot_write(session=session, first_seq=first, last_seq=last, body=body)
    if indexed:
        services.snapshot_mark_indexed(snapshot=record)
    return record


def _names(records):
    return [r.name for r in records]


# --- the index --------------------------------------------------------------------------------


def test_index_lines_have_the_exact_contract_format_newest_first(chat_session):
    _snapshot(chat_session, 1, 24, body="[1] user: The garden needs tomatoes. Tomatoes again.")
    _save(chat_session, "locker", "My locker code is 4471.", description="Locker code")
    lines = queries.memory_index_lines(session=chat_session, limit=50)
    assert [line.text for line in lines] == [
        "- locker (info): Locker code",
        "- snapshot_1_24 (snapshot, messages 1–24): "
        "Pre-compaction snapshot of messages 1–24: tomatoes, garden",
    ]
    assert [line.name for line in lines] == ["locker", "snapshot_1_24"]
    assert lines[0].tokens == 8
    assert [line.tokens for line in lines] == [count_tokens(f"{line.text}\n") for line in lines]


def test_info_record_with_a_range_shows_it(chat_session):
    MemoryRecordFactory(
        session=chat_session, name="plan", description="The plan", first_seq=3, last_seq=7
    )
    lines = queries.memory_index_lines(session=chat_session, limit=5)
    assert [line.text for line in lines] == ["- plan (info, messages 3–7): The plan"]


def test_index_keeps_the_newest_up_to_the_limit_and_zero_disables_it(chat_session):
    for i in range(5):
        _save(chat_session, f"fact-{i}", f"Fact number {i}.")
    assert _names(queries.memory_index_lines(session=chat_session, limit=3)) == [
        "fact-4",
        "fact-3",
        "fact-2",
    ]
    assert queries.memory_index_lines(session=chat_session, limit=0) == []
    # A rewritten record is new again.
    _save(chat_session, "fact-0", "Fact zero, corrected.")
    assert _names(queries.memory_index_lines(session=chat_session, limit=2)) == [
        "fact-0",
        "fact-4",
    ]


def test_snapshots_join_the_index_only_once_indexed(chat_session):
    snapshot = _snapshot(chat_session, 1, 4, indexed=False)
    assert queries.memory_index_lines(session=chat_session, limit=10) == []
    # ... but the record itself is readable (kept on failure, linked from its event)
    assert _names(queries.records_for_session(session=chat_session)) == ["snapshot_1_4"]
    services.snapshot_mark_indexed(snapshot=snapshot)
    assert _names(queries.memory_index_lines(session=chat_session, limit=10)) == ["snapshot_1_4"]


def test_a_failed_passs_snapshot_takes_nothing_from_the_next_ones_description(chat_session):
    """A description names what sets a snapshot apart from what the index lists: a failed
    pass's snapshot is never listed, so its words stay distinctive for the next one. They were
    dropped (the dentist, Okafor, March 14 and Mittens left the index with the failed one)."""
    facts = (
        "[1] user: The dentist appointment is on March 14 with Dr. Okafor.\n"
        "[2] user: My cat is called Mittens."
    )
    _snapshot(chat_session, 1, 2, body=facts, indexed=False)
    body = f"{facts}\n[3] user: We walked along the harbour in Rotterdam yesterday."
    after = _snapshot(chat_session, 1, 3, body=body)
    assert after.description == snapshot_description(1, 3, body, [])
    assert after.description == (
        "Pre-compaction snapshot of messages 1–3: March 14, Dr, Mittens, Rotterdam, dentist, "
        "appointment"
    )


def test_index_costs_a_fixed_number_of_queries(chat_session, django_assert_num_queries):
    for i in range(20):
        _save(chat_session, f"fact-{i}", "x " * 500)
    with django_assert_num_queries(1):
        lines = queries.memory_index_lines(session=chat_session, limit=50, model="")
    assert len(lines) == 20


def test_index_lines_are_counted_once_across_measures(chat_session, monkeypatch):
    """Every model call measures the index: a line already counted is not tokenised again (a
    long tool task counted each ~250 times), and a rewritten line is counted afresh."""
    for i in range(3):
        _save(chat_session, f"fact-{i}", f"Fact number {i}.", description=f"Fact {i} for once")
    counted: list[str] = []

    def counting(text, *, model=""):
        counted.append(text)
        return count_tokens(text, model=model)

    monkeypatch.setattr(queries, "count_tokens", counting)
    queries._line_tokens.cache_clear()
    first = queries.memory_index_lines(session=chat_session, limit=50, model="")
    again = queries.memory_index_lines(session=chat_session, limit=50, model="")
    assert again == first
    assert sorted(counted) == sorted(f"{line.text}\n" for line in first)
    assert [line.tokens for line in first] == [count_tokens(f"{line.text}\n") for line in first]

    _save(chat_session, "fact-1", "Fact one, corrected.", description="Fact 1 corrected")
    later = queries.memory_index_lines(session=chat_session, limit=50, model="")
    assert later[0].text == "- fact-1 (info): Fact 1 corrected"
    assert counted[3:] == ["- fact-1 (info): Fact 1 corrected\n"]
    assert later[0].tokens == count_tokens("- fact-1 (info): Fact 1 corrected\n")


# --- scopes -----------------------------------------------------------------------------------


def test_scope_isolation_everywhere(
    chat_session, sibling_session, other_bot_session, other_user_session
):
    _save(chat_session, "mine-here", "Only in this chat: the cello.")
    _save(chat_session, "per-bot", "Every chat with this bot: the violin.", scope="bot")

    def visible(session):
        return {
            "list": sorted(_names(queries.records_for_session(session=session))),
            "index": sorted(_names(queries.memory_index_lines(session=session, limit=50))),
            "read": [
                r.found
                for r in queries.records_read(session=session, names=["mine-here", "per-bot"])
            ],
            "search": sorted(
                h.name for h in queries.records_search(session=session, query="cello violin")
            ),
        }

    assert visible(chat_session) == {
        "list": ["mine-here", "per-bot"],
        "index": ["mine-here", "per-bot"],
        "read": [True, True],
        "search": ["mine-here", "per-bot"],
    }
    assert visible(sibling_session) == {
        "list": ["per-bot"],
        "index": ["per-bot"],
        "read": [False, True],
        "search": ["per-bot"],
    }
    nothing = {"list": [], "index": [], "read": [False, False], "search": []}
    assert visible(other_bot_session) == nothing
    assert visible(other_user_session) == nothing


def test_a_session_record_shadows_a_bot_record_of_the_same_name(chat_session, sibling_session):
    _save(chat_session, "city", "Bot-wide: Porto.", scope="bot")
    MemoryRecordFactory(session=sibling_session, name="city", body="This chat: Lisbon.")
    assert [r.body for r in queries.records_read(session=sibling_session, names=["city"])] == [
        "This chat: Lisbon."
    ]
    assert [r.body for r in queries.records_read(session=chat_session, names=["city"])] == [
        "Bot-wide: Porto."
    ]
    assert _names(queries.records_for_session(session=sibling_session)) == ["city"]


def test_record_get_is_one_not_found(chat_session, sibling_session):
    _save(chat_session, "here", "text")
    assert queries.record_get_for_session(session=chat_session, name="here").body == "text"
    for session, name in [
        (sibling_session, "here"),
        (chat_session, "missing"),
        (chat_session, "../../etc/passwd"),
        (chat_session, 7),
    ]:
        with pytest.raises(NotFound) as exc:
            queries.record_get_for_session(session=session, name=name)
        assert exc.value.message == "Record not found."


# --- recall: read -----------------------------------------------------------------------------


def test_read_returns_bodies_in_the_order_asked_and_marks_unknown_names(
    chat_session, sibling_session
):
    _save(sibling_session, "elsewhere", "Another chat's secret.")
    _save(chat_session, "a", "Alpha body.")
    _save(chat_session, "b", "Beta body.")
    reads = queries.records_read(
        session=chat_session, names=["b", "nope", "elsewhere", "a", "b", "' OR 1=1 --"]
    )
    assert [(r.name, r.found, r.body) for r in reads] == [
        ("b", True, "Beta body."),
        ("nope", False, ""),
        ("elsewhere", False, ""),
        ("a", True, "Alpha body."),
        ("' OR 1=1 --", False, ""),
    ]
    assert reads[1].not_found_marker == "[not found: nope]"
    assert reads[0].tokens == count_tokens("Beta body.")


def test_read_accepts_at_most_five_names(chat_session):
    assert len(queries.records_read(session=chat_session, names=list("abcde"))) == 5
    with pytest.raises(ValidationFailed) as exc:
        queries.records_read(session=chat_session, names=list("abcdef"))
    assert exc.value.details == {"names": ["Ask for at most 5 names at a time."]}


def test_read_caps_each_body_at_2000_tokens_and_marks_the_cut(chat_session):
    body = " ".join(["word"] * 3000)
    assert count_tokens(body) == 3000
    _save(chat_session, "long", body)
    _save(chat_session, "short", "Short.")
    long, short = queries.records_read(session=chat_session, names=["long", "short"])
    assert long.truncated and not short.truncated
    assert long.body.endswith("\n[truncated: record continues, 3000 tokens in all]")
    assert long.body.startswith("word word")
    assert long.tokens == count_tokens(long.body) == 2000
    assert (short.body, short.tokens) == ("Short.", 2)


# --- search on PostgreSQL ---------------------------------------------------------------------


@pytest.fixture
def searchable(chat_session):
    _save(chat_session, "sister", "My sister Ana plays the cello in the city orchestra.")
    _save(chat_session, "home", "I live in Porto, by the river Douro.", description="Where I live")
    _save(chat_session, "car", "The car is a blue Volvo, plate XY-12-CD.")
    return chat_session


def test_search_ranks_the_best_match_first(chat_session):
    _save(chat_session, "body-only", "We once drove past Porto on the way south.")
    _save(chat_session, "porto", "Notes.", description="Porto: the flat, Porto: the street")
    _save(chat_session, "unrelated", "Nothing here.")
    hits = queries.records_search(session=chat_session, query="porto")
    assert [h.name for h in hits] == ["porto", "body-only"]
    assert hits[0].rank > hits[1].rank > 0


def test_search_excerpt_highlights_the_match(searchable):
    (hit,) = queries.records_search(session=searchable, query="cello")
    assert hit.name == "sister"
    assert hit.excerpt == "My sister Ana plays the **cello** in the city orchestra."


def test_search_needs_every_word_then_falls_back_to_any_word(searchable):
    assert [h.name for h in queries.records_search(session=searchable, query="blue volvo")] == [
        "car"
    ]
    hits = queries.records_search(
        session=searchable, query="Where do I live and what does my sister play?"
    )
    assert [h.name for h in hits] == ["sister", "home"]
    assert "**sister**" in hits[0].excerpt and "**plays**" in hits[0].excerpt


def test_search_limit_kind_and_scope_filters(searchable):
    _snapshot(searchable, 1, 4, body="[1] user: my sister moved to Porto.")
    assert [h.name for h in queries.records_search(session=searchable, query="sister", limit=1)]
    assert [
        h.name for h in queries.records_search(session=searchable, query="sister", kind="snapshot")
    ] == ["snapshot_1_4"]
    assert queries.records_search(session=searchable, query="sister", scope="bot") == []
    assert queries.records_search(session=searchable, query="sister", limit=0) == []


def test_search_excerpt_is_at_most_300_tokens(chat_session):
    _save(chat_session, "huge", ("cello " * 2000) + "end")
    (hit,) = queries.records_search(session=chat_session, query="cello")
    assert 0 < count_tokens(hit.excerpt) <= 300


INJECTION_SHAPED = [
    '"',
    '""""',
    "*",
    "cel*",
    "NEAR",
    "NEAR(a b)",
    "OR",
    "AND NOT",
    "-",
    "--",
    ";",
    "' OR 1=1 --",
    "'; DROP TABLE memory_memoryrecord; --",
    "../../etc/passwd",
    "name:secret",
    "a\x00b",
    "\ud800lone",
    "()",
    "!@#$%^&*()",
    "",
    "   ",
    "x" * 5000,
    "{body}",
    "%s %s",
]


@pytest.mark.parametrize("query", INJECTION_SHAPED)
def test_injection_shaped_queries_are_just_words(searchable, query):
    assert queries.records_search(session=searchable, query=query) == []
    assert MemoryRecord.objects.count() == 3
    assert [h.name for h in queries.records_search(session=searchable, query="cello")] == ["sister"]


def test_search_of_non_text_is_no_hits(searchable):
    assert queries.records_search(session=searchable, query=None) == []
    assert queries.records_search(session=searchable, query=["cello"]) == []
