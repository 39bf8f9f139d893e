"""What one search counts in tokens (docs/performance.md, "Search latency, second pass"): a
candidate that cannot fit what is left of the result's room is skipped on a floor of its tokens
(``tokens_at_least``) instead of being encoded, and the result is counted once. The hits are
the same as with every candidate counted."""

import pytest

from chat_platform.llm.tokens import count_tokens, tokens_at_least
from memory import queries, search_hits
from tests.memory import message_search_data as data

QUESTION = "Meera boat trout lake job pet sister Patagonia engine"

TEXTS = [
    "",
    "one",
    "  spaced   out\t\ttabs\n\nand lines  ",
    "[12] 2024-03-08 13:56Z user: Did we book the boat trip? Maria said 10:30!\n",
    "[record snapshot_1_8]\n\n[2] 2024-03-08 18:01Z assistant: That sounds lovely.\n",
    "punctuation...\n\n\n!!! ??? ,,, --- ''' \"\"\" ### ***",
    "numbers 1234567890 3.14159 1,000,000 0x1F",
    "unicode: naïve café, 東京タワー, Привет мир, emoji 🎉🚀 x\u00a0y\u2003z\u3000w",
    "contractions: it's we're they've I'm you'll he'd",
    "<|endoftext|> special text counted as text",
    "a\x1cb c\x1fd",  # \x1c–\x1f: whitespace to str.split, not to the encoder
    "x" * 300 + " " + "ab" * 200,
]


@pytest.mark.parametrize("model", ["", "gpt-4o"])
@pytest.mark.parametrize("text", TEXTS)
def test_the_floor_never_exceeds_the_count(text, model):
    assert tokens_at_least(text) <= count_tokens(text, model=model)


def test_the_floor_is_the_number_of_runs_of_non_whitespace():
    assert [tokens_at_least(t) for t in ("", "one", TEXTS[2], "a\x1cb c\x1fd")] == [0, 1, 5, 0]


@pytest.fixture
def talked(chat_session):
    data.conversation(chat_session)
    return chat_session


def _search(session, budget, monkeypatch, *, floor):
    counted = []
    real = search_hits.count_tokens

    def counting(text, **kwargs):
        counted.append(text)
        return real(text, **kwargs)

    monkeypatch.setattr(search_hits, "count_tokens", counting)
    monkeypatch.setattr(queries, "count_tokens", counting)
    if not floor:
        monkeypatch.setattr(search_hits, "tokens_at_least", lambda text: 0)
    hits = queries.records_search(session=session, query=QUESTION, budget=budget)
    monkeypatch.undo()
    whole = "".join(search_hits.rendered(h) for h in hits)
    assert counted.count(whole) == 1  # the result counted once, by the fill
    return [(h.name, h.seqs, h.excerpt) for h in hits], len(counted)


@pytest.mark.parametrize(
    ("budget", "counted", "every_candidate"), [(70, 6, 18), (150, 16, 16), (2000, 14, 14)]
)
def test_candidates_that_cannot_fit_are_not_counted(
    talked, monkeypatch, budget, counted, every_candidate
):
    """At 70 tokens the room is full after the first hit: 12 of the next candidates are
    skipped on their floor. At 150 and 2000 every candidate is within the floor: all counted."""
    with_floor = _search(talked, budget, monkeypatch, floor=True)
    without = _search(talked, budget, monkeypatch, floor=False)

    assert with_floor[0] == without[0] and with_floor[0]
    assert (with_floor[1], without[1]) == (counted, every_candidate)


def test_the_snapshot_check_probes_each_snapshot_by_record(talked):
    """The check for snapshots whose messages are not indexed compares the session as
    ``session_id + 0``, so PostgreSQL probes the record_id index per snapshot instead of
    hashing every index row of the session (docs/performance.md)."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        hits = queries.records_search(session=talked, query=QUESTION)
    checks = [q["sql"] for q in captured.captured_queries if "NOT (EXISTS" in q["sql"]]

    assert hits and len(checks) == 1
    assert f'(U0."session_id" + 0) = {talked.pk}' in checks[0]


def test_the_lines_are_read_with_one_parameter_for_their_seqs(talked):
    """The fill reads its transcript lines with the seqs as one array parameter on PostgreSQL,
    not an IN list of one placeholder per seq (docs/performance.md, "Search latency, fourth
    pass"); the hits are those of the test above."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        hits = queries.records_search(session=talked, query=QUESTION)
    reads = [q["sql"] for q in captured.captured_queries if 'FROM "bots_message"' in q["sql"]]

    assert hits and len(reads) == 1
    if connection.vendor == "postgresql":
        assert "unnest(" in reads[0] and '"seq" IN (SELECT' in reads[0]
