"""Rooms (docs/rooms.md): participants, who answers (mentions, all, manual, hand-overs and their
bounds), and each bot's own view of the room through the one pipeline."""

import pytest

from bots.models import Bot, ChatSession, Message, SessionParticipant
from compaction.pipeline import bot_budget
from tests.conftest import FAKE_KEY_ENV
from tests.factories import BotFactory, SessionFactory, message_add, turn_pending
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)


def _fake_bot(owner, fake_openai, name, **fields):
    return BotFactory(
        owner=owner,
        name=name,
        model="openai/fake-model",
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        system_prompt=f"You are {name}.",
        **fields,
    )


@pytest.fixture
def room(owner, owner_client, fake_openai, monkeypatch):
    """A room made through the API: Planner (default, window 4000) and Critic (window 8000)."""
    from tests.conftest import FAKE_KEY

    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _fake_bot(owner, fake_openai, "Planner", context_window=4000, max_output_tokens=500)
    critic = _fake_bot(owner, fake_openai, "Critic", context_window=8000, max_output_tokens=500)
    made = owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json")
    assert made.status_code == 201
    session_id = made.json()["id"]
    added = owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": critic.pk}, format="json"
    )
    assert added.status_code == 201, added.json()
    return ChatSession.objects.get(pk=session_id), planner, critic


def _send(client, session, content, **body):
    return client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True, **body},
        format="json",
    )


def _transcript(session):
    return [
        (m.seq, m.role, m.kind, m.bot.slug if m.bot else None, m.content, m.status)
        for m in Message.objects.filter(session=session).select_related("bot").order_by("seq")
    ]


# --- participants -----------------------------------------------------------------------------


def test_a_new_session_has_its_bot_as_its_one_default_participant(owner_client, bot):
    made = owner_client.post("/api/v1/sessions/", {"bot": bot.pk}, format="json").json()
    listed = owner_client.get(f"/api/v1/sessions/{made['id']}/participants/")
    assert listed.status_code == 200
    assert listed.json() == {
        "reply_mode": "mentioned",
        "participants": [
            {
                "bot": {"id": bot.pk, "slug": bot.slug, "name": bot.name},
                "joined_seq": 0,
                "sees_from_join": False,
                "is_default": True,
                "removed_at": None,
            }
        ],
    }
    assert ChatSession.objects.get(pk=made["id"]).is_room is False


def test_bot_slugs_come_from_names_and_stay_unique_per_owner(owner, other_user):
    first = BotFactory(owner=owner, name="My Planner!")
    second = BotFactory(owner=owner, name="my planner")
    elsewhere = BotFactory(owner=other_user, name="My Planner")
    assert (first.slug, second.slug, elsewhere.slug) == ("my-planner", "my-planner-2", "my-planner")
    assert BotFactory(owner=owner, name="!!!").slug == "bot"


def test_participants_add_refuses_others_private_bots_duplicates_and_bad_input(
    owner_client, chat_session, other_user
):
    private = BotFactory(owner=other_user, name="Secret")
    url = f"/api/v1/sessions/{chat_session.pk}/participants/"
    assert owner_client.post(url, {"bot": private.pk}, format="json").status_code == 404
    same = owner_client.post(url, {"bot": chat_session.bot_id}, format="json")
    assert (same.status_code, same.json()["error"]["code"]) == (400, "validation_error")
    for body in ({"bot": "x"}, {"bot": 0}, {}, {"bot": private.pk, "sees_from_join": "maybe"}):
        assert owner_client.post(url, body, format="json").status_code in (400, 404)
    assert SessionParticipant.objects.filter(session=chat_session).count() <= 1
    shared = BotFactory(owner=other_user, name="Helper", is_shared=True)
    assert owner_client.post(url, {"bot": shared.pk}, format="json").status_code == 201
    assert ChatSession.objects.get(pk=chat_session.pk).is_room is True


def test_a_bot_whose_handle_another_bot_in_the_chat_has_is_refused(owner, owner_client, other_user):
    """Two bots answering to one @handle could not be told apart: a mention reached only the
    first, the other never (a shared bot keeps its owner's slug, which may be one of yours)."""
    mine = BotFactory(owner=owner, name="Helper")
    theirs = BotFactory(owner=other_user, name="Helper", is_shared=True)
    session = SessionFactory(user=owner, bot=mine)
    url = f"/api/v1/sessions/{session.pk}/participants/"
    refused = owner_client.post(url, {"bot": theirs.pk}, format="json")
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {
        "bot": [
            "Another bot in this chat already answers to @helper (Helper): two bots with one "
            "handle could not be told apart. Change one of the handles first."
        ]
    }
    assert SessionParticipant.objects.filter(session=session, bot=theirs).count() == 0
    assert ChatSession.objects.get(pk=session.pk).is_room is False
    mine.slug = "my-helper"
    mine.save(update_fields=["slug"])
    assert owner_client.post(url, {"bot": theirs.pk}, format="json").status_code == 201


def test_someone_elses_room_is_not_found(other_client, chat_session):
    url = f"/api/v1/sessions/{chat_session.pk}/participants/"
    assert other_client.get(url).status_code == 404
    assert other_client.post(url, {"bot": chat_session.bot_id}, format="json").status_code == 404
    assert other_client.delete(f"{url}{chat_session.bot_id}/").status_code == 404


def test_removing_the_default_makes_the_next_one_default_and_the_last_cannot_leave(
    owner, owner_client, chat_session
):
    first = chat_session.bot_id
    second = BotFactory(owner=owner, name="Second")
    url = f"/api/v1/sessions/{chat_session.pk}/participants/"
    owner_client.post(url, {"bot": second.pk}, format="json")
    assert owner_client.delete(f"{url}{chat_session.bot_id}/").status_code == 204
    chat_session.refresh_from_db()
    assert chat_session.bot_id == second.pk
    last = owner_client.delete(f"{url}{second.pk}/")
    assert (last.status_code, last.json()["error"]["code"]) == (400, "validation_error")
    rows = owner_client.get(url).json()["participants"]
    assert [(p["bot"]["id"], p["is_default"], p["removed_at"] is None) for p in rows] == [
        (first, False, False),
        (second.pk, True, True),
    ]


def test_a_removed_bot_is_listed_with_when_it_left_and_comes_back_when_added_again(
    owner, owner_client, chat_session
):
    """docs/rooms.md: GET participants lists removed bots too (``removed_at``), so a client can
    show who spoke; re-adding clears it and the bot joins again at the session's last seq."""
    first = chat_session.bot
    second = BotFactory(owner=owner, name="Second")
    url = f"/api/v1/sessions/{chat_session.pk}/participants/"
    assert owner_client.post(url, {"bot": second.pk}, format="json").status_code == 201
    assert owner_client.delete(f"{url}{second.pk}/").status_code == 204
    left = SessionParticipant.objects.get(session=chat_session, bot=second).removed_at
    assert left is not None

    listed = owner_client.get(url).json()
    assert listed["participants"] == [
        {
            "bot": {"id": first.pk, "slug": first.slug, "name": first.name},
            "joined_seq": 0,
            "sees_from_join": False,
            "is_default": True,
            "removed_at": None,
        },
        {
            "bot": {"id": second.pk, "slug": "second", "name": "Second"},
            "joined_seq": 0,
            "sees_from_join": False,
            "is_default": False,
            "removed_at": left.isoformat().replace("+00:00", "Z"),
        },
    ]
    # A removed bot cannot be made the default or removed again.
    assert (
        owner_client.patch(f"{url}{second.pk}/", {"is_default": True}, format="json").status_code
        == 404
    )
    assert owner_client.delete(f"{url}{second.pk}/").status_code == 404

    message_add(chat_session, role="user", content="hello")
    message_add(chat_session, role="assistant", content="hi")
    back = owner_client.post(url, {"bot": second.pk, "sees_from_join": True}, format="json")
    assert back.status_code == 201
    assert back.json() == {
        "bot": {"id": second.pk, "slug": "second", "name": "Second"},
        "joined_seq": 2,
        "sees_from_join": True,
        "is_default": False,
        "removed_at": None,
    }
    assert [p["removed_at"] for p in owner_client.get(url).json()["participants"]] == [None, None]


def test_reply_mode_patch_and_bad_values(owner_client, chat_session):
    url = f"/api/v1/sessions/{chat_session.pk}/"
    ok = owner_client.patch(url, {"reply_mode": "all"}, format="json")
    assert (ok.status_code, ok.json()["reply_mode"]) == (200, "all")
    bad = owner_client.patch(url, {"reply_mode": "loudest"}, format="json")
    assert (bad.status_code, list(bad.json()["error"]["details"])) == (400, ["reply_mode"])
    assert ChatSession.objects.get(pk=chat_session.pk).reply_mode == "all"


# --- who answers ------------------------------------------------------------------------------


def test_no_mention_goes_to_the_default_and_a_mention_to_that_bot(
    owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    fake_openai.script(Reply(text="Plan: go."), Reply(text="Too vague."))
    with django_capture_on_commit_callbacks(execute=True):
        first = _send(owner_client, session, "What now?")
    assert first.json()["assistant_message"]["bot"] == {
        "id": planner.pk,
        "slug": "planner",
        "name": "Planner",
    }
    with django_capture_on_commit_callbacks(execute=True):
        second = _send(owner_client, session, "what do you think, @CRITIC?")
    assert second.json()["assistant_message"]["bot"]["slug"] == "critic"
    assert [r["messages"][0]["content"] for r in fake_openai.requests] == [
        "You are Planner.",
        "You are Critic.",
    ]
    listed = owner_client.get(f"/api/v1/sessions/{session.pk}/messages/").json()
    assert [m["bot"] and m["bot"]["slug"] for m in listed] == [None, "planner", None, "critic"]


def test_all_mode_answers_in_participant_order_each_seeing_the_replies_before(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    fake_openai.script(Reply(text="Step one."), Reply(text="Step one is risky."))
    with django_capture_on_commit_callbacks(execute=True):
        response = _send(owner_client, session, "Plan the trip")
    assert [r["bot"]["slug"] for r in response.json()["replies"]] == ["planner", "critic"]
    # With wait, every reply to the message is finished in the answer, not only the first.
    assert [(r["status"], r["content"]) for r in response.json()["replies"]] == [
        ("complete", "Step one."),
        ("complete", "Step one is risky."),
    ]
    assert _transcript(session) == [
        (1, "user", "chat", None, "Plan the trip", "complete"),
        (2, "assistant", "chat", "planner", "Step one.", "complete"),
        (3, "assistant", "chat", "critic", "Step one is risky.", "complete"),
    ]
    header = (
        "You are Critic (@critic) in a group chat with owner and Planner (@planner). "
        "Messages from the others start with the speaker's name."
    )
    # The critic's own view: the user and the planner as named user messages.
    assert fake_openai.requests[1]["messages"] == [
        {"role": "system", "content": "You are Critic."},
        {"role": "system", "content": header},
        {"role": "user", "name": "owner", "content": "owner: Plan the trip"},
        {"role": "user", "name": "planner", "content": "Planner: Step one."},
    ]
    # The next turn, from the planner's seat: its own turn is assistant, the critic's is named.
    fake_openai.script(Reply(text="Fine."))
    with django_capture_on_commit_callbacks(execute=True):
        owner_client.patch(
            f"/api/v1/sessions/{session.pk}/", {"reply_mode": "mentioned"}, format="json"
        )
        _send(owner_client, session, "ok?")
    assert fake_openai.requests[2]["messages"][2:] == [
        {"role": "user", "name": "owner", "content": "owner: Plan the trip"},
        {"role": "assistant", "content": "Step one."},
        {"role": "user", "name": "critic", "content": "Critic: Step one is risky."},
        {"role": "user", "name": "owner", "content": "owner: ok?"},
    ]


def test_manual_mode_reply_as_and_a_bot_outside_the_room_is_refused(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    outsider = BotFactory(owner=owner, name="Outsider")
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "manual"}, format="json")
    refused = _send(owner_client, session, "hi", reply_as=outsider.pk)
    assert (refused.status_code, list(refused.json()["error"]["details"])) == (400, ["reply_as"])
    assert Message.objects.filter(session=session).count() == 0
    fake_openai.script(Reply(text="Critic here."))
    with django_capture_on_commit_callbacks(execute=True):
        response = _send(owner_client, session, "hi", reply_as=critic.pk)
    assert response.json()["assistant_message"]["bot"]["slug"] == "critic"
    assert response.json()["assistant_message"]["content"] == "Critic here."


def test_a_mention_in_a_reply_hands_over_and_a_cycle_stops_with_a_notice(
    owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    fake_openai.script(
        Reply(text="Over to you, @critic."),
        Reply(text="Back to @planner."),
    )
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Start")
    assert _transcript(session) == [
        (1, "user", "chat", None, "Start", "complete"),
        (2, "assistant", "chat", "planner", "Over to you, @critic.", "complete"),
        (3, "assistant", "chat", "critic", "Back to @planner.", "complete"),
        (
            4,
            "system",
            "notice",
            None,
            "Critic handed the floor back to Planner, who already answered this message; the "
            "chain stops here to avoid a loop.",
            "complete",
        ),
    ]
    assert len(fake_openai.requests) == 2
    assert Message.objects.get(session=session, seq=3).hop == 1


def test_a_bots_own_name_a_quoted_mention_and_an_echo_hand_nothing_over(
    owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    fake_openai.script(
        Reply(text="I, @planner, decide."),
        Reply(text='> ask @critic\n\nYou wrote "@critic" and `@critic`.'),
        Reply(text="Ask @critic about the plan."),
        Reply(text="Fine."),
        Reply(text="Recap: ask @critic about the plan. Nothing else."),
    )
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Decide")
        _send(owner_client, session, "Quote it")
        _send(owner_client, session, "Go on")
        _send(owner_client, session, "Recap")
    assert [row[1:4] for row in _transcript(session)] == [
        ("user", "chat", None),
        ("assistant", "chat", "planner"),
        ("user", "chat", None),
        ("assistant", "chat", "planner"),
        ("user", "chat", None),
        ("assistant", "chat", "planner"),
        ("assistant", "chat", "critic"),  # handed the floor
        ("user", "chat", None),
        ("assistant", "chat", "planner"),  # its recap echoes the hand-over: nobody follows
    ]
    assert len(fake_openai.requests) == 5


def test_the_hop_limit_stops_a_chain_with_a_notice(
    owner,
    owner_client,
    room,
    fake_openai,
    eager_tasks,
    django_capture_on_commit_callbacks,
    settings,
):
    settings.ROOM_MAX_HOPS = 1
    session, planner, critic = room
    third = _fake_bot(owner, fake_openai, "Judge")
    owner_client.post(
        f"/api/v1/sessions/{session.pk}/participants/", {"bot": third.pk}, format="json"
    )
    fake_openai.script(Reply(text="Ask @critic."), Reply(text="Ask @judge."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Go")
    assert [row[3] for row in _transcript(session)] == [None, "planner", "critic", None]
    assert _transcript(session)[-1][4] == (
        "Critic mentioned Judge, but this message already led to 1 bot-to-bot replies (the "
        "room's limit); Judge does not answer."
    )
    assert len(fake_openai.requests) == 2


# --- each bot's own view ----------------------------------------------------------------------


def test_each_request_stays_within_its_bots_budget(
    owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    """Two bots with different windows answer a long room: every request the fake provider
    got fits in the budget B of the bot it was for (the label prefixes counted)."""
    from chat_platform.llm.tokens import count_message_tokens

    session, planner, critic = room
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    budgets = {
        "You are Planner.": bot_budget(Bot.objects.get(pk=planner.pk)).budget,
        "You are Critic.": bot_budget(Bot.objects.get(pk=critic.pk)).budget,
    }
    assert budgets == {"You are Planner.": 3500, "You are Critic.": 7500}
    words = " ".join(f"fact{n}" for n in range(120))
    for n in range(14):
        fake_openai.script(Reply(text=f"planner {n} {words}"), Reply(text=f"critic {n} {words}"))
        with django_capture_on_commit_callbacks(execute=True):
            _send(owner_client, session, f"round {n} {words}")
    assert len(fake_openai.requests) == 28
    for request in fake_openai.requests:
        sent = sum(
            count_message_tokens(m["content"], model="openai/fake-model")
            + (count_message_tokens(m["name"], model="openai/fake-model") if "name" in m else 0)
            for m in request["messages"]
        )
        assert sent <= budgets[request["messages"][0]["content"]]
    # the planner's tight window dropped the oldest turns; the critic's held more of them
    planner_last = [
        r for r in fake_openai.requests if r["messages"][0]["content"] == "You are Planner."
    ][-1]
    critic_last = [
        r for r in fake_openai.requests if r["messages"][0]["content"] == "You are Critic."
    ][-1]
    assert len(planner_last["messages"]) < len(critic_last["messages"])


def test_a_bot_that_joined_seeing_from_its_join_never_gets_earlier_messages(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    fake_openai.script(Reply(text="Early answer."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "An early secret: 4711")
    late = _fake_bot(owner, fake_openai, "Late")
    owner_client.post(
        f"/api/v1/sessions/{session.pk}/participants/",
        {"bot": late.pk, "sees_from_join": True},
        format="json",
    )
    fake_openai.script(Reply(text="Hello."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "@late welcome")
    sent = fake_openai.requests[-1]["messages"]
    assert [m["content"] for m in sent][2:] == ["owner: @late welcome"]
    assert "4711" not in str(sent)


def test_another_bots_recall_exchange_never_reaches_a_bot(
    owner, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks, owner_client
):
    """Tool messages are bot-scoped: a bot sees only its own recall exchanges."""
    session, planner, critic = room
    from tests.factories import message_add

    message_add(session, role="user", content="question")
    message_add(
        session,
        role="assistant",
        content="",
        kind="tool",
        bot=planner,
        tool_calls=[
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "read_records", "arguments": '{"names": ["x"]}'},
            }
        ],
        token_count=20,
    )
    message_add(
        session,
        role="tool",
        content="PRIVATE planner record",
        kind="tool",
        bot=planner,
        tool_call_id="c1",
        tool_name="read_records",
    )
    message_add(session, role="assistant", content="Planner says hi.", bot=planner)
    from bots.transitions import session_context_recount

    session_context_recount(session_id=session.pk)
    fake_openai.script(Reply(text="Critic reply."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "@critic your turn")
    sent = fake_openai.requests[-1]["messages"]
    assert "PRIVATE" not in str(sent)
    assert [m["content"] for m in sent][2:] == [
        "owner: question",
        "Planner: Planner says hi.",
        "owner: @critic your turn",
    ]


def test_removing_a_bot_keeps_its_messages_attributed_and_it_no_longer_answers(
    owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    fake_openai.script(Reply(text="Critic was here."), Reply(text="Planner answers."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "@critic hello")
    owner_client.delete(f"/api/v1/sessions/{session.pk}/participants/{critic.pk}/")
    with django_capture_on_commit_callbacks(execute=True):
        response = _send(owner_client, session, "@critic again?")
    assert response.json()["assistant_message"]["bot"]["slug"] == "planner"
    listed = owner_client.get(f"/api/v1/sessions/{session.pk}/messages/").json()
    assert [(m["bot"] or {}).get("name") for m in listed] == [None, "Critic", None, "Planner"]


def test_a_reply_queued_for_a_bot_removed_before_it_ran_fails_saying_so(
    owner, owner_client, room, fake_openai
):
    """The reply was queued (a room in `all` mode) when its bot was taken out of the room: it
    never runs, and ends failed with the reason (it answered all the same before)."""
    from turns import turn

    session, planner, critic = room
    _, queued = turn_pending(session, "Both of you, please.", bot=critic)
    removed = owner_client.delete(f"/api/v1/sessions/{session.pk}/participants/{critic.pk}/")
    assert removed.status_code == 204
    turn.turn_run(message_id=queued.pk)
    queued.refresh_from_db()
    assert (queued.status, queued.error_code, queued.error_message, queued.content) == (
        "failed",
        "not_found",
        "Critic left this chat before it could answer.",
        "",
    )
    assert fake_openai.requests == []


def test_replies_queued_in_a_room_for_an_account_deactivated_since_fail_without_a_call(
    owner, room, fake_openai, eager_tasks
):
    """Both bots' replies to one message (`all` mode) were queued while the account was active;
    it is deactivated before they run: the first ends failed `not_authenticated`, and so does
    the one handed over to when it ends. No provider is called."""
    from turns import turn

    session, planner, critic = room
    _, first = turn_pending(session, "Both of you, please.", bot=planner)
    second = message_add(  # as a send in `all` mode stores it: only the first has reply_to
        session,
        role="assistant",
        bot=critic,
        content="",
        status="pending",
        token_count=0,
    )
    owner.is_active = False
    owner.save(update_fields=["is_active"])
    turn.turn_run(message_id=first.pk)
    for reply in (first, second):
        reply.refresh_from_db()
    assert [(m.bot_id, m.status, m.error_code) for m in (first, second)] == [
        (planner.pk, "failed", "not_authenticated"),
        (critic.pk, "failed", "not_authenticated"),
    ]
    assert fake_openai.requests == []


def test_two_messages_at_once_to_a_three_bot_room_are_answered_in_order(
    owner, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    """Both sends commit before any turn runs; every reply then runs one at a time in seq
    order (the claim refuses while an earlier reply is unfinished) and none is left pending."""
    from turns.services.participants import participant_add, session_reply_mode_set
    from turns.services.send import session_message_send

    session, planner, critic = room
    third = _fake_bot(owner, fake_openai, "Judge")
    participant_add(user=owner, session_id=session.pk, bot_id=third.pk)
    session_reply_mode_set(user=owner, session_id=session.pk, reply_mode="all")
    fake_openai.script(*[Reply(text=f"r{n}") for n in range(6)])
    with django_capture_on_commit_callbacks(execute=True):
        session_message_send(user=owner, session_id=session.pk, content="one")
        session_message_send(user=owner, session_id=session.pk, content="two")
    rows = _transcript(session)
    assert [(r[0], r[3], r[5]) for r in rows] == [
        (1, None, "complete"),
        (2, "planner", "complete"),
        (3, "critic", "complete"),
        (4, "judge", "complete"),
        (5, None, "complete"),
        (6, "planner", "complete"),
        (7, "critic", "complete"),
        (8, "judge", "complete"),
    ]
    assert [r[4] for r in rows if r[1] == "assistant"] == [f"r{n}" for n in range(6)]


def test_a_one_bot_session_without_participant_rows_renders_as_before(
    owner, fake_session, fake_openai, eager_tasks, django_capture_on_commit_callbacks, owner_client
):
    fake_openai.script(Reply(text="Hi."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, fake_session, "@nobody hello")
    assert fake_openai.requests[0]["messages"] == [
        {"role": "system", "content": "You are a test bot."},
        {"role": "user", "content": "@nobody hello"},
    ]
    assert SessionFactory._meta.model.objects.get(pk=fake_session.pk).is_room is False


def test_the_context_report_takes_bot_for_each_participants_budget(
    owner, owner_client, room, other_user
):
    session, planner, critic = room
    url = f"/api/v1/sessions/{session.pk}/context/"
    assert owner_client.get(url).json()["budget"] == 3500
    assert owner_client.get(f"{url}?bot={planner.pk}").json()["budget"] == 3500
    assert owner_client.get(f"{url}?bot={critic.pk}").json()["budget"] == 7500
    stranger = BotFactory(owner=other_user, name="Stranger", is_shared=True)
    for value in (stranger.pk, "x", 0, -1):
        response = owner_client.get(f"{url}?bot={value}")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")


def test_a_branch_of_a_room_is_the_same_room(room, owner_client, fake_openai, eager_tasks):
    """Editing a message of a room (turns.services.branch): the branch keeps the room's
    participants and reply mode, and a reply there answers with the room's view."""
    session, planner, critic = room
    fake_openai.script(Reply(text="Plan A."), Reply(text="Looks risky."), Reply(text="Plan B."))
    assert _send(owner_client, session, "Plan the trip, @critic check it").status_code == 201
    question = Message.objects.get(session=session, seq=1)

    body = owner_client.post(
        f"/api/v1/messages/{question.pk}/edit/", {"content": "Plan a cheaper trip"}, "json"
    ).json()

    branch = ChatSession.objects.get(pk=body["session"]["id"])
    assert (branch.is_room, branch.reply_mode) == (True, session.reply_mode)
    assert sorted(
        SessionParticipant.objects.filter(session=branch).values_list("bot_id", "is_default")
    ) == sorted([(planner.pk, True), (critic.pk, False)])


def test_regenerating_a_later_bots_reply_keeps_the_replies_before_it_and_that_bot(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    fake_openai.script(Reply(text="Step one."), Reply(text="Step one is risky."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Plan the trip")
    critics = Message.objects.get(session=session, seq=3)
    fake_openai.script(Reply(text="Step one is fine, actually."))

    with django_capture_on_commit_callbacks(execute=True):
        body = owner_client.post(f"/api/v1/messages/{critics.pk}/regenerate/", {}, "json").json()

    branch = ChatSession.objects.get(pk=body["session"]["id"])
    assert (branch.branch_of_id, branch.branch_seq) == (session.pk, 3)
    assert _transcript(branch) == [
        (1, "user", "chat", None, "Plan the trip", "complete"),
        (2, "assistant", "chat", "planner", "Step one.", "complete"),
        (3, "assistant", "chat", "critic", "Step one is fine, actually.", "complete"),
    ]
    # asked from the critic's seat, with the planner's reply in view, as the first time
    assert fake_openai.requests[-1]["messages"][2:] == [
        {"role": "user", "name": "owner", "content": "owner: Plan the trip"},
        {"role": "user", "name": "planner", "content": "Planner: Step one."},
    ]
    assert _transcript(session)[2][4] == "Step one is risky."
