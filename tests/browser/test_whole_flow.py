"""Headless Chromium, issue 21's whole flow on one site (invite mode): staff make an invitation
link on the staff page, a new person signs up with it, signs out and in again; staff add a
connection in the admin (the key typed once) and refresh its models; the new person picks that
connection and one of its models for a bot, chats, and follows the header's *Usage* link to find
the turn's exact tokens; staff see them on the all-users page. The key is in no page and no line
of the server's log. (The approval queue's own browser test is tests/browser/test_accounts.py.)"""

from collections.abc import Iterator

import httpx
import pytest

from tests.browser.conftest import _new_page
from tests.browser.support import assistant, embedded_platform, open_new_chat, send, sign_out
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

BOSS_PASSWORD = "boss-pass-for-the-whole-flow"
NEW_PASSWORD = "a-long-pass-phrase-9"
PROVIDER_KEY = "sk-whole-flow-connection-key-7713"
USAGE = {"prompt_tokens": 31, "completion_tokens": 11, "total_tokens": 42}


@pytest.fixture(scope="module")
def site(fake_llm, tmp_path_factory) -> Iterator[tuple[str, object]]:
    boss = ("createsuperuser", "--noinput", "--username", "boss", "--email", "b@x.test")
    with embedded_platform(
        tmp_path_factory,
        "whole-flow",
        seed=False,
        setup=[boss],
        ACCOUNT_SIGNUP_MODE="invite",
        CONNECTION_ENCRYPTION_KEY="whole-flow-encryption-key-0123456789abcdef",
        LLM_MAX_RETRIES="0",
        DJANGO_SUPERUSER_PASSWORD=BOSS_PASSWORD,
    ) as (base, log):
        yield base, log
    assert PROVIDER_KEY not in log.read_text(errors="replace")


def _sign_in(page, base, username, password):
    page.goto(f"{base}/accounts/login/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("main form button[type=submit]")
    assert page.locator(".app-user-name").inner_text() == f"Signed in as {username}"


def test_invite_sign_up_connection_model_chat_and_usage(site, chromium, fake):
    base, _log = site
    boss_context, boss = _new_page(chromium, viewport={"width": 1280, "height": 900})
    person_context, person = _new_page(chromium, viewport={"width": 1280, "height": 900})
    try:
        # Staff make an invitation link on the staff page (the header leads there).
        _sign_in(boss, base, "boss", BOSS_PASSWORD)
        with boss.expect_navigation():
            boss.click(".app-nav >> text=Invitations")
        boss.fill("#id_note", "for Ann")
        with boss.expect_navigation():
            boss.click("#invitation-create")
        link = boss.locator("#invitation-link").input_value()
        assert link.startswith(f"{base}/accounts/signup/?invite=")

        # The new person signs up with it, signs out and signs in again.
        person.goto(link)
        person.fill("input[name=username]", "ann")
        person.fill("input[name=email]", "ann@example.com")
        person.fill("input[name=password1]", NEW_PASSWORD)
        person.fill("input[name=password2]", NEW_PASSWORD)
        with person.expect_navigation():
            person.click("main form button[type=submit]")
        person.wait_for_selector(".app-user-name")
        assert person.locator(".app-user-name").inner_text() == "Signed in as ann"
        sign_out(person)
        _sign_in(person, base, "ann", NEW_PASSWORD)
        boss.goto(f"{base}/accounts/invitations/")
        row = boss.locator(".invitations-table tbody tr", has_text="for Ann")
        assert row.locator("td[data-state]").inner_text() == "used"

        # Staff add a connection in the admin (the key typed once) and refresh its models.
        boss.goto(f"{base}/admin/connections/connection/add/")
        boss.fill("input[name=name]", "Team provider")
        boss.select_option("select[name=kind]", "openai")
        boss.fill("input[name=base_url]", fake.url)
        boss.fill("input[name=api_key]", PROVIDER_KEY)
        boss.check("input[name=public]")
        with boss.expect_navigation():
            boss.click("input[name=_save]")
        assert PROVIDER_KEY not in boss.content()
        row = boss.locator("#result_list tr", has_text="Team provider")
        row.locator("input[name=_selected_action]").check()
        boss.select_option("select[name=action]", "refresh_models")
        with boss.expect_navigation():
            boss.click("button[name=index]")
        assert "Team provider: models refreshed." in boss.content()

        # The new person picks the connection and a discovered model for a bot, and chats.
        person.goto(f"{base}/bots/new/")
        person.fill("input[name=name]", "Team bot")
        option = person.locator("select[name=connection] option", has_text="Team provider")
        person.select_option("select[name=connection]", option.get_attribute("value"))
        assert person.locator("#model-suggestions option[value='openai/fake-model']").count() == 1
        person.fill("input[name=model]", "fake-model")
        with person.expect_navigation():
            person.click("#bot-form button[type=submit]")
        token = httpx.post(
            f"{base}/api/v1/auth/token/", json={"username": "ann", "password": NEW_PASSWORD}
        ).json()["token"]
        bots = httpx.get(f"{base}/api/v1/bots/", headers={"Authorization": f"Token {token}"})
        bot = next(b for b in bots.json() if b["name"] == "Team bot")
        assert (bot["model"], bot["connection"]) == (
            "openai/fake-model",
            int(option.get_attribute("value")),
        )
        fake.script(Reply(text="Hello from the team provider.", usage=USAGE))
        person.goto(base + "/")
        open_new_chat(person, bot)
        send(person, "hello through the team connection")
        # The first reply of a fresh platform (its model map and embedding model load first):
        # 30 s was not enough in one CI run under load.
        assistant(person).last.get_by_text("Hello from the team provider.").wait_for(timeout=90_000)
        assert fake.headers[-1]["authorization"] == f"Bearer {PROVIDER_KEY}"

        # The header's Usage link: the turn's exact tokens, by bot and in the day's bar.
        with person.expect_navigation():
            person.click(".app-nav >> text=Usage")
        assert person.url == f"{base}/usage/"
        cells = person.locator("table.usage-table tbody tr", has_text="Team bot").locator("td")
        assert cells.all_inner_texts()[1:] == ["Team bot", "42", "0"]
        assert person.locator("[data-usage-total]").inner_text() == "42"
        assert (
            person.locator("svg.usage-by-label g[data-label='Team bot']").get_attribute(
                "data-value"
            )
            == "42"
        )
        assert PROVIDER_KEY not in person.content()

        boss.goto(f"{base}/usage/all/")
        assert (
            boss.locator("svg.usage-by-label g[data-label='ann']").get_attribute("data-value")
            == "42"
        )
        assert PROVIDER_KEY not in boss.content()
        assert person.js_errors == [] and boss.js_errors == []
    finally:
        person_context.close()
        boss_context.close()
