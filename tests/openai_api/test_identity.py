"""Conversation identity through its services: the chain, continuation and the fork (what is
carried over, what is left behind, the source untouched)."""

import pytest

from bots.models import ChatSession, Message
from compaction.models import Summary
from memory.models import MemoryRecord, MessageIndex
from openai_api.identity import ClientMessage, conversation_resolve
from openai_api.keys import key_create
from openai_api.models import ApiSession, ChainLink
from tests.coverage import cover, in_context_totals, messages_covered

pytestmark = pytest.mark.django_db


def _m(role, content):
    return ClientMessage(role=role, content=content)


HISTORY = [
    _m("user", "u1 the depot is in Leeds"),
    _m("assistant", "a2 noted Leeds"),
    _m("user", "u3 order 4411 ships Monday"),
    _m("assistant", "a4 noted Monday"),
]


def _rows(session):
    return list(
        messages_covered(session)
        .order_by("seq")
        .values_list("seq", "role", "content", "compacted_by_id")
    )


def test_history_is_stored_once_and_its_tip_is_found_by_one_hash(owner, bot):
    key, _ = key_create(user=owner, name="k")
    first = conversation_resolve(key=key, bot=bot, history=HISTORY, explicit_session_id=None)
    assert first.created and first.base_position == 4
    again = conversation_resolve(key=key, bot=bot, history=HISTORY, explicit_session_id=None)
    assert (again.session.pk, again.created, again.stored_history) == (first.session.pk, False, [])
    assert [(r[1], r[2]) for r in _rows(first.session)] == [(m.role, m.content) for m in HISTORY]
    # Outer whitespace aside, the same text is the same message.
    spaced = [*HISTORY[:3], _m("assistant", "  a4 noted Monday\n")]
    assert (
        conversation_resolve(key=key, bot=bot, history=spaced, explicit_session_id=None).session.pk
        == first.session.pk
    )
    # Another user's identical history is another conversation.
    other_key, _ = key_create(user=bot.owner.__class__.objects.create(username="x"), name="k")
    bot.is_shared = True
    bot.save()
    theirs = conversation_resolve(key=other_key, bot=bot, history=HISTORY, explicit_session_id=None)
    assert theirs.session.pk != first.session.pk and theirs.created


def test_a_fork_carries_the_prefix_its_summaries_and_snapshots_and_leaves_the_source(owner, bot):
    key, _ = key_create(user=owner, name="k")
    source = conversation_resolve(key=key, bot=bot, history=HISTORY, explicit_session_id=None)
    session = source.session
    inside = Summary.objects.create(
        session=session,
        text="Leeds depot.",
        token_count=5,
        first_seq=1,
        last_seq=2,
        source_tokens=20,
        model="builtin/extractive",
        trigger="soft",
        retention=1.0,
    )
    crossing = Summary.objects.create(
        session=session,
        text="Order 4411 Monday.",
        token_count=5,
        first_seq=3,
        last_seq=4,
        source_tokens=20,
        model="builtin/extractive",
        trigger="soft",
        retention=1.0,
    )
    cover(Message.objects.filter(session=session, seq__in=[1, 2]), inside.pk)
    cover(Message.objects.filter(session=session, seq__in=[3, 4]), crossing.pk)
    MemoryRecord.objects.create(
        session=session,
        name="snapshot_1_2",
        kind="snapshot",
        description="Pre-compaction snapshot of messages 1–2",
        body="u1 the depot is in Leeds\na2 noted Leeds",
        first_seq=1,
        last_seq=2,
    )
    MemoryRecord.objects.create(
        session=session,
        name="snapshot_3_4",
        kind="snapshot",
        description="Pre-compaction snapshot of messages 3–4",
        body="u3 a4",
        first_seq=3,
        last_seq=4,
    )
    before = _rows(session)

    edited = [*HISTORY[:3], _m("assistant", "a4 actually Tuesday")]
    fork = conversation_resolve(key=key, bot=bot, history=edited, explicit_session_id=None)

    assert fork.created and fork.forked_from == session.pk and fork.base_position == 4
    (copied,) = Summary.objects.filter(session=fork.session)
    assert (copied.first_seq, copied.last_seq, copied.text) == (1, 2, "Leeds depot.")
    assert _rows(fork.session) == [
        (1, "user", "u1 the depot is in Leeds", copied.pk),
        (2, "assistant", "a2 noted Leeds", copied.pk),
        (3, "user", "u3 order 4411 ships Monday", None),  # its summary reached past the cut
        (4, "assistant", "a4 actually Tuesday", None),
    ]
    assert list(
        MemoryRecord.objects.filter(session=fork.session).values_list("name", flat=True)
    ) == ["snapshot_1_2"]
    # The copied snapshot holds its messages in the search index of the fork (recall there);
    # the other copies are found in the source by a search of all chats, never twice.
    snapshot = MemoryRecord.objects.get(session=fork.session, name="snapshot_1_2")
    assert list(
        MessageIndex.objects.filter(message__session=fork.session)
        .order_by("seq")
        .values_list("seq", "record_id")
    ) == [(1, snapshot.pk), (2, snapshot.pk)]
    forked = ChatSession.objects.get(pk=fork.session.pk)
    third, fourth = Message.objects.filter(session=forked, seq__in=[3, 4]).order_by("seq")
    assert forked.last_seq == 4
    # its running totals count every message; its bot's seat, what the copied summary covers
    assert in_context_totals(forked) == (third.token_count + fourth.token_count, 2)
    assert (forked.context_tokens, forked.context_messages) == (
        sum(Message.objects.filter(session=forked).values_list("token_count", flat=True)),
        4,
    )
    assert list(ChainLink.objects.filter(session=forked).values_list("position", flat=True)) == [
        1,
        2,
        3,
        4,
    ]
    assert ApiSession.objects.get(session=forked).forked_at_seq == 3
    # The source is exactly as it was.
    assert _rows(session) == before
    assert Summary.objects.filter(session=session).count() == 2
    # Resending the fork's history continues the fork, the source's continues the source.
    assert (
        conversation_resolve(key=key, bot=bot, history=edited, explicit_session_id=None).session.pk
        == forked.pk
    )
    assert (
        conversation_resolve(key=key, bot=bot, history=HISTORY, explicit_session_id=None).session.pk
        == session.pk
    )


def test_a_call_from_a_history_the_session_moved_on_from_forks_there(owner, bot):
    """Two calls sent at once from one history, each its own continuation: the second finds the
    first's question asked after the shared tip (its reply still running, no link yet) and
    forks at the tip, instead of joining the first's session with its question in the way. A
    call asking that same question again (an SDK's retry) stays in the session."""
    from tests.factories import message_add

    key, _ = key_create(user=owner, name="k")
    first = conversation_resolve(
        key=key, bot=bot, history=HISTORY, explicit_session_id=None, content="ALPHA?"
    )
    session = first.session
    # As a call stores its question: marked as the API's (a question typed on the chat page is
    # no call's, and never makes a resend fork: test_completions).
    alpha = message_add(session, role="user", content="ALPHA?", client_id="openai-first")
    message_add(session, role="assistant", content="", status="streaming", reply_to=alpha)

    retry = conversation_resolve(
        key=key, bot=bot, history=HISTORY, explicit_session_id=None, content="ALPHA?"
    )
    assert (retry.session.pk, retry.created) == (session.pk, False)

    beta = conversation_resolve(
        key=key, bot=bot, history=HISTORY, explicit_session_id=None, content="BETA?"
    )
    assert beta.session.pk != session.pk and beta.created
    assert (beta.forked_from, beta.base_position) == (session.pk, 4)
    assert [(r[1], r[2]) for r in _rows(beta.session)] == [(m.role, m.content) for m in HISTORY]
