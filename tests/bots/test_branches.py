"""Edit a sent message and regenerate a reply, as branches (issue 18, Deliver 1): the old turn and
its reply stay as the other version; the context, totals, compaction and memory follow the
branch being continued."""

from datetime import timedelta

import pytest

from bots.models import ChatSession, Message
from bots.transitions import session_context_recount
from compaction.models import Summary
from memory.models import MemoryRecord, MessageIndex
from tests.coverage import cover, messages_covered
from tests.factories import SessionFactory, UserFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def _send(client, session_id, content):
    response = client.post(
        f"/api/v1/sessions/{session_id}/messages/", {"content": content, "wait": True}, "json"
    )
    assert response.status_code == 201, response.json()
    return response.json()


def _lines(session_id):
    return list(
        Message.objects.filter(session_id=session_id)
        .order_by("seq")
        .values_list("seq", "role", "content")
    )


def _asked(request):
    return [(m["role"], m["content"]) for m in request["messages"][1:]]


@pytest.fixture
def chat(owner_client, fake_session, fake_openai, eager_tasks):
    fake_openai.script(Reply(text="Answer one."), Reply(text="Answer two."))
    _send(owner_client, fake_session.pk, "Question one")
    _send(owner_client, fake_session.pk, "Question two")
    return fake_session


def _summary(session, first, last, text):
    summary = Summary.objects.create(
        session=session,
        text=text,
        token_count=10,
        first_seq=first,
        last_seq=last,
        source_tokens=40,
        model="builtin/extractive",
        trigger="manual",
        retention=1.0,
    )
    ids = list(
        Message.objects.filter(session=session, seq__gte=first, seq__lte=last).values_list(
            "pk", flat=True
        )
    )
    assert cover(Message.objects.filter(pk__in=ids), summary.pk) == len(ids)
    session_context_recount(session_id=session.pk)
    return summary


def test_editing_a_message_branches_and_the_model_sees_only_the_new_branch(
    chat, owner_client, fake_openai
):
    fake_openai.script(Reply(text="Answer to the edit."))
    question_two = Message.objects.get(session=chat, seq=3)

    response = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    )

    assert response.status_code == 201
    body = response.json()
    branch = ChatSession.objects.get(pk=body["session"]["id"])
    assert body["session"]["branch_of"] == chat.pk and body["session"]["branch_seq"] == 3
    assert (body["user_message"]["seq"], body["user_message"]["content"]) == (
        3,
        "Question two, edited",
    )
    assert body["assistant_message"]["seq"] == 4
    assert _lines(branch.pk) == [
        (1, "user", "Question one"),
        (2, "assistant", "Answer one."),
        (3, "user", "Question two, edited"),
        (4, "assistant", "Answer to the edit."),
    ]
    assert _asked(fake_openai.requests[-1]) == [
        ("user", "Question one"),
        ("assistant", "Answer one."),
        ("user", "Question two, edited"),
    ]
    # the original is untouched: it is the other version
    assert _lines(chat.pk) == [
        (1, "user", "Question one"),
        (2, "assistant", "Answer one."),
        (3, "user", "Question two"),
        (4, "assistant", "Answer two."),
    ]
    # copies keep their timestamps and answer their own chat's messages
    copies = {m.seq: m for m in Message.objects.filter(session=branch)}
    originals = {m.seq: m for m in Message.objects.filter(session=chat)}
    assert copies[1].created_at == originals[1].created_at
    assert copies[2].reply_to_id == copies[1].pk
    branch.refresh_from_db()
    assert (branch.context_tokens, branch.context_messages) == session_context_recount(
        session_id=branch.pk
    )
    assert branch.last_seq == 4

    points = owner_client.get(f"/api/v1/sessions/{branch.pk}/branches/").json()
    assert points == {"points": [{"seq": 3, "versions": [chat.pk, branch.pk], "current": 1}]}
    points = owner_client.get(f"/api/v1/sessions/{chat.pk}/branches/").json()
    assert points == {"points": [{"seq": 3, "versions": [chat.pk, branch.pk], "current": 0}]}


def test_regenerating_a_reply_keeps_the_old_one_as_the_other_version(
    chat, owner_client, fake_openai
):
    fake_openai.script(Reply(text="Answer two, again."))
    answer_two = Message.objects.get(session=chat, seq=4)

    response = owner_client.post(f"/api/v1/messages/{answer_two.pk}/regenerate/", {}, "json")

    assert response.status_code == 201
    body = response.json()
    branch_id = body["session"]["id"]
    assert (body["session"]["branch_of"], body["session"]["branch_seq"]) == (chat.pk, 4)
    assert _lines(branch_id) == [
        (1, "user", "Question one"),
        (2, "assistant", "Answer one."),
        (3, "user", "Question two"),
        (4, "assistant", "Answer two, again."),
    ]
    assert _asked(fake_openai.requests[-1]) == [
        ("user", "Question one"),
        ("assistant", "Answer one."),
        ("user", "Question two"),
    ]
    assert Message.objects.get(pk=answer_two.pk).content == "Answer two."
    points = owner_client.get(f"/api/v1/sessions/{branch_id}/branches/").json()
    assert points == {"points": [{"seq": 4, "versions": [chat.pk, branch_id], "current": 1}]}


def test_a_branch_keeps_the_chats_own_instruction_and_model(chat, owner_client, fake_openai):
    """The chat's instruction and chosen model are the chat's: a regenerated reply ran without
    the instruction, on the bot's default model (docs/attachments.md "Per-chat settings")."""
    ChatSession.objects.filter(pk=chat.pk).update(
        extra_instruction="Always answer in French.", model_override=chat.bot.model
    )
    fake_openai.script(Reply(text="Réponse deux."))
    answer_two = Message.objects.get(session=chat, seq=4)

    response = owner_client.post(f"/api/v1/messages/{answer_two.pk}/regenerate/", {}, "json")

    assert response.status_code == 201, response.json()
    branch = ChatSession.objects.get(pk=response.json()["session"]["id"])
    assert (branch.extra_instruction, branch.model_override) == (
        "Always answer in French.",
        chat.bot.model,
    )
    system = [m["content"] for m in fake_openai.requests[-1]["messages"] if m["role"] == "system"]
    assert "Always answer in French." in "\n".join(system)


def test_all_versions_of_one_message_are_siblings_and_earlier_points_show_on_a_branch(
    chat, owner_client, fake_openai
):
    fake_openai.script(Reply(text="A."), Reply(text="B."), Reply(text="C."))
    question_two = Message.objects.get(session=chat, seq=3)
    first = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Edit A"}, "json"
    ).json()["session"]["id"]
    # editing the same message again, from the branch: a sibling, not a branch of the branch
    again = Message.objects.get(session_id=first, seq=3)
    second = owner_client.post(
        f"/api/v1/messages/{again.pk}/edit/", {"content": "Edit B"}, "json"
    ).json()["session"]
    assert (second["branch_of"], second["branch_seq"]) == (chat.pk, 3)
    # a regenerated reply on the second branch: its own point at seq 4, the first still shows
    reply = Message.objects.get(session_id=second["id"], seq=4)
    third = owner_client.post(f"/api/v1/messages/{reply.pk}/regenerate/", {}, "json").json()
    third_id = third["session"]["id"]
    assert (third["session"]["branch_of"], third["session"]["branch_seq"]) == (second["id"], 4)

    points = owner_client.get(f"/api/v1/sessions/{third_id}/branches/").json()["points"]
    assert points == [
        {"seq": 3, "versions": [chat.pk, first, second["id"]], "current": 2},
        {"seq": 4, "versions": [second["id"], third_id], "current": 1},
    ]
    assert _lines(third_id)[2:] == [(3, "user", "Edit B"), (4, "assistant", "C.")]


def test_a_branch_carries_only_the_summaries_of_messages_it_has(chat, owner_client, fake_openai):
    early = _summary(chat, 1, 2, "They asked question one and got answer one.")
    _summary(chat, 3, 4, "SECRET OF THE ABANDONED BRANCH")
    MemoryRecord.objects.create(
        session=chat,
        name="snapshot_1_2",
        kind="snapshot",
        description="Snapshot of messages 1–2",
        body="[1] user: Question one\n[2] assistant: Answer one.",
        token_count=12,
        first_seq=1,
        last_seq=2,
        indexed=True,
    )
    MemoryRecord.objects.create(
        session=chat, name="snapshot_3_4", kind="snapshot", description="later", body="x",
        token_count=1, first_seq=3, last_seq=4, indexed=True,
    )  # fmt: skip
    question_two = Message.objects.get(session=chat, seq=3)
    # A note made before the edited message goes with the branch; one saved after it belongs to
    # the version left behind.
    MemoryRecord.objects.create(
        session=chat, name="locker-code", kind="info", description="The locker code",
        body="4711", token_count=2,
    )  # fmt: skip
    MemoryRecord.objects.filter(name="locker-code").update(
        created_at=question_two.created_at - timedelta(seconds=1)
    )
    MemoryRecord.objects.create(
        session=chat, name="launch-plan", kind="info", description="The launch plan",
        body="BLUEHERON-77", token_count=4,
    )  # fmt: skip
    fake_openai.script(Reply(text="Edited answer."))

    body = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    ).json()
    branch_id = body["session"]["id"]

    carried = Summary.objects.get(session_id=branch_id)
    assert (carried.first_seq, carried.last_seq, carried.text) == (1, 2, early.text)
    assert carried.pk != early.pk and carried.created_at == early.created_at
    assert list(
        messages_covered(ChatSession.objects.get(pk=branch_id))
        .order_by("seq")
        .values_list("seq", "compacted_by_id")
    ) == [(1, carried.pk), (2, carried.pk), (3, None), (4, None)]
    assert sorted(
        MemoryRecord.objects.filter(session_id=branch_id).values_list("name", flat=True)
    ) == ["locker-code", "snapshot_1_2"]
    # searchable as in the original: the compacted copies held by the snapshot's copy, the rest
    # (the edit and its reply) on their own
    snapshot_copy = MemoryRecord.objects.get(session_id=branch_id, name="snapshot_1_2")
    assert list(
        MessageIndex.objects.filter(session_id=branch_id)
        .order_by("seq")
        .values_list("seq", "record_id")
    ) == [(1, snapshot_copy.pk), (2, snapshot_copy.pk), (3, None), (4, None)]
    request = fake_openai.requests[-1]
    sent = "\n".join(str(m["content"]) for m in request["messages"])
    assert "They asked question one and got answer one." in sent
    assert "SECRET OF THE ABANDONED BRANCH" not in sent
    assert "Question two\n" not in sent and "Answer two." not in sent


def test_a_summary_reaching_past_the_branch_point_is_not_carried(chat, owner_client, fake_openai):
    _summary(chat, 1, 4, "Everything so far, including the abandoned answer two.")
    fake_openai.script(Reply(text="Edited answer."))
    question_two = Message.objects.get(session=chat, seq=3)

    body = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    ).json()

    assert not Summary.objects.filter(session_id=body["session"]["id"]).exists()
    assert _asked(fake_openai.requests[-1]) == [
        ("user", "Question one"),
        ("assistant", "Answer one."),
        ("user", "Question two, edited"),
    ]


def test_continuing_the_old_branch_after_an_edit_sees_the_old_line(chat, owner_client, fake_openai):
    fake_openai.script(Reply(text="Edited answer."), Reply(text="Back on the original."))
    question_two = Message.objects.get(session=chat, seq=3)
    owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    )

    _send(owner_client, chat.pk, "Question three")

    assert _asked(fake_openai.requests[-1]) == [
        ("user", "Question one"),
        ("assistant", "Answer one."),
        ("user", "Question two"),
        ("assistant", "Answer two."),
        ("user", "Question three"),
    ]


def test_compaction_on_a_branch_leaves_the_original_alone(chat, owner_client, fake_openai):
    fake_openai.script(Reply(text="Edited answer."))
    question_two = Message.objects.get(session=chat, seq=3)
    branch_id = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    ).json()["session"]["id"]
    fake_openai.script(Reply(text="The user asked two questions and got two answers."))

    response = owner_client.post(f"/api/v1/sessions/{branch_id}/compact/", {}, "json")

    assert response.status_code == 200, response.json()
    assert Summary.objects.filter(session_id=branch_id).count() == (
        1 if response.json()["outcome"] == "compacted" else 0
    )
    assert not Summary.objects.filter(session=chat).exists()
    assert messages_covered(chat).filter(compacted_by_id__isnull=False).count() == 0


@pytest.mark.parametrize(
    ("target", "payload", "status", "field"),
    [
        ("reply", {"content": "x"}, 400, "message"),  # a reply is not edited
        ("question", {"content": "bad\x00text"}, 400, "content"),
        ("question", {"content": "   "}, 400, "content"),
        ("question", {"content": 5}, 400, "content"),
        ("question", {}, 400, "content"),
        ("question", {"content": "/compact now"}, 400, "content"),
    ],
)
def test_a_bad_edit_is_refused_clearly_and_creates_nothing(
    chat, owner_client, target, payload, status, field
):
    message = Message.objects.get(session=chat, seq=4 if target == "reply" else 3)
    before = (ChatSession.objects.count(), Message.objects.count())

    response = owner_client.post(f"/api/v1/messages/{message.pk}/edit/", payload, "json")

    assert response.status_code == status
    assert response.json()["error"]["code"] == "validation_error"
    assert field in response.json()["error"]["details"]
    assert (ChatSession.objects.count(), Message.objects.count()) == before


def test_regenerating_a_question_is_refused(chat, owner_client):
    question = Message.objects.get(session=chat, seq=3)
    response = owner_client.post(f"/api/v1/messages/{question.pk}/regenerate/", {}, "json")
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"message": ["Only a reply can be regenerated."]}


def test_another_users_message_is_not_found_and_nothing_is_created(chat, other_client):
    before = ChatSession.objects.count()
    question = Message.objects.get(session=chat, seq=3)
    reply = Message.objects.get(session=chat, seq=4)
    edit = other_client.post(f"/api/v1/messages/{question.pk}/edit/", {"content": "x"}, "json")
    again = other_client.post(f"/api/v1/messages/{reply.pk}/regenerate/", {}, "json")
    points = other_client.get(f"/api/v1/sessions/{chat.pk}/branches/")
    assert [r.status_code for r in (edit, again, points)] == [404, 404, 404]
    assert edit.json()["error"]["code"] == "not_found"
    assert ChatSession.objects.count() == before


def test_no_edit_while_a_reply_is_being_written(chat, owner_client):
    question = Message.objects.get(session=chat, seq=3)
    Message.objects.filter(session=chat, seq=4).update(status="streaming")
    before = ChatSession.objects.count()

    response = owner_client.post(f"/api/v1/messages/{question.pk}/edit/", {"content": "x"}, "json")

    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "A reply in this chat is still being written. Stop it or wait for it to finish, then "
        "edit or regenerate."
    )
    assert ChatSession.objects.count() == before


def test_branch_points_do_not_list_another_users_chats(chat, owner_client):
    stranger = UserFactory(username="stranger")
    SessionFactory(user=stranger, bot=chat.bot, branch_of=chat, branch_seq=3)
    assert owner_client.get(f"/api/v1/sessions/{chat.pk}/branches/").json() == {"points": []}


def test_search_of_all_chats_lists_a_branch_copy_once(chat, owner_client, fake_openai):
    fake_openai.script(Reply(text="Edited answer."))
    question_two = Message.objects.get(session=chat, seq=3)
    branch_id = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    ).json()["session"]["id"]

    hits = owner_client.get("/api/v1/search/", {"q": "question"}).json()["results"]

    # the original's two questions, and the branch's own edited one; not the branch's copy of
    # question one
    assert sorted((h["session"]["id"], h["message"]["seq"]) for h in hits) == [
        (chat.pk, 1),
        (chat.pk, 3),
        (branch_id, 3),
    ]


def test_a_branchs_copies_are_found_in_it_once_the_original_is_deleted(
    chat, owner_client, fake_openai
):
    """Search all my chats leaves a branch's copies out while its original holds them; once the
    original is deleted the branch's messages are its own (docs/transfer.md). Its live copies were
    never indexed in the branch, so they were in no search at all (measured: after the delete,
    ``?q=question`` listed only the branch's edited question, seq 3, not its copy of question
    one, seq 1)."""
    fake_openai.script(Reply(text="Edited answer."))
    question_two = Message.objects.get(session=chat, seq=3)
    branch_id = owner_client.post(
        f"/api/v1/messages/{question_two.pk}/edit/", {"content": "Question two, edited"}, "json"
    ).json()["session"]["id"]

    assert owner_client.delete(f"/api/v1/sessions/{chat.pk}/").status_code == 204
    hits = owner_client.get("/api/v1/search/", {"q": "question"}).json()["results"]

    assert sorted((h["session"]["id"], h["message"]["seq"]) for h in hits) == [
        (branch_id, 1),
        (branch_id, 3),
    ]
