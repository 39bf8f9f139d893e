"""The vector side of a search kept per process between searches (memory/vector_cache.py,
docs/memory.md "Hybrid search"): a second search of a session reads no vectors, and any change
to the rows it read (a vector rewritten, a message gone, one added, one taken into a snapshot)
is read again, so what it ranks is always what a read would rank. PostgreSQL (xmin)."""

import numpy as np
import pytest

from memory import embeddings, vector_cache
from memory.models import MessageIndex
from tests.factories import BotFactory
from tests.fakeopenai import fake_embedding
from tests.memory import hybrid_search_data as data

pytestmark = pytest.mark.django_db


@pytest.fixture
def hybrid(owner, other_user, fake_openai, monkeypatch):
    from tests.conftest import FAKE_KEY, FAKE_KEY_ENV

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    bot = BotFactory(
        owner=owner,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        embedding_model=data.EMBEDDING_MODEL,
    )
    session, _ = data.build(owner, bot, other_user)
    embeddings.messages_embed_pending(session_id=session.pk)
    return session


@pytest.fixture
def reads(monkeypatch):
    """The vector reads made (each a list of parameters)."""
    made = []
    real = embeddings._vector_chunks
    monkeypatch.setattr(embeddings, "_vector_chunks", lambda p: made.append(p) or real(p))
    return made


def _unit(text):
    vector = np.asarray(fake_embedding(text), dtype="<f4")
    return vector / np.linalg.norm(vector)


def _ranked(session, text, **kwargs):
    ranked = embeddings.vector_ranked(
        session_id=session.pk, model=data.EMBEDDING_MODEL, query=_unit(text), **kwargs
    )
    return [(m.seq, m.record_id, round(m.score, 5)) for m in ranked]


def _cold(session, text, **kwargs):
    vector_cache.cache.clear()
    return _ranked(session, text, **kwargs)


def test_a_second_search_of_a_session_reads_no_vectors_and_ranks_the_same(hybrid, reads):
    first = _ranked(hybrid, "hurt wrist canoe")
    second = _ranked(hybrid, "hurt wrist canoe")
    other = _ranked(hybrid, "instrument")

    assert len(reads) == 1
    assert first == second
    assert [seq for seq, _, _ in first] == [1, 3]
    assert other == _cold(hybrid, "instrument")
    assert [seq for seq, _, _ in other] == [5]


def test_a_vector_rewritten_in_place_is_read_again(hybrid, reads, monkeypatch):
    monkeypatch.setattr(embeddings, "VECTOR_MIN_SHARE", 0.9)
    assert [seq for seq, _, _ in _ranked(hybrid, "instrument")] == [5]
    # message 2 ("Ouch. Keep it raised tonight.") re-embedded as the cello, same model, same size
    row = MessageIndex.objects.get(session=hybrid, seq=2)
    row.embedding = embeddings.vector_bytes(fake_embedding("cello"))
    row.save(update_fields=["embedding"])

    after = _ranked(hybrid, "instrument")

    assert len(reads) == 2
    assert [seq for seq, _, _ in after] == [2]  # nearer the cello than 5 is, in its thread
    assert after == _cold(hybrid, "instrument")


def _seqs(ranked):
    return [seq for seq, _, _ in ranked]


def test_a_message_gone_is_read_again(hybrid, reads):
    assert _seqs(_ranked(hybrid, "hurt wrist canoe")) == [1, 3]
    MessageIndex.objects.filter(session=hybrid, seq=1).delete()

    after = _ranked(hybrid, "hurt wrist canoe")

    assert len(reads) == 2
    assert 1 not in _seqs(after)
    assert after == _cold(hybrid, "hurt wrist canoe")


def test_a_live_message_taken_into_a_snapshot_is_read_again(hybrid, reads):
    # message 3 (the kayak) live again, no snapshot: not searched without live_before
    snapshot = MessageIndex.objects.get(session=hybrid, seq=3).record
    MessageIndex.objects.filter(session=hybrid, seq=3).update(record=None)
    assert 3 not in _seqs(_ranked(hybrid, "boat"))
    MessageIndex.objects.filter(session=hybrid, seq=3).update(record=snapshot)

    after = _ranked(hybrid, "boat")

    assert len(reads) == 2
    assert (3, snapshot.pk) in [(seq, record) for seq, record, _ in after]
    assert after == _cold(hybrid, "boat")


def test_each_scope_is_kept_apart(hybrid, reads):
    MessageIndex.objects.filter(session=hybrid, seq=3).update(record=None)

    assert 3 not in _seqs(_ranked(hybrid, "boat"))
    assert 3 in _seqs(_ranked(hybrid, "boat", live_before=4))
    assert 3 in _seqs(_ranked(hybrid, "boat", live_before=4))
    assert 3 not in _seqs(_ranked(hybrid, "boat"))
    assert len(reads) == 2


def test_the_cache_keeps_the_most_recently_used_within_its_bytes():
    cache = vector_cache.vectors_kept(max_bytes=100)
    entry = {n: vector_cache.Entry((n, ""), [], size) for n, size in ((1, 40), (2, 40), (3, 40))}
    cache.put("a", entry[1])
    cache.put("b", entry[2])
    assert cache.get("a") is entry[1]  # "a" used last: "b" goes first
    cache.put("c", entry[3])

    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (entry[1], None, entry[3])
    assert cache.used == 80
    cache.put("d", vector_cache.Entry((4, ""), [], 101))  # larger than the whole: never kept
    assert (cache.get("d"), cache.used) == (None, 80)
    cache.put("a", entry[2])  # a new version replaces the old
    assert (cache.get("a"), cache.used) == (entry[2], 80)
