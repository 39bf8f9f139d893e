"""A call to ``/v1/chat/completions`` that waits for its reply is a heavy request
(docs/security.md, "Heavy requests"), as a ``wait: true`` send is: it holds one of its user's
``HEAVY_REQUESTS_PER_USER`` slots, and one more is refused before anything is stored. Before,
one user's 80 concurrent waiting calls held the 64 threads every user's waiting calls share
(``openai_api.views.WAIT_THREADS``): another user's one-message call took 13.0 s instead of
0.7 s (measured in embedded mode; 40 calls: 0.85 s)."""

import contextlib
import threading

import openai
import pytest
from django.conf import settings

from bots.models import Message
from chat_platform.heavy import heavy_request
from tests.factories import BotFactory, UserFactory
from tests.fakeopenai import Reply
from tests.openai_api.conftest import new_key, sdk

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def user(db):
    return UserFactory(username="apiuser")


@pytest.fixture
def fake_bot(user, fake_openai):
    return BotFactory(
        owner=user, name="Writer", model="openai/fake-model", api_base=fake_openai.url
    )


@contextlib.contextmanager
def every_slot_held(user):
    """All of ``user``'s heavy-request slots held by other requests (threads) meanwhile; the
    stack's web process counts them in the same Redis."""
    entered, leave = threading.Semaphore(0), threading.Event()

    def hold():
        with heavy_request(user_id=user.pk, kind="test"):
            entered.release()
            leave.wait(60)

    holders = [threading.Thread(target=hold) for _ in range(settings.HEAVY_REQUESTS_PER_USER)]
    for holder in holders:
        holder.start()
    for _ in holders:
        assert entered.acquire(timeout=10)
    try:
        yield
    finally:
        leave.set()
        for holder in holders:
            holder.join(10)


def test_a_waiting_call_past_the_users_heavy_limit_is_refused_and_stores_nothing(
    stack, user, fake_bot, fake_openai
):
    _, key = new_key(user)
    client = sdk(stack, key)
    with every_slot_held(user), pytest.raises(openai.RateLimitError) as caught:
        client.chat.completions.create(
            model="writer", messages=[{"role": "user", "content": "one"}]
        )
    assert caught.value.body["code"] == "rate_limit_exceeded"
    assert caught.value.response.headers["Retry-After"] == "5"
    assert not Message.objects.filter(content="one").exists()
    assert fake_openai.requests == []
    # The slots are back: the same call runs, and gives its own slot back when it ends.
    fake_openai.script(Reply(text="Hello."), Reply(text="Again."))
    answer = client.chat.completions.create(
        model="writer", messages=[{"role": "user", "content": "one"}]
    )
    assert answer.choices[0].message.content == "Hello."
    with every_slot_held(user):
        pass  # all of them could be taken again: the call held none after it answered
