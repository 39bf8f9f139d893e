"""Headless Chromium: staff add a connection in the admin (the key typed once), refresh its
models, a user picks it and one of its models on the bot form, chats, and finds the turn on the
usage page."""

from collections.abc import Iterator

import httpx
import pytest

from tests.browser.conftest import _new_page
from tests.browser.support import (
    api_headers,
    assistant,
    embedded_platform,
    log_in,
    open_new_chat,
    send,
)

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

ADMIN_PASSWORD = "admin-pw-for-browser-test"
PROVIDER_KEY = "sk-browser-connection-key-5551"


@pytest.fixture(scope="module")
def site(fake_llm, tmp_path_factory) -> Iterator[str]:
    admin = ("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
    with embedded_platform(
        tmp_path_factory,
        "connections",
        setup=[admin],
        CONNECTION_ENCRYPTION_KEY="browser-test-encryption-key-0123456789abcdef",
        LLM_MAX_RETRIES="0",
        DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
    ) as (base, log):
        yield base
    assert PROVIDER_KEY not in log.read_text(errors="replace")


def test_admin_connection_then_a_user_picks_a_model_chats_and_sees_usage(site, chromium, fake):
    context, admin = _new_page(chromium, viewport={"width": 1280, "height": 900})
    try:
        admin.goto(f"{site}/admin/login/")
        admin.fill("input[name=username]", "admin")
        admin.fill("input[name=password]", ADMIN_PASSWORD)
        with admin.expect_navigation():
            admin.click("input[type=submit]")
        admin.goto(f"{site}/admin/connections/connection/add/")
        admin.fill("input[name=name]", "Fake provider")
        admin.select_option("select[name=kind]", "openai")
        admin.fill("input[name=base_url]", fake.url)
        admin.fill("input[name=api_key]", PROVIDER_KEY)
        admin.check("input[name=public]")
        with admin.expect_navigation():
            admin.click("input[name=_save]")
        assert PROVIDER_KEY not in admin.content()
        row = admin.locator("#result_list tr", has_text="Fake provider")
        row.locator("input[name=_selected_action]").check()
        admin.select_option("select[name=action]", "refresh_models")
        with admin.expect_navigation():
            admin.click("button[name=index]")
        assert "Fake provider: models refreshed." in admin.content()
    finally:
        context.close()

    context, page = _new_page(chromium, viewport={"width": 1280, "height": 900})
    try:
        log_in(page, site, next_path="/bots/new/")
        page.fill("input[name=name]", "Connected bot")
        label = page.locator("select[name=connection] option", has_text="Fake provider")
        page.select_option("select[name=connection]", label.get_attribute("value"))
        assert page.locator("#model-suggestions option[value='openai/fake-model']").count() == 1
        page.fill("input[name=model]", "fake-model")
        with page.expect_navigation():
            page.click("#bot-form button[type=submit]")
        bots = httpx.get(f"{site}/api/v1/bots/", headers=api_headers(site)).json()
        bot = next(b for b in bots if b["name"] == "Connected bot")
        assert bot["model"] == "openai/fake-model"
        page.goto(site + "/")
        open_new_chat(page, bot)
        send(page, "hello through the connection")
        assistant(page).last.get_by_text("Hello from fake.").wait_for()
        assert fake.headers[-1]["authorization"] == f"Bearer {PROVIDER_KEY}"
        page.goto(f"{site}/usage/")
        assert page.locator("table.usage-table td", has_text="Connected bot").count() == 1
        # two charts by day (tokens, saved) of 14 bars each, and one bar per bot
        assert page.locator("svg.usage-chart:not(.usage-by-label) rect").count() == 28
        assert page.locator("svg.usage-by-label rect").count() == 1
    finally:
        context.close()
