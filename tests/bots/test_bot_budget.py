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


# Issue 32, item 5: a hand-set background threshold lies 5 % of B above where compaction lands.
# W 10000, R 1000 -> B 9000; kept 40 % -> T 3600; the threshold must be at least 3600 + 450.
LANDS_40 = (
    "compaction lands at 3,600 tokens (40 % of this bot's budget of 9,000), and the threshold "
    "must lie at least 5 % of the budget (450 tokens) above that, or the context would be over "
    "it again a turn or two after every compaction."
)
WINDOW = {"context_window": 10_000, "max_output_tokens": 1000}


def test_a_threshold_below_the_landing_point_plus_the_margin_is_refused(owner_client):
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", **WINDOW, "compaction_threshold": 4049}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["details"] == {
        "compaction_threshold": [
            f"The threshold must be at least 4,050 tokens: {LANDS_40} Raise it, lower kept "
            "after compaction, or set 0 (automatic)."
        ]
    }
    assert Bot.objects.count() == 0
    for body in (
        {"compaction_threshold": 4050},
        {"compaction_threshold": 0, "compaction_kept_percent": 70},  # automatic: not checked
        {"compaction_threshold": 1000, "compaction_enabled": False},  # off: nothing acts
    ):
        ok = owner_client.post("/api/v1/bots/", {"name": "b", **WINDOW, **body}, format="json")
        assert ok.status_code == 201, ok.json()


def test_kept_percent_is_named_when_it_is_what_changed_or_what_must_change(owner_client, owner):
    bot = BotFactory(owner=owner, **WINDOW, compaction_threshold=4500, compaction_kept_percent=40)
    raised = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"compaction_kept_percent": 46}, format="json"
    )
    assert raised.status_code == 400
    assert raised.json()["error"]["details"] == {
        "compaction_kept_percent": [
            "Kept after compaction is too high for a threshold of 4,500 tokens: compaction lands "
            "at 4,140 tokens (46 % of this bot's budget of 9,000), and the threshold must lie at "
            "least 5 % of the budget (450 tokens) above that, or the context would be over it "
            "again a turn or two after every compaction. Lower it, or raise the threshold "
            "(0 = automatic)."
        ]
    }
    # Above the hard threshold (6,750) a threshold acts as it: no threshold could satisfy 71 %.
    high = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/",
        {"compaction_kept_percent": 71, "compaction_threshold": 9000},
        format="json",
    )
    assert high.status_code == 400
    assert high.json()["error"]["details"] == {
        "compaction_kept_percent": [
            "Kept after compaction is too high: compaction lands at 6,390 tokens (71 % of this "
            "bot's budget of 9,000), and the threshold must lie at least 5 % of the budget (450 "
            "tokens) above that, or the context would be over it again a turn or two after every "
            "compaction. That is above where it compacts before replying (6,750). Lower it."
        ]
    }
    bot.refresh_from_db()
    assert (bot.compaction_threshold, bot.compaction_kept_percent) == (4500, 40)


def test_the_budgets_worked_example_is_a_bot_the_api_accepts(owner_client, owner):
    """docs/compaction.md's worked example: B 200,000 (kept 40 %: T 80,000), a threshold of
    90,000 moves only S; 500,000 is clamped to H. Both save, and the context report says so.
    With a 10 % margin the first was refused (at least 100,000)."""
    window = {"context_window": 201_024, "max_output_tokens": 1024}
    for threshold, soft in ((90_000, 90_000), (500_000, 150_000)):
        created = owner_client.post(
            "/api/v1/bots/",
            {"name": f"t{threshold}", **window, "compaction_threshold": threshold},
            format="json",
        )
        assert created.status_code == 201, created.json()
        session = owner_client.post(
            "/api/v1/sessions/", {"bot": created.json()["id"]}, format="json"
        ).json()
        report = owner_client.get(f"/api/v1/sessions/{session['id']}/context/").json()
        assert (report["budget"], report["soft"], report["hard"], report["target"]) == (
            200_000,
            soft,
            150_000,
            80_000,
        )
    refused = owner_client.post(
        "/api/v1/bots/",
        {"name": "low", **window, "compaction_threshold": 89_999},
        format="json",
    )
    assert refused.status_code == 400
    assert list(refused.json()["error"]["details"]) == ["compaction_threshold"]


def test_a_bot_saved_before_the_rule_is_renamed_as_it_is(owner_client, owner):
    """A saved bot whose threshold lies under today's margin (made before the rule) can still
    be renamed; a change to what S or T is computed from is checked."""
    bot = BotFactory(owner=owner, **WINDOW, compaction_threshold=3700)  # under 4,050
    renamed = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"name": "renamed"}, format="json")
    assert renamed.status_code == 200, renamed.json()
    assert renamed.json()["name"] == "renamed"
    moved = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"max_output_tokens": 1001}, format="json"
    )
    assert moved.status_code == 400
    assert list(moved.json()["error"]["details"]) == ["compaction_threshold"]
    bot.refresh_from_db()
    assert (bot.name, bot.max_output_tokens, bot.compaction_threshold) == ("renamed", 1000, 3700)
