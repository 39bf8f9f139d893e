"""The settings page in headless Chromium (docs/accounts.md): reached from the chat page's
header, a key made with the form is shown once and works on /v1/models until it is revoked."""

import os

import httpx
import pytest

from tests.browser.support import SCREENSHOTS, log_in

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]


def test_make_use_and_revoke_an_api_key_from_the_settings_page(server_url, desktop):
    page = desktop
    log_in(page, server_url, next_path="/chat/new/")
    with page.expect_navigation():
        page.click(".app-nav >> text=Settings")
    assert page.url == f"{server_url}/settings/"
    assert page.locator("[data-profile=username]").inner_text() == "demo"

    page.fill("#id_name", "my editor")
    page.locator("#id_bots input[type=checkbox]").first.check()
    page.fill("#id_daily_token_limit", "200000")
    with page.expect_navigation():
        page.click("#api-key-form button[type=submit]")
    raw = page.locator("[data-new-key]").inner_text()
    prefix = raw.split(".", 1)[0]
    row = page.locator(f"tr[data-key-prefix='{prefix}']")
    assert row.locator("td").nth(0).inner_text() == "my editor"
    assert row.locator("td").nth(4).inner_text() == "200,000"
    if os.environ.get("UPDATE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        height = page.evaluate("document.querySelector('.bots-page').scrollHeight + 80")
        page.set_viewport_size({"width": 1280, "height": min(4000, height)})
        page.screenshot(path=str(SCREENSHOTS / "settings-page.png"))

    headers = {"Authorization": f"Bearer {raw}"}
    listed = httpx.get(f"{server_url}/v1/models", headers=headers)
    assert listed.status_code == 200
    assert len(listed.json()["data"]) == 1

    page.goto(f"{server_url}/settings/")
    assert page.locator("[data-new-key]").count() == 0
    with page.expect_navigation():
        row.locator("button", has_text="Revoke").click()
    message = page.locator(".bots-message").inner_text()
    assert message == f"Key {prefix} revoked: it no longer works."
    assert page.locator(f"tr[data-key-prefix='{prefix}']").count() == 0
    assert httpx.get(f"{server_url}/v1/models", headers=headers).status_code == 401
    assert page.js_errors == []
