"""Headless Chromium, the first hour (issue 32): staff with only built-in bots connect a model
provider from the chat page's first-run card, pick a discovered model, get a bot and a chat
with it; a user whose daily token limit ran out reads what ran out and when it resets, in the
chat itself."""

import datetime as dt
from collections.abc import Iterator

import httpx
import pytest

from tests.browser.conftest import _new_page
from tests.browser.support import (
    assistant,
    embedded_platform,
    log_in,
    open_new_chat,
    send,
    shoot,
)

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

ADMIN_PASSWORD = "admin-pw-for-first-hour"
FRUGAL_PASSWORD = "frugal-pw-for-first-hour"
PROVIDER_KEY = "sk-first-run-card-key-7731"
# Two users with a daily limit of 1,000 tokens. "frugal" used 999 today: a message is taken,
# but no context fits in what is left, so its reply fails with quota_exceeded. "spent" used all
# 1,000: a message is refused before it is stored.
FRUGAL = f"""
from django.contrib.auth import get_user_model
from connections import usage
from connections.models import TokenCounter, UserQuota
user = get_user_model().objects.create_user("frugal", password="{FRUGAL_PASSWORD}")
UserQuota.objects.create(user=user, daily_token_limit=1000)
TokenCounter.objects.create(subject=f"user:{{user.pk}}", day=usage.today(), used=999)
spent = get_user_model().objects.create_user("spent", password="{FRUGAL_PASSWORD}")
UserQuota.objects.create(user=spent, daily_token_limit=1000)
TokenCounter.objects.create(subject=f"user:{{spent.pk}}", day=usage.today(), used=1000)
"""


@pytest.fixture(scope="module")
def site(fake_llm, tmp_path_factory) -> Iterator[str]:
    admin = ("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
    with embedded_platform(
        tmp_path_factory,
        "first-hour",
        setup=[admin, ("shell", "-c", FRUGAL)],
        CONNECTION_ENCRYPTION_KEY="first-hour-encryption-key-0123456789abcdef",
        LLM_MAX_RETRIES="0",
        DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
    ) as (base, log):
        yield base
    assert PROVIDER_KEY not in log.read_text(errors="replace")


def _token(site: str, username: str, password: str) -> dict[str, str]:
    response = httpx.post(
        f"{site}/api/v1/auth/token/", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Token {response.json()['token']}"}


def test_staff_connect_a_provider_from_the_first_run_card_and_chat(site, chromium, fake):
    # Tall enough for the whole sidebar card in the screenshot.
    context, page = _new_page(chromium, viewport={"width": 1280, "height": 1000})
    try:
        log_in(page, site, username="admin", password=ADMIN_PASSWORD)
        card = page.locator("#first-run")
        card.wait_for()
        assert card.locator("summary").text_content() == "Connect a model provider"
        # Ollama asks for a URL only, Anthropic for a key only.
        page.check("input[name=first-run-kind][value=ollama]")
        assert (page.is_visible("#first-run-url"), page.is_visible("#first-run-key")) == (
            True,
            False,
        )
        page.check("input[name=first-run-kind][value=anthropic]")
        assert (page.is_visible("#first-run-url"), page.is_visible("#first-run-key")) == (
            False,
            True,
        )
        page.check("input[name=first-run-kind][value=openai]")
        page.click("#first-run-connect")  # no URL yet: said, nothing sent
        assert page.locator("#first-run-error").inner_text() == (
            "Enter the provider's base URL, e.g. https://api.openai.com/v1."
        )
        page.fill("#first-run-url", fake.url)
        page.fill("#first-run-key", PROVIDER_KEY)
        page.click("#first-run-connect")
        page.locator("#first-run-models li, #first-run-error:not([hidden])").first.wait_for()
        assert page.locator("#first-run-error").is_hidden(), page.inner_text("#first-run-error")
        host = fake.url.split("//")[1].split("/")[0]
        assert page.locator("#first-run-status").inner_text() == (
            f"OpenAI-compatible at {host} offers 1 model."
        )
        model = page.locator("#first-run-models li")
        assert model.get_attribute("data-model") == "fake-model"
        # Connecting the same address again (no key this time) lists it again: the same
        # connection, its key kept, not a second one (checked over the API below).
        page.click("#first-run-connect")
        page.locator("#first-run-status", has_text="offers 1 model.").wait_for()
        assert model.get_attribute("data-model") == "fake-model"
        shoot(page, "first-run-card")

        model.locator("button.first-run-make").click()
        page.wait_for_url("**/chat/*/")
        page.wait_for_selector("#connection-status[data-state=live]", state="attached")
        page.wait_for_selector("#composer:enabled")
        assert card.is_hidden()  # a bot with a real model exists now
        send(page, "hello through the first-run card")
        assistant(page).last.get_by_text("Hello from fake.").wait_for()
        assert fake.headers[-1]["authorization"] == f"Bearer {PROVIDER_KEY}"
        assert page.js_errors == []
    finally:
        context.close()

    headers = _token(site, "admin", ADMIN_PASSWORD)
    connections = httpx.get(f"{site}/api/v1/connections/", headers=headers)
    assert PROVIDER_KEY not in connections.text
    made = [c for c in connections.json() if c["kind"] == "openai"]
    assert [(c["name"], c["base_url"], c["has_key"]) for c in made] == [
        (f"OpenAI-compatible at {host}", fake.url, True)
    ]
    bots = httpx.get(f"{site}/api/v1/bots/", headers=headers).json()
    made_bots = [(b["name"], b["model"], b["connection"]) for b in bots if b["connection"]]
    assert made_bots == [("fake-model", "openai/fake-model", made[0]["id"])]


def test_a_user_who_is_not_staff_gets_no_first_run_card(site, chromium):
    context, page = _new_page(chromium, viewport={"width": 1280, "height": 900})
    try:
        log_in(page, site, username="frugal", password=FRUGAL_PASSWORD)
        page.wait_for_selector("#bot-select option[value]:not([value=''])", state="attached")
        assert page.locator("#first-run").count() == 0
    finally:
        context.close()


def test_a_spent_daily_limit_says_what_ran_out_and_when_it_resets(site, chromium):
    context, page = _new_page(
        chromium, viewport={"width": 1280, "height": 900}, timezone_id="UTC", locale="en-GB"
    )
    try:
        log_in(page, site, username="frugal", password=FRUGAL_PASSWORD)
        bots = httpx.get(
            f"{site}/api/v1/bots/", headers=_token(site, "frugal", FRUGAL_PASSWORD)
        ).json()
        open_new_chat(page, next(b for b in bots if b["name"] == "Recall (built-in)"))
        send(page, "hello")
        failed = assistant(page).and_(page.locator("[data-status=failed]"))
        failed.wait_for()
        assert failed.locator(".msg-error").get_attribute("data-code") == "quota_exceeded"
        assert failed.locator(".msg-error-title").inner_text() == (
            "Your daily token limit has too little left for this reply: "
            "999 of 1,000 tokens used today."
        )
        reset = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
        assert failed.locator(".msg-error-advice").inner_text() == (
            f"It resets on {reset:%a} {reset.day} {reset:%b}, 00:00 UTC. Retry then, or ask "
            "whoever runs this server for a higher limit."
        )
        assert page.js_errors == []
    finally:
        context.close()


def test_a_message_refused_by_a_spent_limit_says_so_in_words(site, chromium):
    context, page = _new_page(
        chromium, viewport={"width": 1280, "height": 900}, timezone_id="UTC", locale="en-GB"
    )
    try:
        log_in(page, site, username="spent", password=FRUGAL_PASSWORD)
        headers = _token(site, "spent", FRUGAL_PASSWORD)
        bots = httpx.get(f"{site}/api/v1/bots/", headers=headers).json()
        open_new_chat(page, next(b for b in bots if b["name"] == "Recall (built-in)"))
        send(page, "hello")
        reset = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
        words = (
            "Your daily token limit is used up: 1,000 of 1,000 tokens today. "
            f"It resets on {reset:%a} {reset.day} {reset:%b}, 00:00 UTC. Retry then, or ask "
            "whoever runs this server for a higher limit."
        )
        page.locator("#error-banner-text", has_text="used up").wait_for()
        assert page.inner_text("#error-banner-text") == words
        unsent = page.locator('#transcript article.msg[data-status="unsent"] .msg-error')
        unsent.wait_for()
        assert unsent.inner_text() == "Not sent: " + words
        session = page.locator("#session-list li.is-current").get_attribute("data-session-id")
        stored = httpx.get(f"{site}/api/v1/sessions/{session}/messages/", headers=headers)
        assert stored.json() == []
        assert page.js_errors == []
    finally:
        context.close()
