"""Reversible compaction (issue 22 items 5–8, docs/context-records.md): undo a summary (and the hold
on the undone span), re-summarise a span with a focus, expand a span for one reply.

Budget (``small_bot``): W 2200, R 200 -> B 2000, S 1000, H 1500, T 800; no system prompt and no
memory index, so pressure is history + active summaries exactly.
"""

import pytest

from chat_platform import realtime
from compaction import engine
from compaction.lock import single_flight
from compaction.measure import context_measure
from compaction.models import CompactionEvent, ContextExpansion, ContextRecord, Summary
from compaction.pipeline import context_build
from compaction.records import record_rebuild
from memory.models import MemoryRecord
from tests.compaction.test_engine import (
    GOOD,
    add_history,
    add_turn,
    chat_requests,
    compacted_seqs,
    counters,
    recount,
    summariser_requests,
    summary_text,
)
from tests.coverage import messages_covered
from tests.factories import BotFactory, SessionFactory, message_add
from tests.fakeopenai import Reply
from turns.turn import turn_run

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _fast_llm(fast_llm):
    """One attempt per summariser call (see conftest)."""


@pytest.fixture
def session(owner, small_bot):
    return SessionFactory(user=owner, bot=small_bot)


@pytest.fixture
def frames(monkeypatch):
    sent: list[dict] = []
    monkeypatch.setattr(realtime, "send_frame", lambda session_id, frame: sent.append(frame))
    return sent


def compacted(session, fake_openai, sizes, *, text=GOOD, tag="m"):
    """Append ``sizes`` (then a 50 + 50 exchange) and /compact all but that exchange."""
    add_history(session, [*sizes, 50, 50], tag=tag)
    recount(session)
    fake_openai.script(Reply(text=text))
    result = engine.compaction_manual(session=session)
    assert result.outcome == "compacted", result
    return result.summary


def revert(client, summary, **body):
    return client.post(f"/api/v1/summaries/{summary.pk}/revert/", body, format="json")


def statuses(session) -> list[tuple[int, str, bool]]:
    return list(
        Summary.objects.filter(session=session).order_by("pk").values_list("pk", "status", "held")
    )


# --- undo ------------------------------------------------------------------------------------


def test_undo_restores_the_messages_and_the_next_reply_is_sent_them(
    owner_client, session, fake_openai, frames, django_capture_on_commit_callbacks
):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert (summary.first_seq, summary.last_seq) == (1, 4)
    assert counters(session) == (100, 2)
    before = 100 + summary.token_count
    assert context_measure(session=session).pressure == before
    snapshot = MemoryRecord.objects.get(session=session, name="snapshot_1_4")

    with django_capture_on_commit_callbacks(execute=True):
        response = revert(owner_client, summary)

    assert response.status_code == 200, response.json()
    body = response.json()
    summary.refresh_from_db()
    event = CompactionEvent.objects.get(session=session, trigger="revert")
    assert (summary.status, summary.held, summary.reverted_at is not None) == (
        "reverted",
        True,
        True,
    )
    assert {k: body[k] for k in ("first_seq", "last_seq", "restored", "tokens_before")} == {
        "first_seq": 1,
        "last_seq": 4,
        "restored": {"messages": 4, "tokens": 1200, "summaries": []},
        "tokens_before": before,
    }
    assert (body["tokens_after"], body["held"], body["compaction"]) == (1300, True, None)
    assert body["summary"]["status"] == "reverted"
    assert body["event"]["id"] == event.pk
    assert (event.outcome, event.tokens_before, event.tokens_after, event.source_tokens) == (
        "reverted",
        before,
        1300,
        1200,
    )
    assert (event.summary_id, event.snapshot_id) == (summary.pk, snapshot.pk)
    # the messages are back, the totals follow exactly, the snapshot stays
    assert compacted_seqs(session) == []
    assert counters(session) == (1300, 6) == recount(session)
    assert MemoryRecord.objects.filter(pk=snapshot.pk, indexed=True).exists()
    assert context_measure(session=session).pressure == 1300
    # open pages update: the event, then the meter
    finished = [f for f in frames if f["type"] == "compaction.finished"]
    assert [f["event"]["id"] for f in finished] == [event.pk]
    [update] = [f for f in frames if f["type"] == "context.updated"]
    assert update["context"]["pressure"] == 1300

    # undo then chat: the model is sent the restored messages verbatim, inside B
    new, reply = add_turn(session, "What did we say?", tokens=20)
    recount(session)
    fake_openai.script(Reply(text="That."))
    turn_run(message_id=reply.pk)
    [chat] = chat_requests(fake_openai)
    assert [m["content"] for m in chat["messages"]] == [
        *(f"m message {i}" for i in range(6)),
        "What did we say?",
    ]
    assert all(m["role"] != "system" for m in chat["messages"])
    reply.refresh_from_db()
    assert reply.status == "complete"
    assert counters(session)[0] <= 2000


def test_undo_refused_at_the_hard_threshold_changes_nothing(owner_client, session, fake_openai):
    # 1,400 tokens restored + 100 left = 1,500 = H: refused (at, not only over)
    summary = compacted(session, fake_openai, [350, 350, 350, 350])
    before = (statuses(session), compacted_seqs(session), counters(session))
    events = CompactionEvent.objects.count()

    response = revert(owner_client, summary)

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert (error["details"]["tokens_after"], error["details"]["hard"]) == (1500, 1500)
    assert "compact_rest" in error["details"]
    assert "Undo and compact the rest" in error["message"]
    assert (statuses(session), compacted_seqs(session), counters(session)) == before
    assert CompactionEvent.objects.count() == events


def test_undo_and_compact_the_rest(owner_client, session, fake_openai):
    """The undone span comes back (and is held); everything else that is compactable is
    compacted, so the context lands below H."""
    first = compacted(session, fake_openai, [350, 350, 350, 350])  # 1–4, then 5–6 (50 + 50)
    add_history(session, [300, 300, 50, 50], tag="n")  # 7–10; the latest exchange is 9–10
    recount(session)
    # messages 5–8 (50 + 50 + 300 + 300) are what is left to compact
    rest_text = summary_text(60)
    fake_openai.script(Reply(text=rest_text))
    requests_before = len(summariser_requests(fake_openai))

    response = revert(owner_client, first, compact_rest=True)

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["restored"] == {"messages": 4, "tokens": 1400, "summaries": []}
    [request] = summariser_requests(fake_openai)[requests_before:]
    transcript = request["messages"][1]["content"]
    assert "m message 0" not in transcript and "n message 0" in transcript
    rest = Summary.objects.get(session=session, status="active")
    assert (rest.first_seq, rest.last_seq, rest.text) == (5, 8, rest_text)
    assert body["compaction"]["outcome"] == "compacted"
    assert body["compaction"]["summary"]["id"] == rest.pk
    assert compacted_seqs(session) == [5, 6, 7, 8]
    assert counters(session) == (1500, 6) == recount(session)
    assert body["tokens_after"] == 1500 + rest.token_count
    first.refresh_from_db()
    assert (first.status, first.held) == ("reverted", True)


def test_undo_of_a_fused_summary_restores_its_parents(owner_client, session, fake_openai):
    a = compacted(session, fake_openai, [150, 150, 150, 150], text=summary_text(250))
    b = compacted(session, fake_openai, [200, 200, 200, 200], text=summary_text(250), tag="n")
    assert [(a.first_seq, a.last_seq), (b.first_seq, b.last_seq)] == [(1, 4), (5, 10)]
    fake_openai.script(Reply(text=summary_text(80)))
    fused = engine.compaction_manual(session=session).summary
    assert (fused.level, fused.first_seq, fused.last_seq) == (2, 1, 10)
    assert set(fused.parents.all()) == {a, b}
    covered = list(
        messages_covered(session)
        .filter(compacted_by_id__isnull=False)
        .order_by("seq")
        .values_list("seq", "compacted_by_id")
    )
    totals = counters(session)

    response = revert(owner_client, fused)

    assert response.status_code == 200, response.json()
    body = response.json()
    assert body["restored"] == {"messages": 0, "tokens": 0, "summaries": [a.pk, b.pk]}
    assert statuses(session) == [
        (a.pk, "active", False),
        (b.pk, "active", False),
        (fused.pk, "reverted", True),
    ]
    for parent in (a, b):
        parent.refresh_from_db()
        assert parent.superseded_at is None
    # each message points at its parent again, exactly as before the fusion
    assert [seq for seq, _ in covered] == list(range(1, 11))
    assert list(
        messages_covered(session)
        .filter(compacted_by_id__isnull=False)
        .order_by("seq")
        .values_list("seq", "compacted_by_id")
    ) == [(s, a.pk) for s in range(1, 5)] + [(s, b.pk) for s in range(5, 11)]
    assert counters(session) == totals == recount(session)
    measure = context_measure(session=session)
    assert [s.id for s in measure.summaries] == [a.pk, b.pk]
    assert body["tokens_after"] == measure.pressure == totals[0] + a.token_count + b.token_count


def test_a_second_undo_is_a_clear_error(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert revert(owner_client, summary).status_code == 200
    events = CompactionEvent.objects.count()
    totals = counters(session)

    response = revert(owner_client, summary)

    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["code"], error["message"]) == (
        "validation_error",
        "This compaction was already undone.",
    )
    assert counters(session) == totals
    assert CompactionEvent.objects.count() == events


def test_undo_of_a_superseded_parent_is_refused(owner_client, session, fake_openai):
    a = compacted(session, fake_openai, [150, 150, 150, 150], text=summary_text(250))
    compacted(session, fake_openai, [200, 200, 200, 200], text=summary_text(250), tag="n")
    fake_openai.script(Reply(text=summary_text(80)))
    engine.compaction_manual(session=session)
    response = revert(owner_client, a)
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "summary": [f"Summary {a.pk} is superseded, not active."]
    }


def test_undo_while_a_compaction_runs_is_busy(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    with single_flight(session.pk, wait=0) as flight:
        assert flight.acquired
        response = revert(owner_client, summary)
    assert response.status_code == 409
    assert response.json()["error"]["code"] == "compaction_busy"
    summary.refresh_from_db()
    assert summary.status == "active"
    assert compacted_seqs(session) == [1, 2, 3, 4]


def test_another_user_cannot_undo_or_release(other_client, owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    before = (statuses(session), compacted_seqs(session), counters(session))
    events = CompactionEvent.objects.count()

    for path in ("revert", "release"):
        response = other_client.post(f"/api/v1/summaries/{summary.pk}/{path}/", {}, format="json")
        assert response.status_code == 404
        assert response.json()["error"]["code"] == "not_found"
    assert owner_client.post("/api/v1/summaries/999999/revert/", {}).status_code == 404

    assert (statuses(session), compacted_seqs(session), counters(session)) == before
    assert CompactionEvent.objects.count() == events


# --- the hold ----------------------------------------------------------------------------------


def test_soft_compaction_after_undo_leaves_the_undone_span_alone(
    owner_client, session, fake_openai
):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert revert(owner_client, summary).status_code == 200
    add_history(session, [50, 50], tag="n")  # 7–8; pressure 1,400 >= S
    recount(session)
    assert context_measure(session=session).pressure == 1400
    requests_before = len(summariser_requests(fake_openai))

    result = engine.compaction_soft(session_id=session.pk)

    # only 5–8 (200 tokens, under the 256-token minimum) could be taken: nothing is done
    assert (result.outcome, result.reason) == ("noop", "nothing_to_compact")
    assert len(summariser_requests(fake_openai)) == requests_before
    assert compacted_seqs(session) == []
    assert statuses(session) == [(summary.pk, "reverted", True)]


def test_release_lets_automatic_compaction_take_the_span_again(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert revert(owner_client, summary).status_code == 200
    add_history(session, [50, 50], tag="n")
    recount(session)

    response = owner_client.post(f"/api/v1/summaries/{summary.pk}/release/", {}, format="json")

    assert response.status_code == 200, response.json()
    body = response.json()
    assert (body["summary"]["held"], body["event"]["outcome"], body["event"]["reason"]) == (
        False,
        "released",
        "released_by_user",
    )
    assert statuses(session) == [(summary.pk, "reverted", False)]
    fake_openai.script(Reply(text=GOOD))
    result = engine.compaction_soft(session_id=session.pk)
    assert result.outcome == "compacted"
    assert compacted_seqs(session) == [1, 2, 3]  # toward T: 900 of 1,400 tokens
    # releasing twice is an error
    again = owner_client.post(f"/api/v1/summaries/{summary.pk}/release/", {}, format="json")
    assert again.status_code == 400


def test_at_the_hard_threshold_the_hold_is_dropped_and_reported(
    owner_client, session, fake_openai, frames, django_capture_on_commit_callbacks
):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert revert(owner_client, summary).status_code == 200
    new, reply = add_turn(session, "next", tokens=250)  # 1,300 + 250 = 1,550 >= H
    recount(session)
    fake_openai.script(Reply(text=GOOD), Reply(text="ok"))

    with django_capture_on_commit_callbacks(execute=True):
        turn_run(message_id=reply.pk)

    released = CompactionEvent.objects.get(session=session, outcome="released")
    assert (released.trigger, released.reason, released.summary_id, released.tokens_before) == (
        "hard",
        "hold_released_at_hard",
        summary.pk,
        1550,
    )
    assert any(
        f["type"] == "compaction.finished" and f["event"]["id"] == released.pk for f in frames
    )
    hard = CompactionEvent.objects.get(session=session, trigger="hard", outcome="compacted")
    again = hard.summary
    assert again.first_seq == 1
    assert statuses(session)[0] == (summary.pk, "reverted", False)
    reply.refresh_from_db()
    assert reply.status == "complete"


# --- re-summarise with a focus ------------------------------------------------------------------

KEY_LINE = "the spare key sits under flowerpot 4417."


@pytest.fixture
def builtin_session(owner):
    """The built-in models: ``builtin/recall`` chats, ``builtin/extractive`` summarises."""
    bot = BotFactory(
        owner=owner,
        model="builtin/recall",
        context_window=20_000,
        max_output_tokens=1000,
        system_prompt="",
        memory_index_size=0,
    )
    return SessionFactory(user=owner, bot=bot)


def key_history(session):
    """The key's place first, then 80 plain facts: without a focus the extractive summariser
    keeps 60 % of its input and drops the oldest of equally weighted sentences, the key."""
    message_add(session, role="user", content=KEY_LINE)
    for i in range(2, 22):
        message_add(
            session,
            role="user" if i % 2 else "assistant",
            content=f"we packed {i * 3} boxes of tea. we sent {i * 3 + 1} crates north. "
            f"we sold {i * 3 + 2} jars of honey. we kept {i * 5} tins.",
        )
    message_add(session, role="user", content="Thanks.")
    message_add(session, role="assistant", content="Welcome.")
    recount(session)


def test_resummarise_with_a_focus_keeps_the_focus_facts(owner_client, builtin_session):
    session = builtin_session
    key_history(session)
    old = engine.compaction_manual(session=session).summary
    assert (old.first_seq, old.last_seq, old.level) == (1, 21, 1)
    assert "4417" not in old.text
    snapshot = MemoryRecord.objects.get(session=session, name="snapshot_1_21")
    body = snapshot.body
    totals = counters(session)

    response = owner_client.post(
        f"/api/v1/summaries/{old.pk}/resummarise/", {"focus": "the spare key"}, format="json"
    )

    assert response.status_code == 200, response.json()
    answer = response.json()
    new = Summary.objects.get(session=session, status="active")
    assert (answer["outcome"], answer["reason"], answer["summary"]["id"]) == (
        "compacted",
        "focus",
        new.pk,
    )
    assert f"user: {KEY_LINE}" in new.text
    assert (new.first_seq, new.last_seq, new.level, new.trigger, new.focus) == (
        1,
        21,
        1,
        "resummarise",
        "the spare key",
    )
    assert new.source_tokens == old.source_tokens
    old.refresh_from_db()
    assert (old.status, old.superseded_by_id, old.superseded_at is not None) == (
        "superseded",
        new.pk,
        True,
    )
    assert answer["replaced"]["id"] == old.pk
    assert answer["replaced"]["superseded_by"] == new.pk
    assert set(
        messages_covered(session).filter(seq__lte=21).values_list("compacted_by_id", flat=True)
    ) == {new.pk}
    assert counters(session) == totals == recount(session)
    event = CompactionEvent.objects.get(session=session, trigger="resummarise")
    assert (event.outcome, event.summary_id, event.snapshot_id) == (
        "compacted",
        new.pk,
        snapshot.pk,
    )
    snapshot.refresh_from_db()
    assert (snapshot.body, snapshot.indexed) == (body, True)
    assert context_measure(session=session).pressure == totals[0] + new.token_count
    # the re-summary read the snapshot, and the context sends the new summary
    assert answer["message"] == (
        f"Re-summarised messages 1–21: {answer['tokens_before']:,} -> "
        f"{answer['tokens_after']:,} tokens."
    )


@pytest.mark.parametrize(
    ("junk", "reason", "why"),
    [
        (Reply(text="   "), "empty", "the summary came back empty"),
        (Reply(text=GOOD, finish_reason="length"), "finish_reason", "the summary was cut off"),
    ],
    ids=["empty", "cut-off"],
)
def test_gates_reject_a_bad_re_summary_and_keep_the_old_one(
    owner_client, session, fake_openai, junk, reason, why
):
    old = compacted(session, fake_openai, [300, 300, 300, 300])
    snapshot = MemoryRecord.objects.get(session=session, name="snapshot_1_4")
    totals = counters(session)
    fake_openai.script(junk)

    response = owner_client.post(
        f"/api/v1/summaries/{old.pk}/resummarise/", {"focus": "the budget"}, format="json"
    )

    assert response.status_code == 200, response.json()
    answer = response.json()
    assert (answer["outcome"], answer["reason"], answer["summary"]) == ("rejected", reason, None)
    assert answer["message"].startswith(f"Re-summary rejected: {why}")
    assert answer["message"].endswith(". The summary is unchanged.")
    assert statuses(session) == [(old.pk, "active", False)]
    assert answer["replaced"]["status"] == "active"
    assert compacted_seqs(session) == [1, 2, 3, 4]
    assert counters(session) == totals
    event = CompactionEvent.objects.get(session=session, trigger="resummarise")
    assert (event.outcome, event.reason, event.snapshot_id) == ("rejected", reason, snapshot.pk)
    assert MemoryRecord.objects.filter(pk=snapshot.pk, indexed=True).exists()
    [request] = summariser_requests(fake_openai)[1:]
    assert request["messages"][1]["content"].endswith("\nFocus: the budget")
    assert snapshot.body in request["messages"][1]["content"]


def test_resummarise_of_an_undone_summary_is_refused(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert revert(owner_client, summary).status_code == 200
    response = owner_client.post(
        f"/api/v1/summaries/{summary.pk}/resummarise/", {"focus": "x"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "summary": [f"Summary {summary.pk} is reverted, not active."]
    }


def test_another_user_cannot_resummarise(other_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    requests_before = len(fake_openai.requests)
    response = other_client.post(
        f"/api/v1/summaries/{summary.pk}/resummarise/", {"focus": "x"}, format="json"
    )
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert statuses(session) == [(summary.pk, "active", False)]
    assert len(fake_openai.requests) == requests_before
    assert not CompactionEvent.objects.filter(trigger="resummarise").exists()


# --- expand for one reply ------------------------------------------------------------------------


def expand(client, session, **body):
    return client.post(f"/api/v1/sessions/{session.pk}/expand/", body, format="json")


def test_expand_admits_the_span_verbatim_for_the_next_reply_only(
    owner_client, session, fake_openai, frames, django_capture_on_commit_callbacks
):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    before = 100 + summary.token_count

    with django_capture_on_commit_callbacks(execute=True):
        response = expand(owner_client, session, record="snapshot_1_4")

    assert response.status_code == 200, response.json()
    body = response.json()
    event = CompactionEvent.objects.get(session=session, trigger="expand")
    assert body == {
        "record": "snapshot_1_4",
        "first_seq": 1,
        "last_seq": 4,
        "messages": 4,
        "tokens": 1200,
        "replaces": [summary.pk],
        "tokens_before": before,
        "tokens_after": 1300,
        "event": body["event"],
    }
    assert (body["event"]["id"], event.outcome, event.snapshot.name, event.summary_id) == (
        event.pk,
        "expanded",
        "snapshot_1_4",
        summary.pk,
    )
    assert [f["event"]["id"] for f in frames if f["type"] == "compaction.finished"] == [event.pk]
    assert [f["type"] for f in frames].count("context.updated") == 1
    # nothing about the stored context changed: the summary still covers the span
    assert compacted_seqs(session) == [1, 2, 3, 4]
    assert statuses(session) == [(summary.pk, "active", False)]

    # the next reply: the span verbatim instead of its summary, counted inside B
    new, reply = add_turn(session, "Quote it all.", tokens=20)
    recount(session)
    built = context_build(session=session, reply=reply, record=False)
    assert built.measure.expanded_record == "snapshot_1_4"
    assert [e.seq for e in built.measure.expanded] == [1, 2, 3, 4]
    assert built.measure.summaries == []
    assert built.measure.pressure == 1320
    assert built.admission.selected_tokens <= 2000
    fake_openai.script(Reply(text="Here."), Reply(text="Again."))
    turn_run(message_id=reply.pk)  # builds again for the same reply: still expanded
    [first] = chat_requests(fake_openai)
    assert [m["content"] for m in first["messages"]] == [
        *(f"m message {i}" for i in range(6)),
        "Quote it all.",
    ]
    # what the model saw names the expanded span, and rebuilds exactly what was sent
    record = ContextRecord.objects.get(message=reply)
    [call] = record.calls
    expanded = [p for p in call["parts"] if p["ref"].get("expanded")]
    assert expanded == [
        {"kind": "history", "ref": {"expanded": "snapshot_1_4", "seqs": [[1, 4]]}, "tokens": 1200}
    ]
    assert not [p for p in call["parts"] if p["kind"] == "summary"]
    assert record_rebuild(record) == [first["messages"]]

    # the reply after: the summary again
    new2, reply2 = add_turn(session, "And now?", tokens=20)
    recount(session)
    turn_run(message_id=reply2.pk)
    [_, second] = chat_requests(fake_openai)
    assert [m["content"] for m in second["messages"]] == [
        summary.block,
        "m message 4",
        "m message 5",
        "Quote it all.",
        "Here.",
        "And now?",
    ]
    assert not ContextExpansion.objects.filter(session=session).exists()
    assert compacted_seqs(session) == [1, 2, 3, 4]


def test_expand_by_summary_id_names_its_snapshot(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    response = expand(owner_client, session, summary=summary.pk)
    assert response.status_code == 200, response.json()
    assert (response.json()["record"], response.json()["replaces"]) == (
        "snapshot_1_4",
        [summary.pk],
    )
    stored = ContextExpansion.objects.get(session=session)
    assert (stored.record, stored.first_seq, stored.last_seq, stored.reply_id) == (
        "snapshot_1_4",
        1,
        4,
        None,
    )


def test_expand_in_a_one_bot_chat_is_the_sessions_bots_and_a_second_replaces_it(
    owner_client, session, fake_openai
):
    """Keyed by (session, bot) since issue 19: in a one-bot chat the bot is the session's, so
    there is still one pending expansion, and setting another replaces it."""
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert expand(owner_client, session, summary=summary.pk).status_code == 200
    first = ContextExpansion.objects.get(session=session)

    again = expand(owner_client, session, record="snapshot_1_4")

    assert again.status_code == 200, again.json()
    [stored] = ContextExpansion.objects.filter(session=session)
    assert (stored.pk, stored.bot_id, stored.record, stored.first_seq, stored.last_seq) == (
        first.pk,
        session.bot_id,
        "snapshot_1_4",
        1,
        4,
    )


def test_expand_that_does_not_fit_sets_nothing(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    message_add(session, role="user", content="pinned", token_count=900, pinned=True)
    recount(session)
    events = CompactionEvent.objects.count()

    response = expand(owner_client, session, record="snapshot_1_4")

    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "validation_error"
    assert {k: error["details"][k] for k in ("expanded_tokens", "required_tokens")} == {
        "expanded_tokens": 1200,
        "required_tokens": 2100,
    }
    assert error["details"]["budget_tokens"] == 2000
    assert "Nothing was set." in error["message"]
    assert not ContextExpansion.objects.filter(session=session).exists()
    assert CompactionEvent.objects.count() == events
    assert statuses(session) == [(summary.pk, "active", False)]


def test_expand_bad_input_is_a_clear_error(owner_client, session, fake_openai):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    assert expand(owner_client, session).status_code == 400
    assert expand(owner_client, session, record="snapshot_1_4", summary=summary.pk).status_code == (
        400
    )
    assert expand(owner_client, session, record="snapshot_9_9").status_code == 404
    # a span already in the context (undone) has nothing to expand
    assert revert(owner_client, summary).status_code == 200
    response = expand(owner_client, session, record="snapshot_1_4")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "Messages 1–4 are not compacted: they are in the context already."
    )
    assert not ContextExpansion.objects.filter(session=session).exists()


def test_another_user_cannot_expand(other_client, other_user, session, fake_openai, small_bot):
    summary = compacted(session, fake_openai, [300, 300, 300, 300])
    theirs = SessionFactory(user=other_user, bot=BotFactory(owner=other_user))

    assert expand(other_client, session, record="snapshot_1_4").status_code == 404
    assert expand(other_client, theirs, summary=summary.pk).status_code == 404
    assert expand(other_client, theirs, record="snapshot_1_4").status_code == 404
    assert not ContextExpansion.objects.exists()
    assert not CompactionEvent.objects.filter(trigger="expand").exists()


def test_compact_in_chat_says_which_held_messages_it_passed_over(
    owner_client, session, fake_openai
):
    """After an undo, ``/compact`` leaves the restored span as it is (held): its notice says
    which messages and how to let compaction take them. It said only "Nothing to compact right
    now." while the history was plainly there."""
    summary = compacted(session, fake_openai, [200, 200])  # 1–2 compacted; 3–4 the exchange
    assert revert(owner_client, summary).status_code == 200

    response = owner_client.post(
        f"/api/v1/sessions/{session.pk}/messages/", {"content": "/compact"}, format="json"
    )

    assert response.status_code == 200
    assert response.json()["notice"]["content"] == (
        "Nothing to compact right now. Messages 1–2 stay as they are after an undo; choose "
        "“Let automatic compaction take it again” on their summary to compact them."
    )
    assert statuses(session) == [(summary.pk, "reverted", True)]


def test_a_fusion_leaves_the_summaries_of_a_pending_expansion_alone(
    owner_client, session, fake_openai
):
    """Reported in a room: a span expanded for the next reply, then a blocking compaction before
    one of that reply's calls fused its summary with a later one. The call was sent the span
    verbatim *and* the fused summary over it (the expansion replaces only the summaries lying
    wholly inside its span), and real history was trimmed to make room for the copy."""
    from compaction.engine.fusion import fusion_due
    from compaction.measure import session_budget

    long_summary = " ".join([GOOD] * 12)  # ~300 tokens: two of them pass 20 % of B (400)
    first = compacted(session, fake_openai, [300, 300, 300, 300], text=long_summary)
    second = compacted(session, fake_openai, [300, 300, 300, 300], text=long_summary, tag="n")
    budget = session_budget(session)
    assert [s.pk for s in fusion_due(session, budget)] == [first.pk, second.pk]

    assert expand(owner_client, session, summary=first.pk).status_code == 200
    assert fusion_due(session, budget) == []  # the other one alone is no fusion
    # The reply's build is past H (1,500): its blocking compaction takes history, and fuses
    # nothing over the expanded span.
    add_history(session, [200, 200], tag="o")
    _, reply = add_turn(session, "Quote it all.", tokens=20)
    recount(session)
    fake_openai.script(Reply(text=GOOD))
    built = context_build(session=session, reply=reply, record=False)
    assert {e.seq for e in built.measure.expanded} == {1, 2, 3, 4}
    summaries = Summary.objects.filter(pk__in=[s.id for s in built.measure.summaries])
    assert [(s.first_seq > 4, s.status) for s in summaries] == [(True, "active")] * len(summaries)
    assert not CompactionEvent.objects.filter(session=session, trigger="fusion").exists()


def test_a_blocking_pass_that_leaves_the_context_past_h_fuses_in_the_same_run(session, fake_openai):
    """A blocking pass left a second summary and the context still past H (the current turn is
    not compactable): the call waited for one pass and, its fixed part over B, lost its recall
    round, though the fusion the next build ran would have made it fit. The fusion now comes in
    the same run."""
    long_summary = " ".join([GOOD] * 8)
    compacted(session, fake_openai, [300, 300, 300, 300], text=long_summary)
    add_history(session, [300, 300], tag="n")
    new, reply = add_turn(session, "the new question", tokens=1150)
    recount(session)
    measure = context_measure(session=session, new_message=new, before_seq=reply.seq)
    assert measure.pressure >= measure.budget.hard
    fake_openai.script(Reply(text=long_summary), Reply(text=GOOD))

    result = engine.compaction_hard(session=session, measure=measure)

    events = CompactionEvent.objects.filter(session=session).order_by("id")
    assert list(events.values_list("trigger", "outcome")) == [
        ("manual", "compacted"),
        ("hard", "compacted"),
        ("fusion", "compacted"),
    ]
    assert result.event == events.last()
    assert result.tokens_after < measure.budget.hard
    assert Summary.objects.filter(session=session, status="active").count() == 1
