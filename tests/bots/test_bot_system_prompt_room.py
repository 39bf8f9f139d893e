"""A bot whose system prompt leaves no room for the conversation is refused (turns/bot_validation.py
``check_bot_system_prompt``): a non-empty prompt must stay under H = 75 % of B, counted by the one
token counter; on create and update, through the API, the bot pages and the admin."""

import pytest
from django.test import Client

from bots.models import Bot
from chat_platform.llm.tokens import count_message_tokens
from tests.bots.test_bot_pages import post_data
from tests.bots.test_provider_policy import _admin_form
from tests.factories import BotFactory, UserFactory

pytestmark = pytest.mark.django_db

MODEL = "builtin/recall"
# context_window 2000, max_output_tokens 1000: B = 1000, H = 750
SMALL = {"context_window": 2000, "max_output_tokens": 1000}


def _prompt(tokens: int) -> str:
    """A system prompt costing exactly ``tokens`` (text + the per-message overhead)."""
    text = "word" + " word" * (tokens - 5)
    assert count_message_tokens(text, model=MODEL) == tokens
    return text


def _refusal(tokens: int, budget: int = 1000, limit: int = 750) -> list[str]:
    return [
        f"The system prompt is {tokens:,} tokens; this bot's budget is {budget:,} tokens and the "
        f"system prompt must stay under {limit:,} (75 % of it), or no room is left for the "
        "conversation. Shorten the prompt or give the bot a larger context window."
    ]


def test_a_5_mb_system_prompt_is_refused_on_create(owner_client):
    prompt = ("All work and no play makes Jack a dull boy. " * 120_000).strip()  # 5.3 MB
    tokens = count_message_tokens(prompt, model=MODEL)
    response = owner_client.post(
        "/api/v1/bots/", {"name": "b", "system_prompt": prompt}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "code": "validation_error",
        "message": "The request is not valid.",
        # context_window 0 for builtin/recall: W = CAP 200,000, R 1,024, B 198,976, H 149,232
        "details": {"system_prompt": _refusal(tokens, budget=198_976, limit=149_232)},
    }
    assert Bot.objects.count() == 0


def test_the_limit_is_exactly_under_h(owner_client):
    refused = owner_client.post(
        "/api/v1/bots/", {"name": "b", "system_prompt": _prompt(750), **SMALL}, format="json"
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["details"] == {"system_prompt": _refusal(750)}
    assert Bot.objects.count() == 0

    accepted = owner_client.post(
        "/api/v1/bots/", {"name": "b", "system_prompt": _prompt(749), **SMALL}, format="json"
    )
    assert accepted.status_code == 201, accepted.json()


def test_update_refuses_a_longer_prompt_and_a_smaller_budget_naming_what_changed(
    owner_client, owner
):
    prompt = _prompt(600)
    bot = BotFactory(owner=owner, system_prompt=prompt, **SMALL)

    longer = owner_client.patch(
        f"/api/v1/bots/{bot.pk}/", {"system_prompt": _prompt(800)}, format="json"
    )
    assert longer.status_code == 400
    assert longer.json()["error"]["details"] == {"system_prompt": _refusal(800)}

    # B 1000 -> 700 (H 525): the prompt of 600 no longer leaves room; the changed field is named
    shrunk = owner_client.patch(f"/api/v1/bots/{bot.pk}/", {"context_window": 1700}, format="json")
    assert shrunk.status_code == 400
    assert shrunk.json()["error"]["details"] == {
        "context_window": _refusal(600, budget=700, limit=525)
    }
    bot.refresh_from_db()
    assert (bot.system_prompt, bot.context_window) == (prompt, 2000)


def test_an_empty_prompt_is_never_refused(owner_client):
    response = owner_client.post(
        "/api/v1/bots/",
        {"name": "b", "system_prompt": "", "context_window": 1025, "max_output_tokens": 1024},
        format="json",
    )
    assert response.status_code == 201, response.json()


def test_the_bot_page_refuses_it_with_the_same_message(owner):
    client = Client()
    client.force_login(owner)
    response = client.post(
        "/bots/new/",
        post_data(
            system_prompt=_prompt(800),
            context_window="2000",
            max_output_tokens="1000",
            compaction_threshold="0",
        ),
    )
    assert response.status_code == 400
    assert list(response.context["form"].errors["system_prompt"]) == _refusal(800)
    assert Bot.objects.count() == 0


def test_the_admin_refuses_it_with_the_same_message(owner):
    admin = UserFactory(username="root", is_staff=True, is_superuser=True)
    client = Client()
    client.force_login(admin)
    response = client.post(
        "/admin/bots/bot/add/",
        _admin_form(
            owner=owner.pk,
            system_prompt=_prompt(800),
            context_window="2000",
            max_output_tokens="1000",
        ),
    )
    assert response.status_code == 200  # the form again, with its error
    assert list(response.context["adminform"].form.errors["system_prompt"]) == _refusal(800)
    assert Bot.objects.count() == 0
