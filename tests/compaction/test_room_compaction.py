"""Rooms (docs/rooms.md): compaction keyed by (session, bot). Each bot compacts the room as it
was shown it, with its own budget, summaries, snapshots, totals, lease and cool-down; no request
to one bot carries another's summaries or snapshots; ``?bot=`` on every compaction endpoint and
``/compact @slug`` in chat."""

import json

import pytest
import redis
from django.conf import settings as django_settings
from django.db import connection
from django.db.models import Sum
from django.test.utils import CaptureQueriesContext

from bots.models import Bot, ChatSession, Message
from bots.transitions import session_context_recount
from chat_platform.llm.tokens import count_message_tokens
from compaction import engine
from compaction.lock import lock_key
from compaction.models import CompactionEvent, SeatState, Summary, SummaryCoverage
from compaction.pipeline import bot_budget
from memory.models import MemoryRecord
from tests.conftest import FAKE_KEY, FAKE_KEY_ENV
from tests.coverage import messages_covered
from tests.factories import BotFactory
from tests.fakeopenai import Reply

pytestmark = pytest.mark.django_db(transaction=True)

MODEL = "openai/fake-model"
FILLER = "We chatted about the weather and the garden for a while without deciding anything. "


def _bot(owner, fake_openai, name, window, **fields):
    return BotFactory(
        owner=owner,
        name=name,
        model=MODEL,
        api_base=fake_openai.url,
        api_key_env=FAKE_KEY_ENV,
        system_prompt=f"You are {name}.",
        context_window=window,
        max_output_tokens=200,
        compaction_model="builtin/extractive",
        **fields,
    )


@pytest.fixture
def room(owner, owner_client, fake_openai, monkeypatch):
    """Planner (default, B 1300) and Critic (B 2800), made through the API."""
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _bot(owner, fake_openai, "Planner", 1500)
    critic = _bot(owner, fake_openai, "Critic", 3000)
    session_id = owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json").json()[
        "id"
    ]
    added = owner_client.post(
        f"/api/v1/sessions/{session_id}/participants/", {"bot": critic.pk}, format="json"
    )
    assert added.status_code == 201, added.json()
    return ChatSession.objects.get(pk=session_id), planner, critic


def _send(client, session, content, **body):
    response = client.post(
        f"/api/v1/sessions/{session.pk}/messages/",
        {"content": content, "wait": True, **body},
        format="json",
    )
    assert response.status_code in (200, 201), response.json()
    return response


def _note(n: int) -> str:
    return (
        f"Note {n}: the parcel for order {n * 37} ships to depot {n % 11} on day {n % 28 + 1}. "
        # Long enough that /compact lowers the context (docs/compaction.md "/compact").
        + (FILLER * 4).strip()
    )


def _rounds(client, session, fake_openai, capture, start, count, *speakers):
    for n in range(start, start + count):
        fake_openai.script(*(Reply(text=f"{s} noted item {n}. {FILLER}") for s in speakers))
        with capture(execute=True):
            _send(client, session, _note(n))


def _requests_of(fake_openai, bot):
    return [r for r in fake_openai.requests if r["messages"][0]["content"] == bot.system_prompt]


def _sent_tokens(request) -> int:
    return sum(
        count_message_tokens(m["content"] or "", model=MODEL)
        + (count_message_tokens(m["name"], model=MODEL) if "name" in m else 0)
        for m in request["messages"]
    )


def _summary_blocks(request) -> list[str]:
    return [
        m["content"]
        for m in request["messages"]
        if m["role"] == "system" and m["content"].startswith("[Summary of messages")
    ]


def _shown(fake_openai, bot, names) -> set[str]:
    """Every message text the bot was sent verbatim (speaker prefixes taken off)."""
    shown = set()
    for request in _requests_of(fake_openai, bot):
        for m in request["messages"]:
            if m["role"] == "system":
                continue
            text = m["content"]
            for name in names:
                if m.get("name") and text.startswith(f"{name}: "):
                    text = text[len(name) + 2 :]
            shown.add(text)
    return shown


def test_two_bots_compact_the_room_each_from_its_own_seat(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    budgets = {planner.pk: bot_budget(planner).budget, critic.pk: bot_budget(critic).budget}
    assert budgets == {planner.pk: 1300, critic.pk: 2800}

    _rounds(
        owner_client,
        session,
        fake_openai,
        django_capture_on_commit_callbacks,
        1,
        12,
        "Planner",
        "Critic",
    )

    assert len(fake_openai.requests) == 24
    # every request within the budget of the bot it was for
    for bot in (planner, critic):
        sizes = [_sent_tokens(r) for r in _requests_of(fake_openai, bot)]
        assert len(sizes) == 12
        assert max(sizes) <= budgets[bot.pk]
    # both compacted, each its own way (the tighter window more often)
    mine = {b.pk: list(Summary.objects.filter(session=session, bot=b)) for b in (planner, critic)}
    assert mine[planner.pk] and mine[critic.pk]
    assert len(mine[planner.pk]) > len(mine[critic.pk])
    assert not Summary.objects.filter(session=session).exclude(bot__in=[planner, critic]).exists()
    names = ["owner", "Planner", "Critic"]
    for bot in (planner, critic):
        covered = SummaryCoverage.objects.filter(bot=bot, message__session=session)
        texts = set(covered.values_list("message__content", flat=True))
        assert texts, bot.name
        # each bot's summaries cover only what that bot was shown
        assert texts <= _shown(fake_openai, bot, names)
        assert set(covered.values_list("summary__bot_id", flat=True)) == {bot.pk}
        # its own running totals: what its coverage holds
        seat = SeatState.objects.get(session=session, bot=bot)
        held = covered.aggregate(tokens=Sum("message__token_count"))["tokens"]
        assert (seat.covered_tokens, seat.covered_messages) == (held, covered.count())
    # no request to one bot carries the other's summary, and each got its own
    blocks = {b.pk: {s.block for s in Summary.objects.filter(bot=b)} for b in (planner, critic)}
    for bot, other in ((planner, critic), (critic, planner)):
        sent = [b for r in _requests_of(fake_openai, bot) for b in _summary_blocks(r)]
        assert sent and set(sent) <= blocks[bot.pk]
        assert not set(sent) & blocks[other.pk]
    # each bot's snapshots are its own, and its index never lists the other's
    for bot, other in ((planner, critic), (critic, planner)):
        snapshots = MemoryRecord.objects.filter(session=session, kind="snapshot", bot=bot)
        assert snapshots.exists()
        assert all(s.name.endswith(f"_b{bot.pk}") for s in snapshots)
        for request in _requests_of(fake_openai, bot):
            assert f"_b{other.pk}" not in str(request["messages"])
    # compaction events name their bot
    assert set(
        CompactionEvent.objects.filter(session=session).values_list("bot_id", flat=True)
    ) == {planner.pk, critic.pk}


def test_a_late_joiner_from_its_join_never_gets_earlier_messages_or_their_summaries(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    session, planner, critic = room
    _rounds(owner_client, session, fake_openai, django_capture_on_commit_callbacks, 1, 8, "Planner")
    assert Summary.objects.filter(session=session, bot=planner).exists()
    late = _bot(owner, fake_openai, "Late", 1500)
    joined = owner_client.post(
        f"/api/v1/sessions/{session.pk}/participants/",
        {"bot": late.pk, "sees_from_join": True},
        format="json",
    )
    assert joined.status_code == 201
    joined_seq = joined.json()["joined_seq"]
    assert joined_seq == 16
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    _rounds(
        owner_client,
        session,
        fake_openai,
        django_capture_on_commit_callbacks,
        9,
        10,
        "Planner",
        "Critic",
        "Late",
    )

    late_requests = _requests_of(fake_openai, late)
    assert len(late_requests) == 10
    for request in late_requests:
        text = str(request["messages"])
        for n in range(1, 9):
            assert f"order {n * 37} " not in text  # said before it joined
        for block in _summary_blocks(request):
            first = int(block.split("messages ")[1].split("–")[0])
            assert first > joined_seq
        assert _sent_tokens(request) <= 1300
    # it compacted from its own seat: only what it was shown, after its join
    covered = SummaryCoverage.objects.filter(bot=late).values_list("message__seq", flat=True)
    assert covered and min(covered) > joined_seq
    assert set(Summary.objects.filter(bot=late).values_list("first_seq", flat=True)) and all(
        s.first_seq > joined_seq for s in Summary.objects.filter(bot=late)
    )
    # hidden history is out of its totals: its pressure is what it sees
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={late.pk}").json()
    assert report["pressure"] <= report["budget"]


def test_a_one_bot_chat_that_becomes_a_room_keeps_its_bots_summaries_and_shows_the_newcomer_all(
    owner, owner_client, fake_openai, eager_tasks, django_capture_on_commit_callbacks, monkeypatch
):
    monkeypatch.setenv(FAKE_KEY_ENV, FAKE_KEY)
    planner = _bot(owner, fake_openai, "Planner", 8000)
    session = ChatSession.objects.get(
        pk=owner_client.post("/api/v1/sessions/", {"bot": planner.pk}, format="json").json()["id"]
    )
    _rounds(owner_client, session, fake_openai, django_capture_on_commit_callbacks, 1, 4, "Planner")
    compacted = owner_client.post(f"/api/v1/sessions/{session.pk}/compact/", {}, format="json")
    assert compacted.json()["outcome"] == "compacted"
    summary = Summary.objects.get(session=session)
    assert (summary.bot_id, summary.first_seq, summary.last_seq) == (planner.pk, 1, 6)
    covered_tokens = (
        messages_covered(session)
        .filter(compacted_by_id=summary.pk)
        .aggregate(t=Sum("token_count"))["t"]
    )
    # the chat's running totals count every message in context, covered or not
    before = ChatSession.objects.get(pk=session.pk).context_tokens
    assert before == session_context_recount(session_id=session.pk)[0]

    critic = _bot(owner, fake_openai, "Critic", 8000)
    owner_client.post(
        f"/api/v1/sessions/{session.pk}/participants/", {"bot": critic.pk}, format="json"
    )

    # the join moves nothing: the coverage was its bot's seat's from the start
    assert sorted(
        SummaryCoverage.objects.filter(summary=summary).values_list("bot_id", "message__seq")
    ) == [(planner.pk, seq) for seq in range(1, 7)]
    assert ChatSession.objects.get(pk=session.pk).context_tokens == before
    seat = SeatState.objects.get(session=session, bot=planner)
    assert (seat.covered_tokens, seat.covered_messages) == (covered_tokens, 6)
    # its seat reads past its coverage at once (docs/rooms.md "A seat's bounded read"); the
    # newcomer's covers nothing
    assert (seat.covered_through_seq, seat.uncovered_ids) == (6, [])
    newcomer = SeatState.objects.get(session=session, bot=critic)
    assert (newcomer.covered_through_seq, newcomer.uncovered_ids) == (0, [])
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={planner.pk}").json()
    assert report["parts"]["summaries"] == summary.token_count

    fake_openai.script(Reply(text="Planner again."), Reply(text="Critic here."))
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "What about order 37?")
    to_planner, to_critic = fake_openai.requests[-2:]
    assert _summary_blocks(to_planner) == [summary.block]
    assert _note(1) not in str(to_planner["messages"])
    assert _summary_blocks(to_critic) == []
    assert "owner: " + _note(1) in [m["content"] for m in to_critic["messages"]]


def test_bot_query_on_every_compaction_endpoint(
    owner, owner_client, other_client, room, fake_openai, eager_tasks, other_user
):
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    base = f"/api/v1/sessions/{session.pk}"
    stranger = BotFactory(owner=other_user, name="Stranger", is_shared=True)

    # a bot that is not a participant: not found, and nothing is compacted
    for value in (stranger.pk, "x", 0):
        response = owner_client.post(f"{base}/compact/?bot={value}", {}, format="json")
        assert (response.status_code, response.json()["error"]["code"]) == (404, "not_found")
        for path in (
            f"{base}/summaries/?bot={value}",
            f"{base}/records/?bot={value}",
            f"{base}/context/?bot={value}",
            f"/api/v1/compaction-events/?session={session.pk}&bot={value}",
        ):
            assert owner_client.get(path).status_code == 404, path
    assert not CompactionEvent.objects.filter(session=session).exists()
    # another user's room stays not found with a right bot
    assert other_client.get(f"{base}/summaries/?bot={planner.pk}").status_code == 404
    assert (
        other_client.post(f"{base}/compact/?bot={critic.pk}", {}, format="json").status_code == 404
    )

    done = owner_client.post(f"{base}/compact/?bot={critic.pk}", {}, format="json").json()
    assert done["outcome"] == "compacted"
    assert done["summary"]["bot"] == critic.pk and done["event"]["bot"] == critic.pk
    assert not Summary.objects.filter(session=session, bot=planner).exists()

    ids = lambda response: [row["id"] for row in response.json()]  # noqa: E731
    critics = [done["summary"]["id"]]
    assert ids(owner_client.get(f"{base}/summaries/?bot={critic.pk}")) == critics
    assert ids(owner_client.get(f"{base}/summaries/?bot={planner.pk}")) == []
    assert ids(owner_client.get(f"{base}/summaries/")) == []  # the default bot's (Planner)
    events = f"/api/v1/compaction-events/?session={session.pk}"
    assert ids(owner_client.get(f"{events}&bot={critic.pk}")) == [done["event"]["id"]]
    assert ids(owner_client.get(f"{events}&bot={planner.pk}")) == []
    snapshot = done["event"]["snapshot"]
    assert snapshot == f"snapshot_1_4_b{critic.pk}"
    names = lambda response: [row["name"] for row in response.json()]  # noqa: E731
    assert names(owner_client.get(f"{base}/records/?bot={critic.pk}")) == [snapshot]
    assert names(owner_client.get(f"{base}/records/?bot={planner.pk}")) == []
    assert owner_client.get(f"{base}/records/{snapshot}/?bot={planner.pk}").status_code == 404
    assert owner_client.get(f"{base}/records/{snapshot}/?bot={critic.pk}").status_code == 200
    critic_report = owner_client.get(f"{base}/context/?bot={critic.pk}").json()
    planner_report = owner_client.get(f"{base}/context/").json()
    assert critic_report["parts"]["summaries"] == done["summary"]["token_count"]
    assert planner_report["parts"]["summaries"] == 0
    assert critic_report["parts"]["history"] < planner_report["parts"]["history"]


def test_compact_at_slug_in_chat_compacts_only_that_bot(
    owner, owner_client, room, fake_openai, eager_tasks
):
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))

    body = _send(owner_client, session, "/compact @critic dates").json()

    assert body["compaction"]["outcome"] == "compacted"
    assert body["notice"]["content"].startswith("Critic: Context compacted: ")
    summary = Summary.objects.get(session=session)
    assert (summary.bot_id, summary.focus, summary.first_seq, summary.last_seq) == (
        critic.pk,
        "dates",
        1,
        4,
    )
    assert not Summary.objects.filter(session=session, bot=planner).exists()
    assert len(fake_openai.requests) == 3  # no bot turn, no provider call

    unknown = _send(owner_client, session, "/compact @nobody").json()
    assert unknown["notice"]["content"] == (
        "Nothing was compacted: @nobody is not a bot in this chat."
    )
    assert Summary.objects.filter(session=session).count() == 1


def test_one_bots_compaction_running_does_not_hold_another_bots_reply(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    """Planner's lease is held (its compaction running in another process); Critic answers,
    its own compaction state untouched, and the context reports say whose is in flight."""
    session, planner, critic = room
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    lease = client.lock(lock_key(session.pk, planner.pk), timeout=30)
    assert lease.acquire(blocking=False)
    try:
        base = f"/api/v1/sessions/{session.pk}/context/"
        assert owner_client.get(f"{base}?bot={planner.pk}").json()["compaction"]["in_flight"]
        assert not owner_client.get(f"{base}?bot={critic.pk}").json()["compaction"]["in_flight"]
        fake_openai.script(Reply(text="Critic answers while Planner compacts."))
        with django_capture_on_commit_callbacks(execute=True):
            body = _send(owner_client, session, "@critic are you there?").json()
        assert body["assistant_message"]["status"] == "complete"
        assert body["assistant_message"]["content"] == "Critic answers while Planner compacts."
        # Critic's own compaction is not blocked by Planner's lease
        done = owner_client.post(
            f"/api/v1/sessions/{session.pk}/compact/?bot={critic.pk}", {}, format="json"
        )
        assert done.status_code == 200
        assert done.json()["outcome"] in ("compacted", "noop")
    finally:
        lease.release()
    assert not client.exists(lock_key(session.pk, critic.pk))


def test_admin_lists_one_bots_summaries_and_events_within_a_session(
    owner, owner_client, room, fake_openai, eager_tasks
):
    from django.test import Client

    from tests.factories import UserFactory

    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    base = f"/api/v1/sessions/{session.pk}/compact/"
    by_critic = owner_client.post(f"{base}?bot={critic.pk}", {}, format="json").json()
    by_planner = owner_client.post(f"{base}?bot={planner.pk}", {}, format="json").json()
    assert by_critic["outcome"] == by_planner["outcome"] == "compacted"
    admin = Client()
    admin.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))

    for path, key in (("summary", "summary"), ("compactionevent", "event")):
        for bot, mine, theirs in (
            (critic, by_critic, by_planner),
            (planner, by_planner, by_critic),
        ):
            page = admin.get(
                f"/admin/compaction/{path}/?session__exact={session.pk}&bot__id__exact={bot.pk}"
            )
            assert page.status_code == 200
            rows = page.context["cl"].result_list
            assert [row.pk for row in rows] == [mine[key]["id"]]
            assert theirs[key]["id"] not in [row.pk for row in rows]


def test_compaction_frames_in_a_room_name_their_bot(
    owner, owner_client, room, fake_openai, eager_tasks, monkeypatch
):
    from chat_platform import realtime
    from memory import realtime as memory_realtime

    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    frames: list[dict] = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: frames.append(frame))
    monkeypatch.setattr(memory_realtime, "frames_heard", lambda session_id: True)
    monkeypatch.setattr(
        memory_realtime, "send_frame", lambda session_id, frame: frames.append(frame)
    )

    owner_client.post(f"/api/v1/sessions/{session.pk}/compact/?bot={critic.pk}", {}, format="json")

    named = {"id": critic.pk, "slug": "critic", "name": "Critic"}
    kinds = [(f["type"], f.get("bot")) for f in frames if f["type"] != "memory.updated"]
    assert kinds == [
        ("compaction.started", named),
        ("compaction.finished", named),
        ("context.updated", named),
    ]
    updated = frames[-1] if frames[-1]["type"] == "context.updated" else None
    assert updated is not None and updated["context"]["budget"] == 2800
    # The index the compaction changed is Critic's: the frame named Planner and listed
    # Planner's records, so Critic's new snapshot was never announced.
    memory = [f for f in frames if f["type"] == "memory.updated"]
    snapshot = MemoryRecord.objects.get(session=session, kind="snapshot", bot=critic)
    assert [f["bot"] for f in memory] == [named]
    assert snapshot.name in [r["name"] for r in memory[0]["records"]]


def test_a_room_turns_frames_name_the_bot_that_speaks(
    owner, owner_client, room, fake_openai, eager_tasks, monkeypatch
):
    """docs/rooms.md: frames carry ``bot`` where they concern one. A reply's deltas, and its
    recall frames, said only ``message_id``: a client drawing two bots at once could not tell
    whose text was streaming without a lookup. A one-bot chat's frames are unchanged."""
    from chat_platform import realtime

    session, planner, critic = room
    frames: list[dict] = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: frames.append(frame))
    words = ["Too ", "vague ", "so ", "far."]
    fake_openai.script(Reply(text="".join(words), chunks=words))

    _send(owner_client, session, "what do you think, @critic?")

    named = {"id": critic.pk, "slug": "critic", "name": "Critic"}
    deltas = [f for f in frames if f["type"] == "message.delta"]
    assert deltas and {json.dumps(f["bot"]) for f in deltas} == {json.dumps(named)}
    assert "".join(f["delta"] for f in deltas) == "Too vague so far."
    records = [f for f in frames if f["type"] == "memory.updated"]
    assert all(f["bot"]["id"] in (planner.pk, critic.pk) for f in records)


def test_a_branch_of_a_room_carries_each_bots_coverage(
    owner, owner_client, room, fake_openai, eager_tasks
):
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 5):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    done = owner_client.post(
        f"/api/v1/sessions/{session.pk}/compact/?bot={critic.pk}", {}, format="json"
    ).json()
    assert (done["summary"]["first_seq"], done["summary"]["last_seq"]) == (1, 6)
    last_question = Message.objects.get(session=session, seq=7)

    fake_openai.script(Reply(text="Planner on the edit."))
    edited = owner_client.post(
        f"/api/v1/messages/{last_question.pk}/edit/", {"content": "Order 148 instead?"}, "json"
    ).json()

    branch = ChatSession.objects.get(pk=edited["session"]["id"])
    carried = Summary.objects.get(session=branch)
    assert (carried.bot_id, carried.first_seq, carried.last_seq) == (critic.pk, 1, 6)
    assert sorted(
        SummaryCoverage.objects.filter(summary=carried).values_list("bot_id", "message__seq")
    ) == [(critic.pk, seq) for seq in range(1, 7)]
    covered = Message.objects.filter(session=branch, seq__lte=6).aggregate(t=Sum("token_count"))
    seat = SeatState.objects.get(session=branch, bot=critic)
    assert (seat.covered_tokens, seat.covered_messages) == (covered["t"], 6)
    # the branch's seats start at their carried coverage's last message (docs/rooms.md "A
    # seat's bounded read"): the critic's at 6 with nothing left below; the planner covers none
    assert (seat.covered_through_seq, seat.uncovered_ids) == (6, [])
    planners = SeatState.objects.get(session=branch, bot=planner)
    assert (planners.covered_through_seq, planners.uncovered_ids) == (0, [])
    report = owner_client.get(f"/api/v1/sessions/{branch.pk}/context/?bot={critic.pk}").json()
    assert report["parts"]["summaries"] == carried.token_count


def test_a_bots_compacted_room_messages_are_found_by_its_search(
    owner, owner_client, room, fake_openai, eager_tasks
):
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    done = owner_client.post(
        f"/api/v1/sessions/{session.pk}/compact/?bot={critic.pk}", {}, format="json"
    ).json()
    assert done["outcome"] == "compacted"

    hits = owner_client.get(
        f"/api/v1/sessions/{session.pk}/records/?bot={critic.pk}&q=parcel for order 74"
    ).json()

    assert hits[0]["name"] == f"snapshot_1_4_b{critic.pk}"
    assert 3 in hits[0]["seqs"]
    assert "order 74" in hits[0]["excerpt"]


def test_a_room_search_names_the_searching_bots_own_snapshot_never_anothers(
    owner, owner_client, room, fake_openai, eager_tasks
):
    """A message is indexed with the first snapshot that held it, whichever bot's: Critic's
    search named Planner's snapshot, which Critic cannot read (404), and a message only Planner
    compacted as if Critic had a snapshot of it."""
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    for n in range(1, 4):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(owner_client, session, _note(n))
    for bot in (planner, critic):
        done = owner_client.post(
            f"/api/v1/sessions/{session.pk}/compact/?bot={bot.pk}", {}, format="json"
        ).json()
        assert done["outcome"] == "compacted"
    fake_openai.script(Reply(text=f"Planner noted item 4. {FILLER}"))
    _send(owner_client, session, _note(4))
    fake_openai.script(Reply(text=f"Planner noted item 5. {FILLER}"))
    _send(owner_client, session, _note(5))
    later = owner_client.post(
        f"/api/v1/sessions/{session.pk}/compact/?bot={planner.pk}", {}, format="json"
    ).json()
    assert later["outcome"] == "compacted"

    def names(query):
        return [
            hit["name"]
            for hit in owner_client.get(
                f"/api/v1/sessions/{session.pk}/records/?bot={critic.pk}&q={query}"
            ).json()
        ]

    assert names("parcel for order 74") == [f"snapshot_1_4_b{critic.pk}"]
    readable = owner_client.get(
        f"/api/v1/sessions/{session.pk}/records/snapshot_1_4_b{critic.pk}/?bot={critic.pk}"
    )
    assert readable.status_code == 200
    # Only Planner compacted the notes 4 and 5: for Critic they are its own history, live.
    assert all(not name.endswith(f"_b{planner.pk}") for name in names("parcel for order 148"))


# --- undo, re-summarise, release and expand in a room: the summary's own bot's seat only -------


def _planner_notes(client, session, fake_openai, start, count):
    for n in range(start, start + count):
        fake_openai.script(Reply(text=f"Planner noted item {n}. {FILLER}"))
        _send(client, session, _note(n))


@pytest.fixture
def seats(owner_client, room, fake_openai, eager_tasks):
    """Planner with two summaries of its own (messages 1–4, then 5–12), Critic with one
    (1–4): three notes, ``/compact @planner``, ``/compact @critic``, two notes, ``/compact
    @planner`` (each command and its notice take two seqs). Automatic compaction is off, so
    nothing else moves."""
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    _planner_notes(owner_client, session, fake_openai, 1, 3)
    _send(owner_client, session, "/compact @planner")
    _send(owner_client, session, "/compact @critic")
    _planner_notes(owner_client, session, fake_openai, 4, 2)
    _send(owner_client, session, "/compact @planner")
    first, second = Summary.objects.filter(session=session, bot=planner).order_by("first_seq")
    theirs = Summary.objects.get(session=session, bot=critic)
    assert [(s.first_seq, s.last_seq) for s in (first, second, theirs)] == [(1, 4), (5, 12), (1, 4)]
    return session, planner, critic, first, second, theirs


def _as_seen_by(bot, messages) -> list[str]:
    """The contents a bot is sent for these messages: its own turns as they are, everyone
    else's with the speaker's name in front (docs/rooms.md)."""
    shown = []
    for m in messages:
        if m.role == "assistant" and m.bot_id == bot.pk:
            shown.append(m.content)
        else:
            shown.append(f"{m.bot.name if m.bot_id else 'owner'}: {m.content}")
    return shown


def _history_sent(request) -> list[str]:
    return [m["content"] for m in request["messages"] if m["role"] != "system"]


def _seat(session, bot) -> tuple[int, int]:
    state = SeatState.objects.get(session=session, bot=bot)
    return state.covered_tokens, state.covered_messages


def _coverage_recount(session, bot) -> tuple[int, int]:
    rows = SummaryCoverage.objects.filter(bot=bot, message__session=session)
    return rows.aggregate(t=Sum("message__token_count"))["t"] or 0, rows.count()


def _coverage(summary) -> list[int]:
    return sorted(
        SummaryCoverage.objects.filter(summary=summary).values_list("message_id", flat=True)
    )


def _chat_messages(session, first_seq, last_seq):
    return list(
        Message.objects.filter(
            Message.in_context_q(), session=session, seq__gte=first_seq, seq__lte=last_seq
        ).order_by("seq")
    )


def test_undo_in_a_room_gives_its_messages_back_to_its_own_bot_only(
    owner_client, seats, fake_openai, monkeypatch, django_capture_on_commit_callbacks
):
    from chat_platform import realtime
    from compaction.models import ContextRecord
    from compaction.records import record_rebuild

    session, planner, critic, first, second, theirs = seats
    restored = _chat_messages(session, 1, 4)
    critic_before = (_coverage(theirs), _seat(session, critic), theirs.text)
    first_rows = _coverage(first)
    assert first_rows == [m.pk for m in restored]
    before = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={planner.pk}").json()
    frames: list[dict] = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: frames.append(frame))

    with django_capture_on_commit_callbacks(execute=True):
        response = owner_client.post(f"/api/v1/summaries/{first.pk}/revert/", {}, format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    tokens = sum(m.token_count for m in restored)
    assert {k: body[k] for k in ("first_seq", "last_seq", "restored", "tokens_before")} == {
        "first_seq": 1,
        "last_seq": 4,
        "restored": {"messages": 4, "tokens": tokens, "summaries": []},
        "tokens_before": before["pressure"],
    }
    first.refresh_from_db()
    assert (first.status, first.held) == ("reverted", True)
    event = CompactionEvent.objects.get(session=session, trigger="revert")
    assert (event.bot_id, event.outcome, event.summary_id, event.source_tokens) == (
        planner.pk,
        "reverted",
        first.pk,
        tokens,
    )
    assert event.snapshot.name == f"snapshot_1_4_b{planner.pk}"
    # the planner's coverage of 1–4 is gone; its totals equal a recount of what it still covers
    assert not SummaryCoverage.objects.filter(summary=first).exists()
    assert set(
        SummaryCoverage.objects.filter(bot=planner).values_list("summary_id", flat=True)
    ) == {second.pk}
    assert _seat(session, planner) == _coverage_recount(session, planner)
    assert _seat(session, planner)[1] == 4  # 5, 6, 11, 12
    # the critic's seat is as it was
    theirs.refresh_from_db()
    assert theirs.status == "active"
    assert (_coverage(theirs), _seat(session, critic), theirs.text) == critic_before
    after = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={planner.pk}").json()
    assert body["tokens_after"] == after["pressure"]
    assert after["parts"]["summaries"] == second.token_count
    # frames name the bot
    named = {"id": planner.pk, "slug": "planner", "name": "Planner"}
    kinds = [(f["type"], f.get("bot")) for f in frames if f["type"] != "memory.updated"]
    assert kinds == [("compaction.finished", named), ("context.updated", named)]

    # the planner's next request carries 1–4 verbatim, inside its B, its other summary still
    fake_openai.script(Reply(text="Planner again."))
    _send(owner_client, session, "What about order 37?")
    request = _requests_of(fake_openai, planner)[-1]
    assert _summary_blocks(request) == [second.block]
    later = _chat_messages(session, 13, 17)  # 15–16: the last /compact and its notice
    assert _history_sent(request) == _as_seen_by(planner, [*restored, *later])
    assert _sent_tokens(request) <= 1300
    reply = Message.objects.filter(session=session, bot=planner).order_by("-seq").first()
    [rebuilt] = record_rebuild(ContextRecord.objects.get(message=reply))
    assert json.dumps(rebuilt) == json.dumps(request["messages"])

    # the critic's requests still carry its own summary of 1–4, unchanged, and not 1–4 verbatim
    fake_openai.script(Reply(text="Critic here."))
    _send(owner_client, session, "@critic What do you think?")
    request = _requests_of(fake_openai, critic)[-1]
    assert _summary_blocks(request) == [theirs.block]
    sent = _history_sent(request)
    assert not set(_as_seen_by(critic, restored)) & set(sent)
    assert sent[0] == _as_seen_by(critic, _chat_messages(session, 5, 5))[0]


def test_undo_over_its_bots_hard_threshold_is_refused_in_a_room_and_changes_nothing(
    owner_client, room, fake_openai, eager_tasks
):
    from bots.queries import session_seat
    from compaction.measure import context_measure

    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    _planner_notes(owner_client, session, fake_openai, 1, 14)
    _send(owner_client, session, "/compact @planner")
    _send(owner_client, session, "/compact @critic")
    mine = Summary.objects.get(session=session, bot=planner)
    theirs = Summary.objects.get(session=session, bot=critic)
    seat = session_seat(ChatSession.objects.get(pk=session.pk), planner)
    measure = context_measure(session=seat)
    restored = _chat_messages(session, mine.first_seq, mine.last_seq)
    expected = (
        measure.pressure
        - mine.token_count
        + sum(m.token_count for m in restored)
        + len(restored) * measure.room.max_prefix_tokens
    )
    assert bot_budget(planner).hard == 975
    assert expected >= 975  # over the planner's H (the critic's is 2100)
    state = lambda: (  # noqa: E731
        list(Summary.objects.filter(session=session).values_list("pk", "status", "held")),
        _coverage(mine),
        _coverage(theirs),
        _seat(session, planner),
        _seat(session, critic),
        CompactionEvent.objects.filter(session=session).count(),
    )
    before = state()

    response = owner_client.post(f"/api/v1/summaries/{mine.pk}/revert/", {}, format="json")

    assert response.status_code == 400, response.json()
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert (error["details"]["tokens_after"], error["details"]["hard"]) == (expected, 975)
    assert "compact_rest" in error["details"]
    assert state() == before


def test_undo_and_compact_the_rest_in_a_room_compacts_its_own_seat(
    owner_client, room, fake_openai, eager_tasks
):
    session, planner, critic = room
    Bot.objects.filter(pk__in=[planner.pk, critic.pk]).update(compaction_enabled=False)
    _planner_notes(owner_client, session, fake_openai, 1, 3)  # 1–6
    _send(owner_client, session, "/compact @planner")  # 7–8: covers 1–4
    _send(owner_client, session, "/compact @critic")  # 9–10: covers 1–4
    _planner_notes(owner_client, session, fake_openai, 4, 2)  # 11–14; 13 opens the turn
    mine = Summary.objects.get(session=session, bot=planner)
    theirs = Summary.objects.get(session=session, bot=critic)
    assert (mine.first_seq, mine.last_seq, theirs.first_seq, theirs.last_seq) == (1, 4, 1, 4)
    critic_before = (_coverage(theirs), _seat(session, critic), theirs.text)
    restored = _chat_messages(session, 1, 4)

    response = owner_client.post(
        f"/api/v1/summaries/{mine.pk}/revert/", {"compact_rest": True}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["restored"] == {
        "messages": 4,
        "tokens": sum(m.token_count for m in restored),
        "summaries": [],
    }
    assert body["compaction"]["outcome"] == "compacted"
    rest = Summary.objects.get(session=session, bot=planner, status="active")
    assert body["compaction"]["summary"]["id"] == rest.pk
    # the rest of the planner's context: what it had left (5–6) and since (11–12), not the
    # held span, not the current turn
    assert (rest.first_seq, rest.last_seq) == (5, 12)
    assert _coverage(rest) == [m.pk for m in _chat_messages(session, 5, 12)]
    assert [m.seq for m in _chat_messages(session, 5, 12)] == [5, 6, 11, 12]
    mine.refresh_from_db()
    assert (mine.status, mine.held, _coverage(mine)) == ("reverted", True, [])
    assert _seat(session, planner) == _coverage_recount(session, planner)
    assert _seat(session, planner)[1] == 4
    report = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={planner.pk}").json()
    assert body["tokens_after"] == report["pressure"]
    assert report["parts"]["summaries"] == rest.token_count
    # the critic's seat is as it was
    theirs.refresh_from_db()
    assert theirs.status == "active"
    assert (_coverage(theirs), _seat(session, critic), theirs.text) == critic_before
    assert set(
        CompactionEvent.objects.filter(session=session, trigger__in=["revert", "manual"])
        .exclude(pk__lte=body["event"]["id"] - 1)
        .values_list("bot_id", flat=True)
    ) == {planner.pk}


def test_resummarise_in_a_room_runs_its_bots_summariser_from_its_seat(
    owner_client, seats, fake_openai
):
    from tests.compaction.test_engine import summariser_requests

    session, planner, critic, first, second, theirs = seats
    # the planner's compaction model follows its chat model (the fake provider), the critic's
    # stays built-in: the re-summary is the planner's
    Bot.objects.filter(pk=planner.pk).update(compaction_model="")
    snapshot = MemoryRecord.objects.get(session=session, name=f"snapshot_1_4_b{planner.pk}")
    rows = _coverage(first)
    critic_before = (_coverage(theirs), _seat(session, critic), theirs.text, theirs.status)
    planner_before = _seat(session, planner)
    text = "Owner sent Planner order 37 for depot 1 on day 2 and order 74 for depot 2 on day 3."
    fake_openai.script(Reply(text=text))
    asked = len(summariser_requests(fake_openai))

    response = owner_client.post(
        f"/api/v1/summaries/{first.pk}/resummarise/", {"focus": "depots"}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["outcome"] == "compacted", body
    [request] = summariser_requests(fake_openai)[asked:]
    assert request["messages"][1]["content"] == (
        f"<transcript>\n{snapshot.body}\n</transcript>\nFocus: depots"
    )
    assert "Planner" in snapshot.body  # the transcript as the planner saw it, with speakers
    new = Summary.objects.get(pk=body["summary"]["id"])
    assert (new.bot_id, new.first_seq, new.last_seq, new.level, new.text) == (
        planner.pk,
        1,
        4,
        1,
        text,
    )
    assert (new.model, new.focus, new.trigger, new.status) == (
        MODEL,
        "depots",
        "resummarise",
        "active",
    )
    first.refresh_from_db()
    assert (first.status, first.superseded_by_id) == ("superseded", new.pk)
    assert body["replaced"]["id"] == first.pk
    # the new summary covers what the old one did, for the planner; totals unchanged
    assert _coverage(new) == rows and not _coverage(first)
    assert set(SummaryCoverage.objects.filter(summary=new).values_list("bot_id", flat=True)) == {
        planner.pk
    }
    assert _seat(session, planner) == planner_before == _coverage_recount(session, planner)
    theirs.refresh_from_db()
    assert (_coverage(theirs), _seat(session, critic), theirs.text, theirs.status) == critic_before
    event = CompactionEvent.objects.get(session=session, trigger="resummarise")
    assert (event.bot_id, event.outcome, event.summary_id, event.reason) == (
        planner.pk,
        "compacted",
        new.pk,
        "focus",
    )


def test_expand_in_a_room_reaches_only_its_bots_next_reply(
    owner_client, seats, fake_openai, django_capture_on_commit_callbacks
):
    from compaction.models import ContextExpansion, ContextRecord
    from compaction.records import record_rebuild

    session, planner, critic, first, second, theirs = seats
    restored = _chat_messages(session, 1, 4)

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/expand/", {"summary": first.pk}, format="json"
    )

    assert response.status_code == 200, response.json()
    body = response.json()
    assert {k: body[k] for k in ("record", "first_seq", "last_seq", "messages", "replaces")} == {
        "record": f"snapshot_1_4_b{planner.pk}",
        "first_seq": 1,
        "last_seq": 4,
        "messages": 4,
        "replaces": [first.pk],
    }
    assert (body["event"]["bot"], body["event"]["outcome"]) == (planner.pk, "expanded")

    # the critic answers first: its request is as before, and the expansion waits
    fake_openai.script(Reply(text="Critic here."))
    _send(owner_client, session, "@critic What do you think?")
    request = _requests_of(fake_openai, critic)[-1]
    assert _summary_blocks(request) == [theirs.block]
    assert not set(_as_seen_by(critic, restored)) & set(_history_sent(request))
    assert ContextExpansion.objects.get(session=session).reply_id is None

    # the planner's next reply carries 1–4 verbatim instead of its summary of them
    fake_openai.script(Reply(text="Planner, expanded."))
    _send(owner_client, session, "What about order 37?")
    request = _requests_of(fake_openai, planner)[-1]
    assert _summary_blocks(request) == [second.block]
    later = _chat_messages(session, 13, 19)
    assert [m.bot_id for m in later if m.role == "assistant"] == [planner.pk, critic.pk]
    assert _history_sent(request) == _as_seen_by(planner, [*restored, *later])
    assert _sent_tokens(request) <= 1300
    reply = Message.objects.filter(session=session, bot=planner).order_by("-seq").first()
    record = ContextRecord.objects.get(message=reply)
    [rebuilt] = record_rebuild(record)
    assert json.dumps(rebuilt) == json.dumps(request["messages"])
    expanded = [p for p in record.calls[0]["parts"] if p["ref"].get("expanded")]
    assert {p["ref"]["expanded"] for p in expanded} == {f"snapshot_1_4_b{planner.pk}"}
    assert ContextExpansion.objects.get(session=session).reply_id == reply.pk

    # and only that reply: the next one has its summaries back, and the expansion is gone
    fake_openai.script(Reply(text="Planner, summarised."))
    _send(owner_client, session, "And order 74?")
    request = _requests_of(fake_openai, planner)[-1]
    assert _summary_blocks(request) == [first.block, second.block]
    assert not set(_as_seen_by(planner, restored)) & set(_history_sent(request))
    assert not ContextExpansion.objects.filter(session=session).exists()
    # every summary and seat is as it was
    assert _seat(session, planner) == _coverage_recount(session, planner)
    assert [s.status for s in (first, second, theirs)] == ["active"] * 3


def test_each_bot_keeps_its_own_pending_expansion_until_its_own_reply(
    owner_client, seats, fake_openai
):
    """Issues 19 and 22: an expansion is keyed by (session, bot). Setting one for the critic
    leaves the planner's pending; the critic's reply carries only the critic's span and leaves
    the planner's row as it was; the planner's reply then carries its own."""
    from compaction.models import ContextExpansion, ContextRecord

    session, planner, critic, first, second, theirs = seats
    restored = _chat_messages(session, 1, 4)
    base = f"/api/v1/sessions/{session.pk}/expand/"

    def rows():
        return {
            e.bot_id: (e.pk, e.record, e.first_seq, e.last_seq, e.reply_id, e.created_at)
            for e in ContextExpansion.objects.filter(session=session)
        }

    def expanded_parts(reply):
        [call] = ContextRecord.objects.get(message=reply).calls
        return [p["ref"] for p in call["parts"] if p["ref"].get("expanded")]

    def last_reply(bot):
        return Message.objects.filter(session=session, bot=bot).order_by("-seq").first()

    mine = owner_client.post(base, {"summary": first.pk}, format="json")
    yours = owner_client.post(base, {"summary": theirs.pk}, format="json")

    assert (mine.status_code, yours.status_code) == (200, 200), (mine.json(), yours.json())
    assert [(r.json()["record"], r.json()["replaces"]) for r in (mine, yours)] == [
        (f"snapshot_1_4_b{planner.pk}", [first.pk]),
        (f"snapshot_1_4_b{critic.pk}", [theirs.pk]),
    ]
    pending = rows()
    assert {bot: row[1:5] for bot, row in pending.items()} == {
        planner.pk: (f"snapshot_1_4_b{planner.pk}", 1, 4, None),
        critic.pk: (f"snapshot_1_4_b{critic.pk}", 1, 4, None),
    }

    # the critic answers first: its own span verbatim instead of its summary; the planner's
    # pending expansion is not claimed, not deleted, not changed
    fake_openai.script(Reply(text="Critic, expanded."))
    _send(owner_client, session, "@critic What do you think?")
    request = _requests_of(fake_openai, critic)[-1]
    asked = Message.objects.filter(session=session, role="user").order_by("-seq").first()
    assert _summary_blocks(request) == []
    assert _history_sent(request) == _as_seen_by(critic, _chat_messages(session, 1, asked.seq))
    assert _history_sent(request)[:4] == _as_seen_by(critic, restored)
    critic_reply = last_reply(critic)
    assert expanded_parts(critic_reply) == [
        {"expanded": f"snapshot_1_4_b{critic.pk}", "seqs": [[1, 4]]}
    ]
    after_critic = rows()
    assert after_critic[planner.pk] == pending[planner.pk]
    assert after_critic[critic.pk][4] == critic_reply.pk

    # then the planner's reply carries its own span, and the critic's claimed row stays its own
    fake_openai.script(Reply(text="Planner, expanded."))
    _send(owner_client, session, "What about order 37?")
    request = _requests_of(fake_openai, planner)[-1]
    asked = Message.objects.filter(session=session, role="user").order_by("-seq").first()
    assert _summary_blocks(request) == [second.block]
    later = _chat_messages(session, 13, asked.seq)
    assert _history_sent(request) == _as_seen_by(planner, [*restored, *later])
    planner_reply = last_reply(planner)
    assert expanded_parts(planner_reply) == [
        {"expanded": f"snapshot_1_4_b{planner.pk}", "seqs": [[1, 4]]}
    ]
    # neither is pending any more: each is held by the reply that carried it
    assert {bot: row[4] for bot, row in rows().items()} == {
        planner.pk: planner_reply.pk,
        critic.pk: critic_reply.pk,
    }

    # each bot's next reply has its summaries back and drops its own row only
    fake_openai.script(Reply(text="Critic, summarised."))
    _send(owner_client, session, "@critic And now?")
    assert _summary_blocks(_requests_of(fake_openai, critic)[-1]) == [theirs.block]
    assert {bot: row[4] for bot, row in rows().items()} == {planner.pk: planner_reply.pk}
    fake_openai.script(Reply(text="Planner, summarised."))
    _send(owner_client, session, "And order 74?")
    assert _summary_blocks(_requests_of(fake_openai, planner)[-1]) == [first.block, second.block]
    assert rows() == {}
    assert [s.status for s in (first, second, theirs)] == ["active"] * 3


def test_an_expansion_that_no_longer_fits_drops_only_its_own_bots_row(
    owner_client, seats, fake_openai
):
    """The planner's budget shrinks after both expansions were set: its reply goes without its
    span (never more than B) and deletes its own row; the critic's stays pending and its next
    reply still carries its span."""
    from bots.queries import session_seat
    from compaction.measure import context_measure
    from compaction.models import ContextExpansion

    session, planner, critic, first, second, theirs = seats
    base = f"/api/v1/sessions/{session.pk}/expand/"
    assert owner_client.post(base, {"summary": first.pk}, format="json").status_code == 200
    assert owner_client.post(base, {"summary": theirs.pk}, format="json").status_code == 200
    critic_row = ContextExpansion.objects.get(session=session, bot=critic)
    session.refresh_from_db()
    planner_seat = session_seat(session, Bot.objects.get(pk=planner.pk))
    # expand_for=0: the measure of a reply that may take the pending expansion
    expanded = context_measure(session=planner_seat, expand_for=0)
    assert [e.seq for e in expanded.expanded] == [1, 2, 3, 4]
    # one token short of the fixed part with the span, before the new message even counts
    Bot.objects.filter(pk=planner.pk).update(
        context_window=expanded.fixed_tokens - 1 + planner.max_output_tokens
    )

    fake_openai.script(Reply(text="Planner, without it."))
    _send(owner_client, session, "Go on.")

    request = _requests_of(fake_openai, planner)[-1]
    assert _summary_blocks(request) == [first.block, second.block]
    assert list(
        ContextExpansion.objects.filter(session=session).values_list(
            "pk", "bot_id", "record", "reply_id"
        )
    ) == [(critic_row.pk, critic.pk, f"snapshot_1_4_b{critic.pk}", None)]

    fake_openai.script(Reply(text="Critic, expanded."))
    _send(owner_client, session, "@critic Your view?")
    request = _requests_of(fake_openai, critic)[-1]
    assert _summary_blocks(request) == []
    assert _history_sent(request)[:4] == _as_seen_by(critic, _chat_messages(session, 1, 4))


def test_expand_of_a_snapshot_in_a_room_takes_the_snapshots_seat(owner_client, seats):
    session, planner, critic, first, second, theirs = seats
    base = f"/api/v1/sessions/{session.pk}/expand/"

    by_record = owner_client.post(base, {"record": f"snapshot_1_4_b{critic.pk}"}, format="json")
    # another bot's snapshot is not readable from the planner's seat
    crossed = owner_client.post(
        f"{base}?bot={planner.pk}", {"record": f"snapshot_1_4_b{critic.pk}"}, format="json"
    )

    assert by_record.status_code == 200, by_record.json()
    body = by_record.json()
    assert (body["record"], body["replaces"], body["event"]["bot"]) == (
        f"snapshot_1_4_b{critic.pk}",
        [theirs.pk],
        critic.pk,
    )
    assert crossed.status_code == 404
    assert crossed.json()["error"]["code"] == "not_found"


def test_another_user_cannot_undo_resummarise_release_or_expand_in_a_room(
    owner_client, other_client, seats, fake_openai
):
    from compaction.models import ContextExpansion

    session, planner, critic, first, second, theirs = seats
    undone = owner_client.post(f"/api/v1/summaries/{second.pk}/revert/", {}, format="json")
    assert undone.status_code == 200, undone.json()
    state = lambda: (  # noqa: E731
        list(Summary.objects.filter(session=session).values_list("pk", "status", "held")),
        [_coverage(s) for s in (first, second, theirs)],
        _seat(session, planner),
        _seat(session, critic),
        CompactionEvent.objects.filter(session=session).count(),
        ContextExpansion.objects.filter(session=session).count(),
    )
    before = state()
    requests = len(fake_openai.requests)

    answers = [
        other_client.post(f"/api/v1/summaries/{first.pk}/revert/", {}, format="json"),
        other_client.post(
            f"/api/v1/summaries/{first.pk}/revert/", {"compact_rest": True}, format="json"
        ),
        other_client.post(
            f"/api/v1/summaries/{theirs.pk}/resummarise/", {"focus": "dates"}, format="json"
        ),
        other_client.post(f"/api/v1/summaries/{second.pk}/release/", {}, format="json"),
        other_client.post(
            f"/api/v1/sessions/{session.pk}/expand/", {"summary": first.pk}, format="json"
        ),
        other_client.post(
            f"/api/v1/sessions/{session.pk}/expand/?bot={critic.pk}",
            {"record": f"snapshot_1_4_b{critic.pk}"},
            format="json",
        ),
    ]

    assert [a.status_code for a in answers] == [404] * 6
    assert {a.json()["error"]["code"] for a in answers} == {"not_found"}
    assert state() == before
    assert len(fake_openai.requests) == requests


def test_a_seats_soft_compaction_reads_the_room_once_and_covers_in_one_statement(
    owner, owner_client, room, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    """A soft compaction run of a seat that is not the room's default bot: the room's
    participants and user name are read once for the whole run (not once per measure), the
    seat's cool-down comes with the totals its measure read, and the coverage is written by one
    ``INSERT … SELECT`` (no read of the bot's whole coverage first); the seat's totals move by
    exactly what the summary covers."""
    session, planner, critic = room
    owner_client.patch(f"/api/v1/sessions/{session.pk}/", {"reply_mode": "all"}, format="json")
    # The critic's compaction is off while the room talks, then due: S 400, T 280 of B 2800.
    Bot.objects.filter(pk=critic.pk).update(
        compaction_enabled=False, compaction_threshold=400, compaction_kept_percent=10
    )
    _rounds(owner_client, session, fake_openai, django_capture_on_commit_callbacks, 1, 5, "P", "C")
    Bot.objects.filter(pk=critic.pk).update(compaction_enabled=True)
    assert not SummaryCoverage.objects.filter(bot=critic).exists()

    with CaptureQueriesContext(connection) as queries:
        result = engine.compaction_soft(session_id=session.pk, bot_id=critic.pk)

    # one pass compacted; the next found nothing left that it may take (the current turn)
    outcomes = CompactionEvent.objects.filter(session=session, bot=critic).order_by("id")
    assert [(e.outcome, e.reason) for e in outcomes] == [
        ("compacted", ""),
        ("noop", "nothing_to_compact"),
    ]
    assert result is not None and result.reason == "nothing_to_compact"
    summaries = list(Summary.objects.filter(session=session, bot=critic))
    assert len(summaries) == 1
    sqls = [q["sql"] for q in queries.captured_queries]
    assert sum("bots_sessionparticipant" in sql for sql in sqls) == 1
    assert not any(sql.startswith('SELECT "auth_user"') for sql in sqls)
    writes = [sql for sql in sqls if sql.startswith('INSERT INTO "compaction_summarycoverage"')]
    assert len(writes) == 1 and " SELECT " in writes[0]
    # the coverage is read only by the range's NOT EXISTS, never as the bot's whole list first;
    # the index takes what the new summary covers as a subquery of its own rows
    reads = [sql for sql in sqls if '"message_id" FROM "compaction_summarycoverage"' in sql]
    assert all('WHERE U0."summary_id" = ' in sql for sql in reads)
    assert not any('"compaction_summarycoverage"."bot_id" = ' in sql for sql in reads)
    # the seat's row: read by each measure (the room's view with its cool-down; its coverage
    # with the pins and summaries, a branch of their UNION), never again for the cool-down,
    # the range or a get_or_create; a pass starts from its round's measure (``Plan.measured``)
    assert [sql.split()[0] for sql in sqls if "compaction_seatstate" in sql] == [
        *("SELECT", "(SELECT"),  # the run's first measure, which its pass starts from
        "SELECT",  # the commit: the seat's covered floor, its row locked
        "UPDATE",  # the commit: the seat's covered totals and floor
        *("SELECT", "(SELECT"),  # the measure after the commit
        "UPDATE",  # failures cleared
        *("SELECT", "(SELECT"),  # the second round's measure (still above T): nothing left
    ]
    covered = SummaryCoverage.objects.filter(bot=critic)
    for summary in summaries:
        seqs = sorted(covered.filter(summary=summary).values_list("message__seq", flat=True))
        assert seqs[0] == summary.first_seq and seqs[-1] == summary.last_seq
    seat = SeatState.objects.get(session=session, bot=critic)
    held = covered.aggregate(tokens=Sum("message__token_count"))["tokens"]
    assert (seat.covered_tokens, seat.covered_messages) == (held, covered.count())
    assert held == sum(s.source_tokens for s in summaries)


def test_a_rooms_export_imports_as_a_chat_where_no_seats_summary_stands(owner_client, seats):
    """A room's lossless export carries every bot's summaries, but its coverage is per bot,
    which a chat of one bot cannot hold: imported as they were, Planner's and Critic's summaries
    of messages 1–4 both stood in the context, beside those very messages. Now they are kept
    for the audit as undone (not held), and the history is the context."""
    from tests.transfer.test_import_export import imported

    session, planner, *_ = seats
    response = owner_client.get(f"/api/v1/sessions/{session.pk}/export/?format=json")
    data = b"".join(response.streaming_content)
    job = imported(owner_client, planner, data)
    assert (job["status"], job["error"]) == ("done", None)
    new_id = job["result"]["imported"][0]["session"]
    summaries = Summary.objects.filter(session_id=new_id)
    assert sorted(summaries.values_list("first_seq", "last_seq", "status", "held")) == [
        (1, 4, "reverted", False),
        (1, 4, "reverted", False),
        (5, 12, "reverted", False),
    ]
    context = owner_client.get(f"/api/v1/sessions/{new_id}/context/").json()
    assert context["parts"]["summaries"] == 0
    new = ChatSession.objects.get(pk=new_id)
    assert (
        new.context_messages
        == Message.objects.filter(session=new, kind__in=["chat", "tool"], status="complete").count()
    )


def test_a_rooms_messages_say_compacted_for_the_seat_asked_for(owner_client, seats, owner):
    """``compacted`` in a room is one seat's (``?bot=``, default: the room's default bot, as
    for ``/context/``): the messages that bot's own summaries cover. It was always false in a
    room, whose coverage is per bot (docs/rooms.md)."""
    session, planner, critic, first, second, theirs = seats
    url = f"/api/v1/sessions/{session.pk}/messages/"

    def compacted(query: str = "") -> list[int]:
        response = owner_client.get(url + query)
        assert response.status_code == 200, response.json()
        return [m["seq"] for m in response.json() if m["compacted"]]

    def seqs(*summaries) -> list[int]:
        ids = [pk for s in summaries for pk in _coverage(s)]
        return sorted(Message.objects.filter(pk__in=ids).values_list("seq", flat=True))

    assert seqs(theirs) == [1, 2, 3, 4]
    assert seqs(first, second) == [1, 2, 3, 4, 5, 6, 11, 12]  # 7–10: the commands
    assert compacted() == seqs(first, second)  # the room's default bot, Planner
    assert compacted(f"?bot={planner.pk}") == seqs(first, second)
    assert compacted(f"?bot={critic.pk}") == [1, 2, 3, 4]
    assert compacted(f"?bot={critic.pk}&after_seq=2") == [3, 4]
    # A bot that never took part is not found, like every ?bot= (nothing listed).
    stranger = BotFactory(owner=owner, name="Stranger")
    response = owner_client.get(f"{url}?bot={stranger.pk}")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_another_bots_recall_exchange_never_counts_in_a_bots_pressure(
    room, owner_client, fake_openai, eager_tasks, django_capture_on_commit_callbacks
):
    """A bot is never shown another bot's recall or tool rounds (docs/rooms.md), yet they
    counted in its history and pressure: a phantom trim, and a hard compaction it did not need."""
    from bots.queries import session_seat
    from compaction.seats import room_view

    session, planner, critic = room
    fake_openai.script(Reply(text="Planner says hello."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Hello both.")
    call = {
        "id": "call_s1",
        "type": "function",
        "function": {"name": "search_records", "arguments": json.dumps({"query": "parcel"})},
    }
    fake_openai.script(Reply(text="", tool_calls=[call]), Reply(text="Nothing about parcels."))
    with django_capture_on_commit_callbacks(execute=True):
        _send(owner_client, session, "Anything about the parcel?")
    assert Message.objects.filter(session=session, kind="tool", bot=planner).count() == 2

    session.refresh_from_db()
    view = room_view(session_seat(session, critic))
    seen = Message.objects.filter(Message.in_context_q(), session=session).exclude(
        kind="tool", bot=planner
    )
    expected = sum(m.token_count for m in seen) + seen.count() * view.max_prefix_tokens
    context = owner_client.get(f"/api/v1/sessions/{session.pk}/context/?bot={critic.pk}").json()
    assert context["parts"]["history"] == expected
