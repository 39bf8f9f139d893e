"""GET /api/v1/messages/{id}/fit/ (issue 18, defect 8): whether a user message would fit if sent
again now, and by how many tokens it does not: what a reply that failed as ``context_too_large``
offers instead of a plain Retry ("Compact and retry", "Edit to shorten")."""

import pytest

from tests.factories import BotFactory, SessionFactory, message_add

pytestmark = pytest.mark.django_db


@pytest.fixture
def session(owner):
    # W 2200, R 200 -> B 2000; no system prompt, no index: the fixed part is the message + pins.
    bot = BotFactory(
        owner=owner,
        context_window=2200,
        max_output_tokens=200,
        system_prompt="",
        memory_index_size=0,
    )
    return SessionFactory(user=owner, bot=bot)


def _fit(client, message):
    return client.get(f"/api/v1/messages/{message.pk}/fit/")


def test_a_message_over_the_budget_says_by_how_much(owner_client, session):
    message_add(session, role="user", content="earlier", token_count=400)
    too_long = message_add(session, role="user", content="long", token_count=2500)
    message_add(session, role="assistant", content="", token_count=0, status="failed")
    response = _fit(owner_client, too_long)
    assert response.status_code == 200
    assert response.json() == {
        "message": too_long.pk,
        "budget_tokens": 2000,
        "required_tokens": 2500,
        "over_tokens": 500,
        "fits": False,
    }


def test_pins_count_and_a_message_that_fits_is_zero_over(owner_client, session):
    message_add(session, role="user", content="pinned", token_count=300, pinned=True)
    almost = message_add(session, role="user", content="almost", token_count=1800)
    assert _fit(owner_client, almost).json() == {
        "message": almost.pk,
        "budget_tokens": 2000,
        "required_tokens": 2100,
        "over_tokens": 100,
        "fits": False,
    }
    fits = message_add(session, role="user", content="fits", token_count=1700)
    assert _fit(owner_client, fits).json() == {
        "message": fits.pk,
        "budget_tokens": 2000,
        "required_tokens": 2000,
        "over_tokens": 0,
        "fits": True,
    }


def test_someone_elses_message_is_not_found(other_client, session):
    message = message_add(session, role="user", content="secret", token_count=2500)
    response = _fit(other_client, message)
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"
    assert "2500" not in response.content.decode()


def test_unknown_id_and_a_reply_are_refused(owner_client, session):
    reply = message_add(session, role="assistant", content="hi", token_count=5)
    assert owner_client.get("/api/v1/messages/999999/fit/").status_code == 404
    response = _fit(owner_client, reply)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": {"message": ["Only a chat message you wrote can be checked."]},
    }


def test_signed_out_is_refused(client, session):
    message = message_add(session, role="user", content="x", token_count=5)
    assert client.get(f"/api/v1/messages/{message.pk}/fit/").status_code == 401
