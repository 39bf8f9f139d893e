"""Hybrid search (issue 16 item 5; docs/memory.md "Optionally hybrid with embeddings"): a bot that
names an ``embedding_model`` has its compacted messages embedded after each compaction
(``memory.embeddings.messages_embed_pending``, on the compaction queue), and ``records_search``
fuses the lexical ranking with the messages closest in meaning to the question (reciprocal rank
fusion), in the same hit shape and budget. The embedding model is the fake provider's
bag-of-concepts embedding (tests/fakeopenai.py ``fake_embedding``): "ankle" is near "hurt",
"kayak" near "boat", "cello" near "instrument", and nothing else is near anything.
"""

import json
import logging

import numpy as np
import pytest

from bots.models import Message
from bots.transitions import session_context_add, session_context_recount
from compaction.engine import compaction_manual
from memory import embeddings, fusion, queries
from memory.models import MessageIndex, RecallEvent
from tests.factories import BotFactory, message_add
from tests.fakeopenai import EmbeddingReply, Reply, fake_embedding
from tests.memory import hybrid_search_data as data
from tests.memory import message_search_data as talks
from turns import turn

pytestmark = pytest.mark.django_db


@pytest.fixture
def embedding_bot(owner, fake_openai, monkeypatch):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    return BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        embedding_model=data.EMBEDDING_MODEL,
        is_shared=True,
    )


@pytest.fixture
def hybrid(owner, embedding_bot, other_user):
    session, foreign = data.build(owner, embedding_bot, other_user)
    for chat in (session, *foreign):
        embeddings.messages_embed_pending(session_id=chat.pk)
    return session


def _lexical(session, query):
    bot = session.bot
    model, bot.embedding_model = bot.embedding_model, ""
    try:
        return data.hits(session, query)
    finally:
        bot.embedding_model = model


# --- writing the vectors -----------------------------------------------------------------------


def test_compacted_messages_are_embedded_in_batches_with_the_model_named(
    owner, embedding_bot, other_user, fake_openai, monkeypatch
):
    monkeypatch.setattr(embeddings, "EMBED_BATCH", 3)
    session, _ = data.build(owner, embedding_bot, other_user)
    fake_openai.embedding_requests.clear()

    assert embeddings.messages_embed_pending(session_id=session.pk) == 8

    # 8 compacted messages in batches of 3, oldest first; the uncompacted last turn is not sent
    sent = [r["input"] for r in fake_openai.embedding_requests]
    assert [len(batch) for batch in sent] == [3, 3, 2]
    assert sent[0] == [text for _, text in data.TALKS[0][1][:3]]
    assert {r["model"] for r in fake_openai.embedding_requests} == {"fake-embedding"}
    rows = MessageIndex.objects.filter(session=session).order_by("seq")
    assert [(r.seq, r.embedding_model) for r in rows] == [
        (seq, data.EMBEDDING_MODEL) for seq in range(1, 9)
    ]
    first = np.frombuffer(bytes(rows[0].embedding), dtype="<f4")
    expected = np.asarray(fake_embedding(data.TALKS[0][1][0][1]), dtype="<f4")
    assert first.tolist() == pytest.approx((expected / np.linalg.norm(expected)).tolist())
    # nothing is left: a second run sends nothing
    fake_openai.embedding_requests.clear()
    assert embeddings.messages_embed_pending(session_id=session.pk) == 0
    assert fake_openai.embedding_requests == []


def test_the_provider_key_and_base_of_the_bot_are_used(hybrid, fake_openai):
    from tests.conftest import FAKE_KEY

    fake_openai.embedding_requests.clear()
    data.hits(hybrid, "How did I get hurt?")

    (request,) = fake_openai.embedding_requests
    assert (request["model"], request["input"]) == ("fake-embedding", ["How did I get hurt?"])
    assert fake_openai.embedding_headers[0]["authorization"] == f"Bearer {FAKE_KEY}"


def test_a_bot_without_an_embedding_model_sends_nothing(owner, bot, other_user, fake_openai):
    bot.embedding_model = ""  # blank: words only (the default is the built-in model)
    bot.save(update_fields=["embedding_model"])
    session, _ = data.build(owner, bot, other_user)

    assert embeddings.messages_embed_pending(session_id=session.pk) == 0
    assert data.hits(session, "How did I get hurt?") == []
    assert fake_openai.embedding_requests == []


def test_a_changed_model_embeds_again_and_only_its_vectors_are_searched(hybrid, fake_openai):
    bot = hybrid.bot
    bot.embedding_model = "openai/fake-embedding-2"
    bot.models_approved += "\nopenai/fake-embedding-2"
    bot.save()
    hybrid.refresh_from_db()
    # before re-embedding, no vector is of the new model: lexical hits only
    assert data.hits(hybrid, "How did I get hurt?") == []

    assert embeddings.messages_embed_pending(session_id=hybrid.pk) == 8

    assert set(
        MessageIndex.objects.filter(session=hybrid).values_list("embedding_model", flat=True)
    ) == {"openai/fake-embedding-2"}
    assert data.hits(hybrid, "How did I get hurt?")[0] == ["snapshot_1_4", [1]]


def test_a_compaction_embeds_its_messages_after_commit(
    fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    bot = fake_session.bot
    bot.embedding_model = data.EMBEDDING_MODEL
    bot.save()
    for role, text in data.TALKS[0][1] * 6:
        message_add(fake_session, role=role, content=text)
    message_add(fake_session, role="user", content="And now?")
    message_add(fake_session, role="assistant", content="Now we talk.")
    session_context_recount(session_id=fake_session.pk)
    fake_openai.script(Reply(text="The user hurt an ankle and went kayaking."))

    with django_capture_on_commit_callbacks(execute=True):
        result = compaction_manual(session=fake_session)

    assert result.outcome == "compacted"
    rows = MessageIndex.objects.filter(session=fake_session).exclude(record=None)
    assert rows.count() == 24
    assert set(rows.values_list("embedding_model", flat=True)) == {data.EMBEDDING_MODEL}
    assert len(fake_openai.embedding_requests) == 1  # one batch of 24


def test_a_branch_embeds_the_messages_it_copies(
    hybrid, eager_tasks, django_capture_on_commit_callbacks
):
    from turns.services.branch import do_branch_create

    with django_capture_on_commit_callbacks(execute=True):
        branch = do_branch_create(session=hybrid, at_seq=9)

    rows = MessageIndex.objects.filter(session=branch).exclude(record=None)
    assert sorted(rows.values_list("seq", "embedding_model")) == [
        (seq, data.EMBEDDING_MODEL) for seq in range(1, 9)
    ]
    assert data.hits(branch, "How did I get hurt?") == [["snapshot_1_4", [1]]]


# --- ranking ------------------------------------------------------------------------------------


def test_a_question_sharing_no_word_with_its_evidence_finds_it_only_with_embeddings(hybrid):
    question = "How did I get hurt?"

    assert _lexical(hybrid, question) == []
    hybrid_hits = queries.records_search(session=hybrid, query=question)

    assert [(h.name, h.seqs) for h in hybrid_hits] == [("snapshot_1_4", (1,))]
    assert hybrid_hits[0].excerpt == talks_line(1)


def test_vector_hits_fuse_with_lexical_ones(hybrid):
    question = "When did we go out on the boat?"

    # "boat" is said in message 7 only; the kayak trip (3) shares no word with the question
    assert _lexical(hybrid, question) == [["snapshot_5_8", [7]]]
    # 7 is in both rankings (first); 3 only in the vector one; and 5 (the cello, said between
    # the two boat messages on the user's side) by their share of its vector in its thread
    assert data.hits(hybrid, question) == [["snapshot_5_8", [5, 7]], ["snapshot_1_4", [3]]]


def _unit(text):
    vector = np.asarray(fake_embedding(text), dtype="<f4")
    return vector / np.linalg.norm(vector)


def _in_thread_oracle(session_id, query):
    """What ``vector_ranked`` must compute, written the plain way: each compacted message's
    vector plus ``NEIGHBOUR_WEIGHT`` of the nearest compacted message of the same side (role
    and bot) before it and after it in seq order, unit length, against the query; seq ->
    cosine."""
    rows = list(
        MessageIndex.objects.filter(session_id=session_id, record__isnull=False)
        .order_by("seq")
        .values_list("seq", "embedding", "message_id")
    )
    sides = dict(Message.objects.filter(session_id=session_id).values_list("id", "role"))
    side = [sides[message_id] for _, _, message_id in rows]
    vectors = [embeddings.vector_array(v).astype(np.float64) for _, v, _ in rows]
    out = {}
    for i, (seq, _, _) in enumerate(rows):
        total = vectors[i].copy()
        for step in (-1, 1):
            j = i + step
            while 0 <= j < len(rows) and side[j] != side[i]:
                j += step
            if 0 <= j < len(rows):
                total += embeddings.NEIGHBOUR_WEIGHT * vectors[j]
        out[seq] = float(total @ query / np.linalg.norm(total))
    return out


@pytest.mark.parametrize("chunk", [1, 2, 3, 4096])
def test_a_message_is_ranked_in_its_thread_whatever_the_chunk_size(hybrid, monkeypatch, chunk):
    # Every message's cosine, no floor: the cello (5, the user's) by what it says, the user's
    # messages before and after it (3 and 7) by a share of it; the replies between them (4, 6)
    # are the other side's and get none, nor does anything else (nothing else is near music)
    monkeypatch.setattr(embeddings, "VECTOR_MIN_SHARE", 0.0)
    monkeypatch.setattr(embeddings, "VECTOR_CHUNK", chunk)
    query = _unit("instrument")

    ranked = embeddings.vector_ranked(session_id=hybrid.pk, model=data.EMBEDDING_MODEL, query=query)

    oracle = _in_thread_oracle(hybrid.pk, query)
    assert [m.seq for m in ranked] == [5, 7, 3]
    assert {m.seq: m.score for m in ranked} == pytest.approx(
        {seq: oracle[seq] for seq in (5, 7, 3)}, abs=1e-5
    )
    assert all(abs(oracle[seq]) < 1e-6 for seq in (1, 2, 4, 6, 8))


def test_only_the_lexical_head_votes_in_the_fusion_and_its_tail_follows():
    from memory.search import MessageScore

    lexical = [(10.0 - i, MessageScore(100 + i, 100 + i, 1, 10.0 - i)) for i in range(12)]
    vector = [MessageScore(200, 3, 1, 0.9), MessageScore(111, 111, 1, 0.8)]
    head = fusion.LEXICAL_CANDIDATES
    assert head == 10

    order = [item.message_id for _, item in fusion.fused(lexical, vector)]

    # 100..109 vote (rank 1..10); 200 and 111 from the vectors (111 is lexical rank 12, in the
    # tail: its only vote is the vector one); then the tail less 111: 110
    assert order == [100, 200, 101, 111, 102, 103, 104, 105, 106, 107, 108, 109, 110]


def test_a_word_the_evidence_never_says_finds_it_by_meaning(hybrid):
    assert _lexical(hybrid, "Which instrument is she learning?") == []
    assert data.hits(hybrid, "Which instrument is she learning?") == [["snapshot_5_8", [5]]]


def test_hybrid_hits_keep_the_budget_and_the_hit_shape(hybrid):
    hits = queries.records_search(
        session=hybrid, query="When did we go out on the boat?", budget=45
    )

    # the best fused message alone fits 45 tokens: whole, dated, attributed
    assert [(h.name, h.seqs, h.excerpt) for h in hits] == [("snapshot_5_8", (7,), talks_line(7))]


# --- scopes -------------------------------------------------------------------------------------


def test_other_users_and_other_chats_vectors_never_hit(hybrid):
    # the wrist and the canoe (injury, boat) are in the sibling chat and the other user's chat,
    # embedded with the same model; this chat only ever gets its own messages
    names = {name for name, _ in data.hits(hybrid, "I sprained my wrist falling off the canoe")}
    assert names <= set(data.SNAPSHOTS)
    assert data.hits(hybrid, "How did I get hurt?") == [["snapshot_1_4", [1]]]


def test_vector_ranking_reads_only_the_session_in_scope(hybrid):
    question = np.asarray(fake_embedding("hurt wrist canoe"), dtype="<f4")
    question /= np.linalg.norm(question)

    ranked = embeddings.vector_ranked(
        session_id=hybrid.pk, model=data.EMBEDDING_MODEL, query=question
    )

    assert {m.session_id for m in ranked} == {hybrid.pk}
    # the ankle (injury), then the kayak trip (boat, and the ankle's share: the user's message
    # after it); the boat club (7) is near in one concept only, under half the ankle's cosine
    assert [m.seq for m in ranked] == [1, 3]


def test_vector_ranking_without_a_floor_still_reads_only_the_session_in_scope(hybrid, monkeypatch):
    monkeypatch.setattr(embeddings, "VECTOR_MIN_SHARE", 0.0)
    question = np.asarray(fake_embedding("hurt wrist canoe"), dtype="<f4")
    question /= np.linalg.norm(question)

    ranked = embeddings.vector_ranked(
        session_id=hybrid.pk, model=data.EMBEDDING_MODEL, query=question
    )

    # the sibling chat's and the other user's "sprained my wrist falling off the canoe" would
    # be first anywhere: every message here is of this session, the ankle first, then the
    # kayak trip and the boat club
    assert {m.session_id for m in ranked} == {hybrid.pk}
    assert [m.seq for m in ranked][:3] == [1, 3, 7]


# --- outages ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "reply",
    [
        EmbeddingReply(status=500),
        EmbeddingReply(status=503),
        EmbeddingReply(garbage="nan"),
        EmbeddingReply(garbage="short"),
        EmbeddingReply(garbage="text"),
        EmbeddingReply(status=200, hang=3.0),
    ],
    ids=["500", "503", "nan", "short", "text", "timeout"],
)
def test_an_embedding_outage_degrades_search_to_lexical_with_a_warning(
    hybrid, fake_openai, settings, caplog, reply
):
    settings.EMBEDDING_TIMEOUT_SECONDS = 0.5
    question = "When did we go out on the boat?"
    fake_openai.script_embeddings(reply)
    fake_openai.embedding_requests.clear()

    with caplog.at_level(logging.WARNING):
        hits = data.hits(hybrid, question)

    assert hits == [["snapshot_5_8", [7]]]  # exactly the lexical hits
    assert "memory_search_embedding_failed" in caplog.text
    assert len(fake_openai.embedding_requests) == 1  # one attempt: a search does not wait
    # the next search, with the model back, is hybrid again
    assert data.hits(hybrid, question) == [["snapshot_5_8", [5, 7]], ["snapshot_1_4", [3]]]


def test_failed_embeddings_stay_pending_and_are_retried_later(
    owner, embedding_bot, other_user, fake_openai, settings, caplog
):
    settings.LLM_MAX_RETRIES = 0
    session, _ = data.build(owner, embedding_bot, other_user)
    fake_openai.script_embeddings(EmbeddingReply(status=500))

    with caplog.at_level(logging.WARNING):
        assert embeddings.messages_embed_pending(session_id=session.pk) == 0

    assert "memory_embedding_failed" in caplog.text
    pending = MessageIndex.objects.filter(session=session, embedding__isnull=True)
    assert pending.count() == 8  # nothing lost, nothing half-written
    assert _lexical(session, "How did I get hurt?") == []

    assert embeddings.messages_embed_pending(session_id=session.pk) == 8
    assert pending.count() == 0
    assert data.hits(session, "How did I get hurt?") == [["snapshot_1_4", [1]]]


def test_an_embedding_outage_never_fails_a_compaction(
    fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks, settings, caplog
):
    settings.LLM_MAX_RETRIES = 0
    bot = fake_session.bot
    bot.embedding_model = data.EMBEDDING_MODEL
    bot.save()
    for role, text in data.TALKS[0][1] * 6:
        message_add(fake_session, role=role, content=text)
    message_add(fake_session, role="user", content="And now?")
    message_add(fake_session, role="assistant", content="Now we talk.")
    session_context_recount(session_id=fake_session.pk)
    fake_openai.script(Reply(text="The user hurt an ankle and went kayaking."))
    fake_openai.script_embeddings(EmbeddingReply(status=500))

    with caplog.at_level(logging.WARNING), django_capture_on_commit_callbacks(execute=True):
        result = compaction_manual(session=fake_session)

    assert result.outcome == "compacted"
    assert "memory_embedding_failed" in caplog.text
    rows = MessageIndex.objects.filter(session=fake_session).exclude(record=None)
    assert rows.count() == 24
    assert rows.filter(embedding__isnull=True).count() == 24  # pending, for the next compaction


@pytest.mark.django_db(transaction=True)
def test_an_embedding_outage_never_fails_a_turn(owner, embedding_bot, other_user, fake_openai):
    session, _ = data.build(owner, embedding_bot, other_user)
    embeddings.messages_embed_pending(session_id=session.pk)
    question = "When did we go out on the boat?"
    new = message_add(session, role="user", content=question)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search_records", "arguments": json.dumps({"query": question})},
    }
    fake_openai.script(Reply(text="", tool_calls=[call]), Reply(text="On a Friday."))
    fake_openai.script_embeddings(EmbeddingReply(status=500))

    turn.turn_run(message_id=reply.pk)

    reply.refresh_from_db()
    assert (reply.status, reply.content) == ("complete", "On a Friday.")
    result = fake_openai.requests[1]["messages"][-1]["content"]
    assert result == f"[record snapshot_5_8]\n{talks_line(7)}"
    event = RecallEvent.objects.get(session=session)
    assert (event.tool, event.found) == ("search", ["snapshot_5_8"])
    assert Message.objects.filter(session=session, status__in=["pending", "streaming"]).count() == 0


@pytest.mark.django_db(transaction=True)
def test_a_turn_with_embeddings_brings_the_meaning_match(
    owner, embedding_bot, other_user, fake_openai
):
    session, _ = data.build(owner, embedding_bot, other_user)
    embeddings.messages_embed_pending(session_id=session.pk)
    question = "How did I get hurt?"
    new = message_add(session, role="user", content=question)
    reply = message_add(
        session, role="assistant", content="", status="pending", token_count=0, reply_to=new
    )
    session_context_add(session_id=session.pk, tokens=new.token_count)
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "search_records", "arguments": json.dumps({"query": question})},
    }
    fake_openai.script(Reply(text="", tool_calls=[call]), Reply(text="Your ankle."))

    turn.turn_run(message_id=reply.pk)

    result = fake_openai.requests[1]["messages"][-1]["content"]
    assert result == f"[record snapshot_1_4]\n{talks_line(1)}"


# --- helpers -----------------------------------------------------------------------------------


def talks_line(seq: int) -> str:
    """The transcript line of message ``seq`` of ``data.TALKS`` as a hit shows it."""
    saved = talks.TALKS
    talks.TALKS = data.TALKS
    try:
        return talks.line(seq)
    finally:
        talks.TALKS = saved


def test_a_room_bot_that_sees_from_its_join_finds_nothing_earlier_by_meaning(hybrid):
    """In a room, a bot that joined at seq 4 seeing only from then never gets messages 1–4
    back, neither by their words nor by their meaning (docs/rooms.md)."""
    from bots.models import ChatSession, SessionParticipant

    assert data.hits(hybrid, "How did I get hurt?") == [["snapshot_1_4", [1]]]
    ChatSession.objects.filter(pk=hybrid.pk).update(is_room=True)
    SessionParticipant.objects.filter(session=hybrid).delete()
    SessionParticipant.objects.create(
        session=hybrid, bot=hybrid.bot, joined_seq=4, sees_from_join=True, is_default=True
    )
    hybrid.refresh_from_db()

    assert data.hits(hybrid, "How did I get hurt?") == []
    # 5 by its thread's share of the boat club (7), the user's next message; never the kayak (3)
    assert data.hits(hybrid, "When did we go out on the boat?") == [["snapshot_5_8", [5, 7]]]
    assert data.hits(hybrid, "Which instrument is she learning?") == [["snapshot_5_8", [5]]]


def test_two_hundred_messages_take_part_by_meaning(chat_session):
    """The vector side brings its best ``VECTOR_CANDIDATES`` (200) into the fusion: past the
    fused head the fill would otherwise go on with the lexical tail (messages sharing one word
    of the question), and the next messages by meaning are better evidence (docs/performance.md,
    "Recall: more turns in the same budget")."""
    from memory.services import messages_index_written

    said = [message_add(chat_session, role="user", content=f"note {n}") for n in range(250)]
    messages_index_written(message_ids=[m.pk for m in said])
    # message n points ever further from the query, all within VECTOR_MIN_SHARE of the best
    query = np.zeros(8, dtype="<f4")
    query[0] = 1.0
    for n, message in enumerate(said):
        angle = 0.9 * n / len(said)
        vector = [np.cos(angle), np.sin(angle), 0, 0, 0, 0, 0, 0]
        MessageIndex.objects.filter(message_id=message.pk).update(
            embedding=embeddings.vector_bytes(vector), embedding_model="m"
        )
    live_before = said[-1].seq + 1

    ranked = embeddings.vector_ranked(
        session_id=chat_session.pk, model="m", query=query, live_before=live_before
    )

    assert embeddings.VECTOR_CANDIDATES == 200
    assert [m.seq for m in ranked] == [m.seq for m in said[:200]]
