"""Across processes (uvicorn + a Celery worker with eight threads): a room seat's soft compaction
waits on the queue until the round's next reply has finished, instead of running beside it
(``compaction.services.soft_compaction_yields``; measured by ``bench/rooms.py --stack``)."""

import threading
import time

import httpx
import pytest
from rest_framework.authtoken.models import Token

from bots.models import Message
from compaction.engine import SUMMARY_INSTRUCTIONS
from compaction.models import CompactionEvent
from tests.factories import BotFactory, SessionFactory, UserFactory
from tests.fakeopenai import Reply
from turns.services.participants import participant_add, session_reply_mode_set

pytestmark = [pytest.mark.crossprocess, pytest.mark.django_db(transaction=True)]

SLOW = ["Critic ", "takes ", "its ", "time."]
CHUNK_DELAY = 0.4


def _wait(predicate, what: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def test_a_seats_soft_compaction_waits_for_the_next_bots_reply(real_stack, fake_openai):
    user = UserFactory()
    token = Token.objects.create(user=user).key
    fields = {
        "owner": user,
        "model": "openai/fake-model",
        "api_base": fake_openai.url,
        "max_output_tokens": 200,
    }
    # Planner: B 1,300, soft from 650; its summariser is the fake model, so its call is seen.
    planner = BotFactory(
        name="Planner", system_prompt="You are Planner.", context_window=1500,
        compaction_model="openai/fake-model", **fields,
    )  # fmt: skip
    critic = BotFactory(
        name="Critic", system_prompt="You are Critic.", context_window=8000, **fields
    )
    session = SessionFactory(user=user, bot=planner)
    participant_add(user=user, session_id=session.pk, bot_id=critic.pk)
    session_reply_mode_set(user=user, session_id=session.pk, reply_mode="all")

    arrivals: list[tuple[str, float]] = []
    lock = threading.Lock()

    def responder(body: dict) -> Reply:
        first = body["messages"][0]["content"]
        who = {SUMMARY_INSTRUCTIONS: "summariser"}.get(first, first.split()[-1].rstrip("."))
        with lock:
            arrivals.append((who, time.monotonic()))
        if who == "summariser":
            return Reply(text="Summary: parcels ship to the depots listed, on the days named.")
        if who == "Critic" and len([w for w, _ in arrivals if w == "Critic"]) == 2:  # noqa: PLR2004
            return Reply(text="".join(SLOW), chunks=SLOW, delay_between_chunks=CHUNK_DELAY)
        return Reply(text=f"{who} noted it.")

    fake_openai.responder = responder
    url = f"{real_stack}/api/v1/sessions/{session.pk}/messages/"
    headers = {"Authorization": f"Token {token}"}
    note = "The parcel for order {n} ships to depot {n} on day {n}. " + "We talked a while. " * 65

    def send_round(n: int) -> None:
        sent = httpx.post(url, json={"content": note.format(n=n)}, headers=headers, timeout=120)
        assert sent.status_code == 202, sent.text  # noqa: PLR2004
        _wait(
            lambda: (
                Message.objects.filter(
                    session=session, role="assistant", status="complete", kind="chat"
                ).count()
                == 2 * n
            ),
            f"round {n}'s replies",
        )

    send_round(1)
    assert [w for w, _ in arrivals] == ["Planner", "Critic"]
    send_round(2)
    _wait(
        lambda: CompactionEvent.objects.filter(
            session=session, bot=planner, outcome="compacted"
        ).exists(),
        "Planner's compaction",
    )

    names = [w for w, _ in arrivals]
    assert names == ["Planner", "Critic", "Planner", "Critic", "summariser"]
    critic_started = arrivals[3][1]
    summariser_started = arrivals[4][1]
    # Critic's round-2 reply streamed for 4 x 0.4 s; Planner's compaction, due since Planner's
    # round-2 reply ended, started only after it (it used to start while Critic streamed).
    assert summariser_started - critic_started >= len(SLOW) * CHUNK_DELAY - 0.1
    event = CompactionEvent.objects.get(session=session, bot=planner, outcome="compacted")
    assert event.trigger == "soft"
