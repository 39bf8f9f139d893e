"""One reply at a time per session (issue 18, defect 1; docs/rooms.md): a message sent while a
reply runs is stored at once and answered after that reply ends, seeing it."""

from datetime import timedelta
from unittest import mock

import pytest
from django.utils import timezone

from bots import exchanges, transitions
from bots.models import Message
from tests.fakeopenai import Reply
from turns import dispatch, turn, watchdog
from turns.services.send import do_message_pair_create

pytestmark = pytest.mark.django_db(transaction=True)


def _exchange(session, content):
    result = do_message_pair_create(session=session, content=content, client_id=None)
    return result.user_message, result.assistant_message


def _recall_round(reply):
    """One recall round of ``reply`` stored before it: its call and two results."""
    return exchanges.recall_exchange_store(
        reply=reply,
        call={"content": "", "tool_calls": [{"id": "c1"}], "token_count": 5, "model": "m"},
        results=[
            {"content": "a", "tool_call_id": "c1", "tool_name": "recall", "token_count": 1},
            {"content": "b", "tool_call_id": "c1", "tool_name": "recall", "token_count": 1},
        ],
    )


def _status(message):
    return Message.objects.values_list("status", flat=True).get(pk=message.pk)


def test_a_reply_behind_an_unfinished_one_is_not_claimed_until_that_one_ends(fake_session):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")

    # the first is still pending: the second waits
    assert transitions.reply_claim(message_id=second.pk) is None
    assert _status(second) == "pending"
    # the first runs: the second still waits
    assert transitions.reply_claim(message_id=first.pk).pk == first.pk
    assert transitions.reply_claim(message_id=second.pk) is None
    assert _status(second) == "pending"
    # the first ends: now the second is claimed
    Message.objects.filter(pk=first.pk).update(status="complete")
    assert transitions.reply_claim(message_id=second.pk).pk == second.pk
    assert _status(second) == "streaming"


def test_a_failed_or_interrupted_earlier_reply_does_not_hold_the_queue(fake_session):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    _, third = _exchange(fake_session, "three")
    Message.objects.filter(pk=first.pk).update(status="failed")
    Message.objects.filter(pk=second.pk).update(status="interrupted")
    assert transitions.reply_claim(message_id=third.pk).pk == third.pk


def test_replies_of_other_sessions_do_not_hold_the_queue(fake_session, fake_bot, owner):
    from tests.factories import SessionFactory

    other = SessionFactory(user=owner, bot=fake_bot)
    _exchange(other, "elsewhere")
    _, mine = _exchange(fake_session, "here")
    assert transitions.reply_claim(message_id=mine.pk).pk == mine.pk


def test_the_second_turn_runs_after_the_first_and_sees_its_answer(
    fake_session, fake_openai, eager_tasks
):
    fake_openai.script(Reply(text="First answer."), Reply(text="Second answer."))
    user1, first = _exchange(fake_session, "Question one")
    user2, second = _exchange(fake_session, "Question two")

    # The second's task arrives first (two workers): it finds the first unfinished and waits.
    turn.turn_run(message_id=second.pk)
    assert _status(second) == "pending"
    assert fake_openai.requests == []
    # The first runs and, when it ends, hands the second over (eager: it runs right away).
    turn.turn_run(message_id=first.pk)

    first.refresh_from_db()
    second.refresh_from_db()
    assert (first.status, first.content) == ("complete", "First answer.")
    assert (second.status, second.content) == ("complete", "Second answer.")
    assert len(fake_openai.requests) == 2
    assert fake_openai.requests[0]["messages"][1:] == [{"role": "user", "content": "Question one"}]
    assert fake_openai.requests[1]["messages"][1:] == [
        {"role": "user", "content": "Question one"},
        {"role": "assistant", "content": "First answer."},
        {"role": "user", "content": "Question two"},
    ]
    assert list(
        Message.objects.filter(session=fake_session).order_by("seq").values_list("seq", "content")
    ) == [(1, "Question one"), (2, "First answer."), (3, "Question two"), (4, "Second answer.")]


def test_a_failed_first_reply_still_hands_the_queue_over(fake_session, fake_openai, eager_tasks):
    fake_openai.script(Reply(status=400, error_message="bad request"), Reply(text="Second."))
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    turn.turn_run(message_id=first.pk)
    assert _status(first) == "failed"
    second.refresh_from_db()
    assert (second.status, second.content) == ("complete", "Second.")


def test_hand_over_dispatches_only_the_earliest_pending_reply(fake_session):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    _, third = _exchange(fake_session, "three")
    with mock.patch.object(dispatch, "turn_dispatch", return_value=True) as handed:
        # the first is pending: it is the one to run
        assert dispatch.turn_dispatch_next(fake_session.pk) is True
        assert handed.call_args_list == [mock.call(first.pk)]
        # the first streams: nothing to hand over
        transitions.reply_claim(message_id=first.pk)
        assert dispatch.turn_dispatch_next(fake_session.pk) is False
        # the first ended: the second, not the third
        Message.objects.filter(pk=first.pk).update(status="complete")
        assert dispatch.turn_dispatch_next(fake_session.pk) is True
        assert handed.call_args_list == [mock.call(first.pk), mock.call(second.pk)]
    assert _status(third) == "pending"


def test_stop_stops_the_running_reply_only(fake_session):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    transitions.reply_claim(message_id=first.pk)

    assert transitions.replies_stop_request(session=fake_session) == 1
    assert list(
        Message.objects.filter(pk__in=[first.pk, second.pk])
        .order_by("seq")
        .values_list("stop_requested", flat=True)
    ) == [True, False]


def test_a_recall_exchange_moves_the_queued_messages_after_the_reply(fake_session):
    user1, first = _exchange(fake_session, "one")
    user2, second = _exchange(fake_session, "two")
    first = transitions.reply_claim(message_id=first.pk)

    stored, moved = _recall_round(first)

    rows = list(
        Message.objects.filter(session=fake_session).order_by("seq").values_list("seq", "pk")
    )
    assert rows == [
        (1, user1.pk),
        (2, stored[0].pk),
        (3, stored[1].pk),
        (4, stored[2].pk),
        (5, first.pk),
        (6, user2.pk),
        (7, second.pk),
    ]
    assert [(m.pk, m.seq) for m in moved] == [(user2.pk, 6), (second.pk, 7)]
    fake_session.refresh_from_db()
    assert fake_session.last_seq == 7


def test_watchdog_leaves_a_queued_reply_behind_a_live_one_alone(fake_session, settings):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    transitions.reply_claim(message_id=first.pk)
    long_ago = timezone.now() - timedelta(seconds=settings.CHAT_ORPHAN_AFTER_SECONDS + 60)
    Message.objects.filter(pk=second.pk).update(
        dispatched_at=long_ago, created_at=long_ago, updated_at=long_ago
    )

    with mock.patch.object(dispatch, "turn_dispatch", return_value=True) as handed:
        assert watchdog.replies_redispatch() == 0
        assert watchdog.messages_sweep_orphans() == 0
        assert handed.call_count == 0
    assert _status(second) == "pending"


def test_a_reply_the_watchdog_interrupts_hands_the_queue_over(fake_session, settings):
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    transitions.reply_claim(message_id=first.pk)
    dead = timezone.now() - timedelta(seconds=settings.CHAT_HEARTBEAT_TIMEOUT_SECONDS + 5)
    Message.objects.filter(pk=first.pk).update(heartbeat_at=dead)

    with mock.patch.object(dispatch, "turn_dispatch", return_value=True) as handed:
        assert watchdog.replies_interrupt_dead() == 1
    assert handed.call_args_list == [mock.call(second.pk)]
    assert _status(first) == "interrupted"


def test_a_compact_commands_notice_follows_it_after_a_recall_exchange_moved_it(
    fake_session, monkeypatch
):
    """``/compact`` while a reply runs: the reply's recall or tool round, stored while the
    compaction runs, moves the command up; its notice still lands right after it. It was
    written at the command's first seq + 1, taken by then: 500, and the command kept no
    notice."""
    from compaction.engine import RunResult
    from turns.services import send

    user1, first = _exchange(fake_session, "one")
    first = transitions.reply_claim(message_id=first.pk)
    stored: list[Message] = []

    def compaction_meanwhile(*, session, focus, must_lower):
        stored.extend(_recall_round(first)[0])
        return RunResult("noop", "nothing_to_compact")

    monkeypatch.setattr(send, "compaction_manual", compaction_meanwhile)
    result = send.session_compact_command(
        session=fake_session, text="/compact", client_id=None, focus=""
    )

    rows = list(
        Message.objects.filter(session=fake_session).order_by("seq").values_list("seq", "pk")
    )
    assert rows == [
        (1, user1.pk),
        (2, stored[0].pk),
        (3, stored[1].pk),
        (4, stored[2].pk),
        (5, first.pk),
        (6, result.user_message.pk),
        (7, result.notice.pk),
    ]
    assert result.notice.seq == 7
    fake_session.refresh_from_db()
    assert fake_session.last_seq == 7


@pytest.mark.parametrize("verification", ["optional", "mandatory"])
def test_replies_queued_for_an_account_that_may_no_longer_sign_in_fail_without_a_call(
    fake_session, fake_openai, eager_tasks, settings, verification
):
    """Sent while the account could sign in, claimed after it was deactivated (or, under
    mandatory email verification, while its address is unverified): each reply ends failed
    ``not_authenticated`` and hands the queue over, and no provider is called."""
    settings.ACCOUNT_EMAIL_VERIFICATION = verification
    _, first = _exchange(fake_session, "one")
    _, second = _exchange(fake_session, "two")
    user = fake_session.user
    if verification == "optional":
        user.is_active = False
        user.save(update_fields=["is_active"])
        reason = "This account is inactive or waiting for approval."
    else:
        reason = "This account's email address is not verified yet: confirm it first."

    turn.turn_run(message_id=first.pk)  # the second is handed over (and run) when it ends
    ended = Message.objects.filter(pk__in=[first.pk, second.pk]).order_by("seq")
    assert [(m.status, m.error_code, m.error_message, m.content) for m in ended] == [
        ("failed", "not_authenticated", f"{reason} The reply was not written.", "")
    ] * 2
    assert fake_openai.requests == []
