"""Message-level search (issue 16, item 1; docs/memory.md "Recall … search_records" and "Search"):
every compacted message is indexed once (``memory.services.messages_index``), ranked by BM25
over its Snowball terms with any query word counting, and a hit is the record that holds the
matching messages with each one whole, dated and attributed (``memory.queries.records_search``).

The fixture conversation (tests/memory/message_search_data.py) is three dated talks, each
compacted into its own snapshot the way a compaction pass commits it, then one turn that is not
compacted. tests/memory/test_message_search_sqlite.py checks SQLite gives the same hits.
"""

import importlib
import json
import re
from datetime import UTC, datetime

import pytest
from django.apps import apps as django_apps
from django.db import connection
from django.test import override_settings

from bots.models import Message
from bots.transitions import session_context_add
from chat_platform.llm.tokens import count_tokens
from compaction.engine import compaction_manual
from compaction.models import Summary, SummaryCoverage
from memory import queries, search, services
from memory.models import MessageIndex
from memory.recall import ToolCall, recall_execute
from memory.terms import query_terms, terms
from tests.coverage import cover, messages_covered
from tests.factories import MemoryRecordFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from tests.memory import message_search_data as data
from tests.memory.test_queries import INJECTION_SHAPED
from turns import turn

pytestmark = pytest.mark.django_db

LINE = re.compile(r"^\[(\d+)\] \d{4}-\d{2}-\d{2} \d{2}:\d{2}Z (user|assistant): \S")


def _hits(session, query, **kwargs):
    return [
        (h.name, h.seqs) for h in queries.records_search(session=session, query=query, **kwargs)
    ]


def _ranked(session, query):
    scored, _ = search.messages_ranked(
        session_id=session.pk, query=query_terms(query, search.QUERY_MAX_TERMS)
    )
    return [m.seq for m in scored]


def _rendered_tokens(hits):
    return sum(count_tokens(f"[record {h.name}]\n{h.excerpt}\n\n") for h in hits)


@pytest.fixture
def talked(chat_session):
    data.conversation(chat_session)
    return chat_session


@pytest.fixture
def foreign(talked, sibling_session, other_user_session, other_bot_session, other_user):
    """The same words, compacted, in every session ``talked`` must never read, plus a codeword
    only they hold, and a bot-scoped record of the other user with the same bot."""
    for session in (sibling_session, other_user_session, other_bot_session):
        when = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
        data.said(session, "user", "The boat on the lake is hidden, codeword zanzibar.", when)
        data.said(session, "assistant", "Zanzibar it is: the boat, the lake, the trout.", when)
        data.compact(session, 1, 2)
    MemoryRecordFactory(
        session=None,
        scope="bot",
        user=other_user,
        bot=talked.bot,
        name="boat_secret",
        description="zanzibar boat lake",
        body="The zanzibar boat is on the lake.",
    )
    return [sibling_session, other_user_session, other_bot_session]


# --- 1. ranking --------------------------------------------------------------------------------


def test_a_question_with_one_evidence_turn_finds_exactly_it(talked):
    (hit,) = queries.records_search(
        session=talked, query="Which hospital does she work at as a nurse?"
    )

    assert (hit.name, hit.seqs, hit.record.kind) == ("snapshot_9_16", (9,), "snapshot")
    assert hit.excerpt == (
        "[9] 2024-04-19 09:30Z user: I started a new job as a nurse at St Mary's hospital in Leeds."
    )
    assert hit.excerpt == data.line(9)


def test_a_question_with_evidence_in_two_talks_finds_both(talked):
    # "pet" is in message 7 (March) and message 13 (April): same length, same score, newest first
    assert _ranked(talked, "What pets do I have?") == [13, 7]
    hits = queries.records_search(session=talked, query="What pets do I have?")

    assert [(h.name, h.seqs, h.excerpt) for h in hits] == [
        ("snapshot_9_16", (13,), data.line(13)),
        ("snapshot_1_8", (7,), data.line(7)),
    ]
    assert hits[0].rank == pytest.approx(hits[1].rank)


def test_a_when_question_finds_the_turn_with_its_date(talked):
    question = "When did we take the boat out to the lake?"

    # boat + lake (1) over take (12: "Take care") over boat (21); the uncompacted "boat and
    # lake" turn (23) is not indexed
    assert _ranked(talked, question) == [1, 12, 21]
    hits = queries.records_search(session=talked, query=question)

    assert [(h.name, h.seqs) for h in hits] == [
        ("snapshot_1_8", (1,)),
        ("snapshot_9_16", (12,)),
        ("snapshot_17_22", (21,)),
    ]
    assert hits[0].excerpt == (
        "[1] 2024-03-08 18:00Z user: Last Friday we finally took the boat out to the lake."
    )
    assert hits[0].rank > hits[1].rank > hits[2].rank


def test_one_rare_word_beats_a_name_in_every_other_message(chat_session):
    data.conversation(chat_session, talks=data.RAVI_TALKS)
    question = "What did Ravi say about the harmonica?"
    # the evidence (6) shares only "harmonica" with the question; every other message says Ravi
    assert "ravi" not in terms(data.RAVI_TALKS[1][1][1][1])

    ranked = _ranked(chat_session, question)
    hits = queries.records_search(session=chat_session, query=question)

    assert ranked[0] == 6
    assert sorted(ranked) == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert [(h.name, h.seqs) for h in hits] == [
        ("snapshot_5_8", (5, 6, 7, 8)),
        ("snapshot_1_4", (1, 2, 3, 4)),
        ("snapshot_9_10", (9, 10)),
    ]
    assert hits[0].excerpt.splitlines()[1] == (
        "[6] 2024-06-09 10:01Z assistant: He has been practising the harmonica every evening."
    )


def test_stop_words_alone_find_nothing_and_stems_match(talked):
    assert _hits(talked, "What is it that you were going to do with them?") == []
    # "grilling" and "grilled" are one stem; "Lemons" is "lemon"
    assert _hits(talked, "grilling lemons") == [("snapshot_1_8", (5, 6))]


# --- 2. hits are whole messages; fusion copies; duplicates; budgets -----------------------------


def test_a_hit_is_whole_dated_attributed_lines_in_seq_order(talked):
    (hit,) = queries.records_search(session=talked, query="grilling lemons")

    assert hit.seqs == (5, 6)
    assert hit.excerpt.splitlines() == [
        "[5] 2024-03-08 18:04Z user: We grilled it with lemon that evening.",
        "[6] 2024-03-08 18:05Z assistant: Grilled trout with lemon is a classic.",
    ]
    assert all(LINE.match(text) for text in hit.excerpt.splitlines())
    assert "**" not in hit.excerpt


def test_a_matching_question_brings_the_next_turn(talked):
    # 2 ends in "?": its answer (3) comes along though it holds no query word
    hits = queries.records_search(session=talked, query="lovely trip")

    assert [(h.name, h.seqs, h.excerpt) for h in hits] == [
        ("snapshot_1_8", (2, 3), f"{data.line(2)}\n{data.line(3)}"),
        ("snapshot_17_22", (17,), data.line(17)),
    ]


def test_a_message_that_is_a_hit_and_a_neighbour_appears_once(talked):
    # 3 is the answer to 2 and a trout hit itself; 5 is the answer to 4 ("Did you cook it?")
    (first, second) = queries.records_search(session=talked, query="lovely trip trout")

    assert (first.name, first.seqs) == ("snapshot_1_8", (2, 3, 4, 5, 6))
    assert first.excerpt.splitlines() == [data.line(s) for s in (2, 3, 4, 5, 6)]
    assert (second.name, second.seqs) == ("snapshot_17_22", (17,))


def test_a_fusion_snapshot_never_outranks_the_messages_it_copies(talked):
    fusion = data.fuse(talked, 1, 16)
    assert (fusion.name, fusion.indexed) == ("snapshot_1_16", True)
    assert data.line(1) in fusion.body  # the fusion holds a copy of the evidence line

    hits = queries.records_search(session=talked, query="boat lake")

    assert [(h.name, h.seqs) for h in hits] == [
        ("snapshot_1_8", (1,)),
        ("snapshot_17_22", (21,)),
        ("snapshot_1_16", ()),  # searched as a record, after every message hit
    ]
    assert hits[0].excerpt == data.line(1)
    assert hits[2].rank < hits[1].rank
    # the messages stay held by the passes' snapshots, never by the fusion
    assert not MessageIndex.objects.filter(record=fusion).exists()


def test_a_failed_passs_snapshot_is_never_a_hit(talked):
    """A pass that failed leaves its snapshot for the audit, never indexed (docs/memory.md):
    its messages were not compacted, so it holds no message of the index. Searched as a record
    like a fusion's, it came back as a second hit repeating the messages (seqs empty)."""
    before = _hits(talked, "boat lake")
    failed = services.snapshot_write(
        session=talked, first_seq=1, last_seq=4, body=f"{data.line(1)}\n{data.line(2)}"
    )
    assert (failed.name, failed.indexed) == ("snapshot_1_4", False)

    assert (
        _hits(talked, "boat lake") == before == [("snapshot_1_8", (1,)), ("snapshot_17_22", (21,))]
    )


def test_info_records_rank_with_the_messages(talked):
    MemoryRecordFactory(
        session=talked,
        name="boat_name",
        description="The boat's name",
        body="The boat is called Seagull.",
    )

    hits = queries.records_search(session=talked, query="What is the boat called?")

    assert [(h.name, h.seqs) for h in hits] == [
        ("boat_name", ()),
        ("snapshot_1_8", (1, 7)),
        ("snapshot_17_22", (21,)),
    ]
    assert hits[0].record.kind == "info"


QUERY = "lovely trip trout pet boat"
FULL = [
    ("snapshot_1_8", (1, 2, 3, 4, 5, 6, 7)),
    ("snapshot_17_22", (17, 21)),
    ("snapshot_9_16", (13,)),
]


def test_the_whole_ranking_fits_the_default_result_budget(talked):
    hits = queries.records_search(session=talked, query=QUERY)

    assert [(h.name, h.seqs) for h in hits] == FULL
    assert _rendered_tokens(hits) <= 2000


@pytest.mark.parametrize("room", [70, 90, 120, 200, 300])
def test_search_result_tokens_caps_the_result(talked, room):
    with override_settings(SEARCH_RESULT_TOKENS=room):
        capped = queries.records_search(session=talked, query=QUERY)
    hits = queries.records_search(session=talked, query=QUERY, budget=room)

    assert _rendered_tokens(capped) <= room
    assert [(h.name, h.seqs) for h in capped] == [(h.name, h.seqs) for h in hits]
    # whole lines only: every line of every hit is a message's own line
    for hit in capped:
        assert hit.excerpt.splitlines() == [data.line(s) for s in hit.seqs]


def test_a_small_budget_keeps_the_best_messages_first(talked):
    # 2 + its answer cost 67 tokens with the header; 4 + 5 would not fit next to them in 90
    assert _hits(talked, QUERY, budget=70) == [("snapshot_1_8", (2, 3))]
    assert _hits(talked, QUERY, budget=2000) == FULL
    # the budget never exceeds SEARCH_RESULT_TOKENS_MAX, nor SEARCH_RESULT_TOKENS when it is more
    with override_settings(SEARCH_RESULT_TOKENS=70, SEARCH_RESULT_TOKENS_MAX=70):
        assert _hits(talked, QUERY, budget=5000) == [("snapshot_1_8", (2, 3))]
    with override_settings(SEARCH_RESULT_TOKENS=70, SEARCH_RESULT_TOKENS_MAX=0):
        assert _hits(talked, QUERY, budget=5000) == [("snapshot_1_8", (2, 3))]
    assert _hits(talked, QUERY, budget=0) == []


def test_a_budget_above_search_result_tokens_is_filled_up_to_the_max(talked):
    """Recall passes what its request has room for (``queries.search_room``): more than
    ``SEARCH_RESULT_TOKENS`` is filled, up to ``SEARCH_RESULT_TOKENS_MAX``; without a budget
    (the records API) a search fills ``SEARCH_RESULT_TOKENS``."""
    with override_settings(SEARCH_RESULT_TOKENS=70, SEARCH_RESULT_TOKENS_MAX=2000):
        assert _hits(talked, QUERY, budget=5000) == FULL
        assert _hits(talked, QUERY) == [("snapshot_1_8", (2, 3))]
    with override_settings(SEARCH_RESULT_TOKENS=70, SEARCH_RESULT_TOKENS_MAX=200):
        assert _hits(talked, QUERY, budget=5000) == _hits(talked, QUERY, budget=200)


@pytest.mark.parametrize(
    ("room", "filled"),
    [(-5, 0), (0, 0), (1500, 1500), (3000, 2000), (4000, 2000), (6287, 3143), (9000, 4000)],
)
def test_a_recall_search_fills_half_its_room_within_the_bounds(room, filled):
    with override_settings(SEARCH_RESULT_TOKENS=2000, SEARCH_RESULT_TOKENS_MAX=4000):
        assert queries.search_room(room) == filled
    with override_settings(SEARCH_RESULT_TOKENS=2000, SEARCH_RESULT_TOKENS_MAX=1000):
        assert queries.search_room(room) == max(0, min(room, 2000))


def test_the_search_tool_fills_its_share_of_the_room_left(talked):
    """Through recall: a round with 5,000 tokens of room searches with 2,500 of them (half), not
    the 70 of ``SEARCH_RESULT_TOKENS``."""
    reply = message_add(talked, role="assistant", content="", status="pending", token_count=0)
    call = ToolCall(id="c1", name="search_records", arguments={"query": QUERY})
    with override_settings(SEARCH_RESULT_TOKENS=70, SEARCH_RESULT_TOKENS_MAX=4000):
        (wide,) = recall_execute(
            session=talked, reply=reply, recall_round=1, calls=[call], room_tokens=5000, model=""
        )
        (narrow,) = recall_execute(
            session=talked, reply=reply, recall_round=1, calls=[call], room_tokens=100, model=""
        )
    full = "\n\n".join(
        f"{h.header}\n{h.excerpt}"
        for h in queries.records_search(session=talked, query=QUERY, budget=2500)
    )
    assert wide.content == full
    assert [line for line in narrow.content.splitlines() if line.startswith("[record")] == [
        "[record snapshot_1_8]"
    ]


def test_the_best_message_is_cut_not_dropped_when_it_alone_does_not_fit(talked):
    # "[record snapshot_1_8]\n" + line 2 + "\n\n" is 37 tokens
    (hit,) = queries.records_search(session=talked, query="lovely trip", budget=30)

    assert hit.seqs == (2,)
    assert hit.excerpt == "[2] 2024-03-08 18:01Z assistant: That sounds like …"
    assert _rendered_tokens([hit]) <= 30


def test_the_best_message_whole_when_only_its_answer_does_not_fit(talked):
    # line 2 alone costs 37 tokens, with its answer 67: in 50 it fits whole, without the answer
    hits = queries.records_search(session=talked, query="lovely trip", budget=50)

    assert [(h.name, h.seqs, h.excerpt) for h in hits] == [("snapshot_1_8", (2,), data.line(2))]


# --- 3. scopes and hostile queries ---------------------------------------------------------------


def test_other_sessions_and_users_messages_are_never_hit(talked, foreign):
    assert _hits(talked, "zanzibar") == []
    assert _hits(talked, "boat lake zanzibar") == [
        ("snapshot_1_8", (1,)),
        ("snapshot_17_22", (21,)),
    ]
    sibling, other_user, other_bot = foreign
    # each foreign session finds its own message, and only its own
    for session in foreign:
        (hit,) = [h for h in queries.records_search(session=session, query="zanzibar") if h.seqs]
        assert (hit.name, hit.seqs, hit.record.session_id) == ("snapshot_1_2", (1, 2), session.pk)
    # the other user reads its own bot-scoped record; the owner's sessions never do
    assert _hits(other_user, "zanzibar") == [("boat_secret", ()), ("snapshot_1_2", (1, 2))]
    assert _hits(sibling, "zanzibar") == [("snapshot_1_2", (1, 2))]
    assert _hits(other_bot, "zanzibar") == [("snapshot_1_2", (1, 2))]


def test_the_records_api_q_returns_message_hits_with_seqs(
    talked, foreign, owner_client, other_client
):
    url = f"/api/v1/sessions/{talked.pk}/records/"

    response = owner_client.get(url, {"q": "When did we take the boat out to the lake?"})

    assert response.status_code == 200
    body = response.json()
    assert [(h["name"], h["kind"], h["seqs"], h["excerpt"]) for h in body] == [
        ("snapshot_1_8", "snapshot", [1], data.line(1)),
        ("snapshot_9_16", "snapshot", [12], data.line(12)),
        ("snapshot_17_22", "snapshot", [21], data.line(21)),
    ]
    assert owner_client.get(url, {"q": "zanzibar"}).json() == []
    assert other_client.get(url, {"q": "boat"}).status_code == 404


@pytest.mark.parametrize("query", [*INJECTION_SHAPED, 'a" OR "b', "NEAR(x y)", "x" * 10_240])
def test_injection_shaped_queries_are_harmless(talked, foreign, query):
    # "name:secret" is two words, and "name" is said in 8 ("great name") and 13 ("named")
    expected = [("snapshot_1_8", (8,)), ("snapshot_9_16", (13,))] if query == "name:secret" else []
    assert _hits(talked, query) == expected
    assert MessageIndex.objects.filter(session=talked).count() == 22
    assert _hits(talked, "boat lake") == [("snapshot_1_8", (1,)), ("snapshot_17_22", (21,))]


def test_ten_kilobytes_of_words_are_harmless_and_stay_in_scope(talked, foreign):
    query = ("boat lake zanzibar trout " * 500)[:10_240]

    hits = queries.records_search(session=talked, query=query)

    assert {h.record.session_id for h in hits} == {talked.pk}
    # 1 (boat, lake), 3 / 4 / 6 (trout), 5 the answer to 4; 21 (boat)
    assert [(h.name, h.seqs) for h in hits] == [
        ("snapshot_1_8", (1, 3, 4, 5, 6)),
        ("snapshot_17_22", (21,)),
    ]


def _call(name, arguments):
    return {
        "id": "call_1",
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


@pytest.mark.django_db(transaction=True)
def test_the_search_tool_returns_whole_dated_lines_of_this_session_only(
    fake_session, fake_openai, owner
):
    data.conversation(fake_session)
    sibling = SessionFactory(user=owner, bot=fake_session.bot, title="sibling")
    when = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
    data.said(sibling, "user", "The boat on the lake is hidden, codeword zanzibar.", when)
    data.compact(sibling, 1, 1)
    new = message_add(fake_session, role="user", content="When did we take the boat out?")
    reply = message_add(
        fake_session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=fake_session.pk, tokens=new.token_count)
    fake_openai.script(
        Reply(text="", tool_calls=[_call("search_records", {"query": "boat lake zanzibar"})]),
        Reply(text="On 2024-03-08."),
    )

    turn.turn_run(message_id=reply.pk)

    result = fake_openai.requests[1]["messages"][-1]
    assert result["role"] == "tool"
    assert result["content"] == (
        f"[record snapshot_1_8]\n{data.line(1)}\n\n[record snapshot_17_22]\n{data.line(21)}"
    )
    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "On 2024-03-08.")


# --- 4. indexing ----------------------------------------------------------------------------------


def test_messages_index_takes_only_compacted_chat_turns_with_terms(chat_session):
    when = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
    said = data.said
    said(chat_session, "user", "Ravi's boat isn't ready.", when)  # 1 indexed
    said(chat_session, "assistant", "Rowing it is, then.", when)  # 2 indexed
    said(chat_session, "user", "/compact boat", when, kind="command")  # 3 command
    said(chat_session, "system", "Compacted the boat talk.", when, kind="notice")  # 4 notice
    said(chat_session, "assistant", "", when, tool_calls=[{"id": "c1"}], kind="tool")  # 5
    said(chat_session, "tool", "boat result", when, kind="tool", tool_call_id="c1")  # 6 tool
    said(chat_session, "assistant", "", when)  # 7 empty
    said(chat_session, "user", "Is it?", when)  # 8 stop words only
    said(chat_session, "user", "Boat engine quotes.", when)  # 9 not compacted
    said(chat_session, "user", "Boat outside the range.", when)  # 10 outside the range
    summary = Summary.objects.create(
        session=chat_session,
        level=1,
        text="s",
        token_count=1,
        first_seq=1,
        last_seq=10,
        source_tokens=10,
        model="builtin/extractive",
        trigger="manual",
        retention=1.0,
    )
    cover(Message.objects.filter(session=chat_session).exclude(seq=9), summary.pk)
    snapshot = services.snapshot_write(
        session=chat_session, first_seq=1, last_seq=9, body="[1] boat"
    )

    # what the summary covers, as compaction passes it (its coverage rows)
    covered = SummaryCoverage.objects.filter(summary=summary).values("message_id")
    count = services.messages_index(
        session_id=chat_session.pk, first_seq=1, last_seq=9, record_id=snapshot.pk, covered=covered
    )

    assert count == 2
    rows = list(
        MessageIndex.objects.filter(session=chat_session)
        .order_by("seq")
        .values_list("seq", "record_id", "terms", "length")
    )
    assert rows == [(1, snapshot.pk, "ravi boat readi", 3), (2, snapshot.pk, "row", 1)]
    # idempotent: a second call (or the compaction marking its snapshot) indexes nothing
    assert (
        services.messages_index(
            session_id=chat_session.pk,
            first_seq=1,
            last_seq=9,
            record_id=snapshot.pk,
            covered=covered,
        )
        == 0
    )
    services.snapshot_mark_indexed(snapshot=snapshot, covered=covered)
    assert MessageIndex.objects.filter(session=chat_session).count() == 2


def test_a_fusion_over_indexed_messages_indexes_nothing_new(talked):
    before = dict(MessageIndex.objects.filter(session=talked).values_list("seq", "record__name"))
    assert before == {
        seq: name
        for name, (first, last) in zip(data.SNAPSHOTS, [(1, 8), (9, 16), (17, 22)], strict=True)
        for seq in range(first, last + 1)
    }
    fusion = data.fuse(talked, 1, 16)

    assert (
        services.messages_index(session_id=talked.pk, first_seq=1, last_seq=16, record_id=fusion.pk)
        == 0
    )
    after = dict(MessageIndex.objects.filter(session=talked).values_list("seq", "record__name"))
    assert after == before


def test_a_real_compaction_indexes_its_messages(chat_session):
    when = datetime(2024, 3, 8, 18, 0, tzinfo=UTC)
    data.said(chat_session, "user", "My sister Clara moved to Porto.", when)
    filler = "It was a quiet afternoon and we talked about this and that for a while. " * 3
    for i in range(5):
        data.said(chat_session, "assistant" if i % 2 else "user", f"{filler}Chat {i}.", when)
    message_add(chat_session, role="user", content="latest")
    from bots.transitions import session_context_recount

    session_context_recount(session_id=chat_session.pk)
    result = compaction_manual(session=chat_session, focus="")
    assert result.outcome == "compacted"
    name = f"snapshot_1_{result.last_seq}"

    indexed = list(
        MessageIndex.objects.filter(session=chat_session)
        .order_by("seq")
        .values_list("seq", "record__name")
    )
    assert indexed == [(seq, name) for seq in range(1, result.last_seq + 1)]
    (hit,) = queries.records_search(session=chat_session, query="Where did Clara move?")
    assert (hit.name, hit.seqs) == (name, (1,))
    assert hit.excerpt == "[1] 2024-03-08 18:00Z user: My sister Clara moved to Porto."


def test_the_migration_backfill_uses_the_narrowest_succeeded_snapshot(chat_session, monkeypatch):
    migration = importlib.import_module("memory.migrations.0004_message_index")
    # the GIN index exists already (the test database is migrated); PostgreSQL refuses to
    # CREATE INDEX inside the test's transaction after the writes below
    monkeypatch.setattr(migration, "message_search_install", lambda connection: None)
    data.conversation(chat_session)
    data.fuse(chat_session, 1, 16)
    # a failed attempt's snapshot (never indexed) narrower than all: never chosen
    failed = services.snapshot_write(session=chat_session, first_seq=9, last_seq=10, body="x")
    assert failed.indexed is False
    MessageIndex.objects.all().delete()

    class Editor:
        pass

    editor = Editor()
    editor.connection = connection
    migration.install(django_apps, editor)

    after = dict(
        MessageIndex.objects.filter(session=chat_session).values_list("seq", "record__name")
    )
    assert after == {
        seq: name
        for name, (first, last) in zip(data.SNAPSHOTS, [(1, 8), (9, 16), (17, 22)], strict=True)
        for seq in range(first, last + 1)
    }
    # the fusion holds no message: searched as a record, after the messages
    assert _hits(chat_session, "pets") == [
        ("snapshot_9_16", (13,)),
        ("snapshot_1_8", (7,)),
        ("snapshot_1_16", ()),
    ]


# --- 5. the terms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Ravi's boat isn't ready; we don't know.", ["ravi", "boat", "readi", "know"]),
        ("I\u2019m Clara\u2019s sister", ["clara", "sister"]),
        ("The 1,150 runners ran 42km in 2024", ["1", "150", "runner", "ran", "42km", "2024"]),
        ("Rowing rowed rows", ["row", "row", "row"]),
        ("Where do I live?", ["live"]),
        ("What is it that you were going to do with them?", ["go"]),
        ("Generously organizational", ["generous", "organiz"]),
        ('NEAR(x y) OR "a"', ["near", "x", "y"]),
        ("snake_case under_score", ["snake", "case", "score"]),  # "under": a stop word
        ("x" * 41 + " ok", ["ok"]),
        ("", []),
    ],
)
def test_terms(text, expected):
    assert terms(text) == expected


def test_query_terms_are_distinct_first_seen_first_and_capped():
    assert query_terms("boats Boat BOATING lake lakes", 16) == ["boat", "lake"]
    assert query_terms(" ".join(f"w{i}" for i in range(30)), 16) == [f"w{i}" for i in range(16)]


def test_filling_reads_the_ranking_in_doubling_chunks_with_the_same_hits(talked, monkeypatch):
    """A result that is not full goes on through the whole ranking for something that fits;
    each read of transcript lines takes twice as many candidates as the one before, so a long
    ranking costs a few queries, not one per chunk (docs/memory.md, "Hits")."""
    from memory import search_hits

    question = "Meera boat trout lake job pet sister Patagonia engine"
    ranked = _ranked(talked, question)
    reads = []
    real = search_hits._message_lines

    def counted(session, scored, **kwargs):
        reads.append(len(scored))
        return real(session, scored, **kwargs)

    monkeypatch.setattr(search_hits, "_message_lines", counted)
    expected = _hits(talked, question)
    monkeypatch.setattr(search_hits, "_FILL_CHUNK", 1)
    reads.clear()

    assert _hits(talked, question) == expected
    assert (len(ranked), reads) == (14, [1, 2, 4, 7])  # four reads of 14, not fourteen


def test_an_undone_summarys_messages_are_still_found_in_its_snapshot(talked, owner_client):
    """Undo keeps the summary's snapshot in the index (docs/compaction.md, "Take a compaction
    back"), so its messages, back in the context, are still found in it — by the records API,
    which searches no live history, too. Measured before: ``?q=harmonica`` answered nothing once
    the summary of 9–16 was undone, while the index still listed snapshot_9_16."""
    question = "Who plays the harmonica?"
    assert _hits(talked, question) == [("snapshot_9_16", (15, 16))]
    summary = Summary.objects.get(session=talked, first_seq=9, last_seq=16)

    answer = owner_client.post(f"/api/v1/summaries/{summary.pk}/revert/", {}, format="json")

    assert answer.status_code == 200, answer.json()
    assert messages_covered(talked).get(seq=15).compacted_by_id is None
    assert _hits(talked, question) == [("snapshot_9_16", (15, 16))]
    found = owner_client.get(f"/api/v1/sessions/{talked.pk}/records/", {"q": question}).json()
    assert [(hit["name"], hit["seqs"]) for hit in found] == [("snapshot_9_16", [15, 16])]
