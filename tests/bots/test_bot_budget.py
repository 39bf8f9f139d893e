"""Issue 7, item 10: a bot whose budget B = min(W - R, CAP) would be 0 can never answer; it is
refused on create and update with a validation_error on the field to change."""

import pytest

from bots.models import Bot
from tests.factories import BotFactory

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def _openai_listed(settings):
    """The owner here is not staff: openai/ without an api_base means OpenAI's own endpoint,
    which the operator must list for users (docs/bots.md; docs/security.md)."""
    settings.PROVIDER_API_BASES = ["https://api.openai.com/v1"]


def _message(reserve: int, window: int) -> list[str]:
    return [
        f"max_output_tokens ({reserve:,}) must be smaller than the context window "
        f"({window:,} tokens), or no message could ever be sent."
    ]


@pytest.mark.parametrize(
    ("body", "details"),
    [
        (
            {"context_window": 1000, "max_output_tokens": 1000},
            {"max_output_tokens": _message(1000, 1000)},
        ),
        ({"context_window": 500}, {"context_window": _message(1024, 500)}),
        ({"max_output_tokens": 200_000}, {"max_output_tokens": _message(200_000, 200_000)}),
        # context_window 0 with a model litellm knows: its max_input_tokens (128000) is W
        (
            {"model": "openai/gpt-4o", "max_output_tokens": 128_000},
            {"max_output_tokens": _message(128_000, 128_000)},
        ),
    ],
)
def test_create_refuses_a_bot_with_no_budget(owner_client, body, details):
    response = owner_client.post("/api/v1/bots/", {"name": "b", **body}, format="json")
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        "details": details,
    }
    assert Bot.objects.count() == 0


def test_the_cap_counts_too(owner_client, settings):
    settings.CONTEXT_ABSOLUTE_CAP_TOKENS = 1000
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", "max_output_tokens": 1000}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {"max_output_tokens": _message(1000, 1000)}
    assert Bot.objects.count() == 0


@pytest.mark.parametrize(
    "body",
    [
        {"context_window": 1025, "max_output_tokens": 1024},  # B = 1
        {"model": "openai/gpt-4o", "max_output_tokens": 127_999},
        {"max_output_tokens": 199_999},
    ],
)
def test_smallest_usable_budgets_are_accepted(owner_client, body):
    response = owner_client.post("/api/v1/bots/", {"name": "b", **body}, format="json")
    assert response.status_code == 201, response.json()


def test_update_names_the_field_that_was_changed(owner_client, owner):
    bot = BotFactory(owner=owner, context_window=2000, max_output_tokens=1024)

    raised = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"max_output_tokens": 2000}, format="json"
    )
    assert raised.status_code == 400
    assert raised.json()["error"]["details"] == {"max_output_tokens": _message(2000, 2000)}

    shrunk = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"context_window": 1024}, format="json")
    assert shrunk.status_code == 400
    assert shrunk.json()["error"]["details"] == {"context_window": _message(1024, 1024)}

    bot.refresh_from_db()
    assert (bot.context_window, bot.max_output_tokens) == (2000, 1024)
    ok = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"name": "still fine"}, format="json")
    assert ok.status_code == 200


# Issue 32, item 5: a hand-set background threshold lies 10 % of B above where compaction lands.
# W 10000, R 1000 -> B 9000; kept 40 % -> T 3600; the threshold must be at least 3600 + 900.
LANDS_40 = (
    "compaction lands at 3,600 tokens (40 % of this bot's budget of 9,000), and the threshold "
    "must lie at least 10 % of the budget (900 tokens) above that, or the context would be over "
    "it again a turn or two after every compaction."
)
WINDOW = {"context_window": 10_000, "max_output_tokens": 1000}


def test_a_threshold_below_the_landing_point_plus_the_margin_is_refused(owner_client):
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", **WINDOW, "compaction_threshold": 4499}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "compaction_threshold": [
            f"The threshold must be at least 4,500 tokens: {LANDS_40} Raise it, lower kept "
            "after compaction, or set 0 (automatic)."
        ]
    }
    assert Bot.objects.count() == 0
    for body in (
        {"compaction_threshold": 4500},
        {"compaction_threshold": 0, "compaction_kept_percent": 70},  # automatic: not checked
        {"compaction_threshold": 1000, "compaction_enabled": False},  # off: nothing acts
    ):
        ok = owner_client.post("/api/v1/bots/", {"name": "b", **WINDOW, **body}, format="json")
        assert ok.status_code == 201, ok.json()


def test_kept_percent_is_named_when_it_is_what_changed_or_what_must_change(owner_client, owner):
    bot = BotFactory(owner=owner, **WINDOW, compaction_threshold=4500, compaction_kept_percent=40)
    raised = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"compaction_kept_percent": 45}, format="json"
    )
    assert raised.status_code == 400
    assert raised.json()["error"]["details"] == {
        "compaction_kept_percent": [
            "Kept after compaction is too high for a threshold of 4,500 tokens: compaction lands "
            "at 4,050 tokens (45 % of this bot's budget of 9,000), and the threshold must lie at "
            "least 10 % of the budget (900 tokens) above that, or the context would be over it "
            "again a turn or two after every compaction. Lower it, or raise the threshold "
            "(0 = automatic)."
        ]
    }
    # Above the hard threshold (6,750) a threshold acts as it: no threshold could satisfy 70 %.
    high = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/",
        {"compaction_kept_percent": 70, "compaction_threshold": 9000},
        format="json",
    )
    assert high.status_code == 400
    assert high.json()["error"]["details"] == {
        "compaction_kept_percent": [
            "Kept after compaction is too high: compaction lands at 6,300 tokens (70 % of this "
            "bot's budget of 9,000), and the threshold must lie at least 10 % of the budget (900 "
            "tokens) above that, or the context would be over it again a turn or two after every "
            "compaction. That is above where it compacts before replying (6,750). Lower it."
        ]
    }
    bot.refresh_from_db()
    assert (bot.compaction_threshold, bot.compaction_kept_percent) == (4500, 40)
