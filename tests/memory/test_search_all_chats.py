"""Search all my chats (issue 18, Deliver 2): the memory search function over every session of
the signed-in user, messages indexed when they are written, never another user's."""

import pytest

from bots.models import Message
from bots.transitions import session_context_recount
from compaction.services import session_compact
from memory.models import MessageIndex
from memory.queries import messages_search_for_user, records_search
from memory.search import message_excerpt
from memory.services import messages_index_written
from tests.coverage import messages_covered
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply


def _index(*messages: Message) -> int:
    return messages_index_written(message_ids=[m.pk for m in messages])


def test_excerpt_marks_every_matching_word_by_its_stem():
    text = "We rowed on the lake.\nThen the **rowing** club met Ravi's sister at noon."
    assert message_excerpt(text, ["row", "ravi"]) == (
        "We **rowed** on the lake. Then the **rowing** club met **Ravi's** sister at noon."
    )


def test_excerpt_windows_a_long_message_around_the_first_hit():
    text = (
        " ".join(f"w{i}" for i in range(100)) + " locker " + " ".join(f"z{i}" for i in range(100))
    )
    excerpt = message_excerpt(text, ["locker"])
    assert excerpt.startswith("\u2026 ") and excerpt.endswith(" \u2026")
    assert "**locker**" in excerpt
    assert len(excerpt) <= 320 + 4
    assert excerpt.index("**locker**") < 100


@pytest.mark.django_db
def test_search_spans_the_users_sessions_and_never_another_users(owner, other_user):
    first = SessionFactory(user=owner, title="Trip")
    second = SessionFactory(user=owner, bot=first.bot, title="Gym")
    theirs = SessionFactory(user=other_user, title="Theirs")
    a = message_add(first, role="user", content="The locker code is 4711.")
    b = message_add(second, role="assistant", content="Your gym locker is number 12.")
    c = message_add(theirs, role="user", content="My locker code is 9999.")
    message_add(first, role="user", content="Nothing about it here.")
    assert _index(a, b, c) == 3

    hits = messages_search_for_user(user_id=owner.pk, query="locker")
    assert sorted((h.session.pk, h.seq, h.role) for h in hits) == [
        (first.pk, 1, "user"),
        (second.pk, 1, "assistant"),
    ]
    assert {h.excerpt for h in hits} == {
        "The **locker** code is 4711.",
        "Your gym **locker** is number 12.",
    }
    theirs_hits = messages_search_for_user(user_id=other_user.pk, query="locker code")
    assert [(h.session.pk, h.excerpt) for h in theirs_hits] == [
        (theirs.pk, "My **locker** **code** is 9999.")
    ]


@pytest.mark.django_db
def test_rarer_words_rank_first(owner):
    session = SessionFactory(user=owner)
    common = [message_add(session, role="user", content=f"Meeting note {i}.") for i in range(4)]
    rare = message_add(session, role="user", content="Meeting at the dentist.")
    _index(*common, rare)
    hits = messages_search_for_user(user_id=owner.pk, query="dentist meeting")
    assert hits[0].message_id == rare.pk
    assert [h.message_id for h in hits[1:]] == [m.pk for m in reversed(common)]


@pytest.mark.django_db
def test_only_finished_chat_words_are_indexed(owner):
    session = SessionFactory(user=owner)
    done = message_add(session, role="user", content="pelican")
    pending = message_add(session, role="assistant", content="pelican", status="pending")
    notice = message_add(session, role="system", kind="notice", content="pelican")
    stop_words = message_add(session, role="user", content="the and of")
    assert _index(done, pending, notice, stop_words) == 1
    assert _index(done) == 0  # already indexed: never twice
    assert list(MessageIndex.objects.values_list("message_id", "record_id")) == [(done.pk, None)]


@pytest.mark.django_db
@pytest.mark.parametrize("query", ["", "   ", "the of", "\x00", 'locker" OR *', None, 5])
def test_hostile_or_empty_queries_give_nothing_or_plain_hits(owner, query):
    session = SessionFactory(user=owner)
    _index(message_add(session, role="user", content="The locker code."))
    hits = messages_search_for_user(user_id=owner.pk, query=query)
    if query == 'locker" OR *':
        assert [h.excerpt for h in hits] == ["The **locker** code."]
    else:
        assert hits == []


# --- through the turn and the REST API ---------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_a_turn_makes_both_messages_searchable_at_once_over_rest(
    owner_client, other_client, fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="The heron nests by the weir."))
    sent = owner_client.post(
        f"/api/v1/sessions/{fake_session.pk}/messages/",
        {"content": "Where does the heron nest?", "wait": True},
        format="json",
    )
    assert sent.status_code == 201
    body = owner_client.get("/api/v1/search/", {"q": "heron"}).json()
    user_id, reply_id = sent.json()["user_message"]["id"], sent.json()["assistant_message"]["id"]
    results = body["results"]
    assert [(r["message"]["id"], r["message"]["seq"], r["message"]["role"]) for r in results] == [
        (reply_id, 2, "assistant"),
        (user_id, 1, "user"),
    ] or [(r["message"]["id"], r["message"]["seq"], r["message"]["role"]) for r in results] == [
        (user_id, 1, "user"),
        (reply_id, 2, "assistant"),
    ]
    first = results[0]
    assert first["session"] == {
        "id": fake_session.pk,
        "title": fake_session.title,
        "bot": {"id": fake_session.bot_id, "name": fake_session.bot.name},
    }
    assert set(first) == {"session", "message", "excerpt", "rank"}
    assert {r["excerpt"] for r in results} == {
        "Where does the **heron** nest?",
        "The **heron** nests by the weir.",
    }
    assert first["message"]["created_at"].endswith("Z")
    # another user finds nothing of it
    assert other_client.get("/api/v1/search/", {"q": "heron"}).json() == {"results": []}


@pytest.mark.django_db
def test_search_api_errors(owner_client, client):
    response = owner_client.get("/api/v1/search/")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "validation_error"
    assert response.json()["error"]["details"] == {"q": ["Give the words to search for."]}
    assert client.get("/api/v1/search/", {"q": "x"}).status_code == 401


@pytest.mark.django_db
def test_compaction_takes_written_rows_into_its_snapshot_and_recall_sees_only_compacted(owner):
    bot = BotFactory(owner=owner)
    session = SessionFactory(user=owner, bot=bot)
    words = "The ferry to Brindisi leaves at 7 from pier nine with Aurelio and Matteo."
    messages = [
        message_add(session, role=role, content=f"{words} Line {i}.")
        for i, role in enumerate(["user", "assistant"] * 6)
    ]
    _index(*messages)
    session_context_recount(session_id=session.pk)
    # not compacted yet: searchable across chats, but not recall material
    assert len(messages_search_for_user(user_id=owner.pk, query="Brindisi")) == 12
    assert records_search(session=session, query="Brindisi") == []
    result = session_compact(user=owner, session_id=session.pk)
    assert result.outcome == "compacted", result
    compacted = set(
        messages_covered(session).filter(compacted_by_id__isnull=False).values_list("pk", flat=True)
    )
    assert compacted
    rows = dict(MessageIndex.objects.filter(session=session).values_list("message_id", "record_id"))
    assert len(rows) == 12  # no row written twice
    assert {pk for pk, record in rows.items() if record is not None} == compacted
    hits = records_search(session=session, query="Brindisi")
    assert {s for h in hits for s in h.seqs} <= {m.seq for m in messages if m.pk in compacted}
    assert hits
