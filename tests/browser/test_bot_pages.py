"""The bot pages in headless Chromium: create a bot with compaction settings, watch the soft /
hard / target numbers follow the window as it is typed, save, edit, and find the values again.

The platform runs as in ``make run`` (uvicorn, embedded mode, SQLite, ``seed_demo``) in a
subprocess; Chromium is Debian's (``playwright install`` is never used).
"""

import os

import pytest

from tests.browser.conftest import _new_page
from tests.browser.support import SCREENSHOTS

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]


@pytest.fixture
def embedded_site(server_url) -> str:
    """The module's embedded platform (tests/browser/conftest.py); each test makes its own bot."""
    return server_url


@pytest.fixture
def chromium_page(chromium):
    context, page = _new_page(chromium, viewport={"width": 1280, "height": 900})
    try:
        yield page
    finally:
        context.close()


def sign_in(page, base: str, path: str) -> None:
    page.goto(base + path)
    page.wait_for_url("**/accounts/login/**")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", "demo")
    with page.expect_navigation():
        page.click("form button[type=submit]")


def thresholds(page) -> dict[str, int]:
    names = ["window", "budget", "soft", "hard", "target", "target-blocking"]
    return {name: int(page.get_attribute(f"#budget-{name}", "data-value") or -1) for name in names}


def test_create_a_bot_with_compaction_settings_then_edit_them(embedded_site, chromium_page):
    page = chromium_page
    sign_in(page, embedded_site, "/bots/new/")
    assert page.url.endswith("/bots/new/")

    page.fill("#id_name", "Trip planner")
    page.fill("#id_system_prompt", "You plan trips and remember every booking code.")
    page.fill("#id_max_output_tokens", "512")
    page.fill("#id_context_window", "8000")
    advanced = page.locator("details#advanced")
    assert advanced.get_attribute("open") is None
    page.click("details#advanced > summary")
    assert advanced.get_attribute("open") == ""
    page.fill("#id_compaction_threshold", "3000")
    page.fill("#id_compaction_kept_percent", "30")
    page.fill("#id_memory_index_size", "12")

    # W 8000, R 512 -> B 7488, H 5616, S 3000, T 2246, Ts 2246 (docs/compaction.md).
    assert thresholds(page) == {
        "window": 8000,
        "budget": 7488,
        "soft": 3000,
        "hard": 5616,
        "target": 2246,
        "target-blocking": 2246,
    }
    # Typing a new window moves every number at once, without a round trip.
    page.fill("#id_context_window", "16000")
    assert thresholds(page) == {
        "window": 16000,
        "budget": 15488,
        "soft": 3000,
        "hard": 11616,
        "target": 4646,
        "target-blocking": 4646,
    }
    assert page.inner_text("#budget-hard") == "11,616"
    # Said as a person would (issue 18, defect 7): no W, B, S, H, T, Ts on the page.
    assert page.locator("#budget dt").all_inner_texts() == [
        "Context window",
        "A call sends at most",
        "Compacts in the background at",
        "Compacts before replying at",
        "Background compaction lands at",
        "Compaction before a reply lands at",
    ]
    # 3,000 is now below where compaction lands (4,646) plus the margin: said live.
    assert page.inner_text("#budget-note") == (
        "The window is the one set above. A call sends at most the window minus the max output "
        "tokens (never more than the cap). Compacting in the background at 3,000 is too low: set "
        "it to at least 5,420 tokens (where background compaction lands, 4,646, plus 5 % of what "
        "a call may send, 774), or to 0 (automatic)."
    )
    assert page.inner_text("label[for=id_compaction_threshold]") == (
        "Compact in the background at (tokens)"
    )
    page.fill("#id_compaction_threshold", "0")
    assert thresholds(page)["soft"] == 7744  # 0 = automatic: 50 % of B
    page.fill("#id_compaction_threshold", "6500")
    assert page.inner_text("#budget-note") == (
        "The window is the one set above. A call sends at most the window minus the max output "
        "tokens (never more than the cap)."
    )

    with page.expect_navigation():
        page.click("#save-bot")
    assert page.url.rstrip("/").split("/")[-2] == "bots"
    bot_url = page.url
    assert "Trip planner" in page.inner_text(".bots-messages")
    assert page.input_value("#id_context_window") == "16000"
    assert page.input_value("#id_compaction_threshold") == "6500"
    assert page.input_value("#id_compaction_kept_percent") == "30"
    assert page.input_value("#id_memory_index_size") == "12"

    # Edit: keep more after compaction; T follows, Ts stays at 50 % of B.
    page.click("details#advanced > summary")
    page.fill("#id_compaction_kept_percent", "55")
    assert (thresholds(page)["target"], thresholds(page)["target-blocking"]) == (8518, 7744)
    # ... and the threshold with it: 8,518 + 5 % of B (774) = 9,292 at least.
    page.fill("#id_compaction_threshold", "11000")
    page.uncheck("#id_recall_enabled")
    with page.expect_navigation():
        page.click("#save-bot")
    assert page.url == bot_url

    page.reload()
    assert page.input_value("#id_compaction_kept_percent") == "55"
    assert not page.is_checked("#id_recall_enabled")
    assert page.is_checked("#id_compaction_enabled")
    # Server-side numbers on load match what the page computed live.
    assert thresholds(page)["target"] == 8518

    # A server-side refusal is shown inline, and the Advanced section opens to show it.
    page.click("details#advanced > summary")
    page.fill("#id_memory_index_size", "500")
    with page.expect_navigation():
        page.click("#save-bot")
    assert page.locator("details#advanced").get_attribute("open") == ""
    error = page.locator('[data-field="memory_index_size"] .field-errors')
    assert "less than or equal to 200" in error.inner_text()
    page.goto(bot_url)
    assert page.input_value("#id_memory_index_size") == "12"

    # Check model: one tiny call through the gateway to the bot's saved model.
    page.click("#check-model")
    page.wait_for_selector("#check-result.is-ok")
    assert "builtin/recall answered in" in page.inner_text("#check-result")

    # An unknown model is flagged while typing (with no context window set, its window would
    # fall back to the cap)...
    window = page.input_value("#id_context_window")
    page.fill("#id_context_window", "0")
    page.fill("#id_model", "not a model at all")
    page.wait_for_selector("#model-warning:not([hidden])")
    assert "falls back to the cap" in page.inner_text("#model-warning")
    # ...but not once a context window is set (the cap no longer applies; issue 18, defect 4),
    # and again when it is cleared.
    page.fill("#id_context_window", "8000")
    page.wait_for_selector("#model-warning", state="hidden")
    page.fill("#id_context_window", "0")
    page.wait_for_selector("#model-warning:not([hidden])")
    page.fill("#id_context_window", window)
    page.fill("#id_model", "builtin/recall")
    page.wait_for_selector("#model-warning", state="hidden")

    # The list shows it with an edit link; the screenshot shows the settings with Advanced open.
    page.goto(embedded_site + "/bots/")
    assert page.locator("tr", has_text="Trip planner").locator("text=Edit").count() == 1
    page.goto(bot_url)
    page.click("details#advanced > summary")
    # The page scrolls inside <main>, so a full-page shot would show one screen: make the
    # viewport as tall as the form instead.
    height = page.evaluate("document.querySelector('.bots-page').scrollHeight + 80")
    page.set_viewport_size({"width": 1280, "height": min(4000, height)})
    # docs/screenshots/ is refreshed on request only (a test run leaves the tree clean)
    if os.environ.get("UPDATE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "bot-settings.png"))
    assert page.js_errors == []


def test_delete_asks_then_removes_the_bot(embedded_site, chromium_page):
    page = chromium_page
    sign_in(page, embedded_site, "/bots/new/")
    page.fill("#id_name", "Short-lived")
    with page.expect_navigation():
        page.click("#save-bot")
    page.click("text=Delete…")
    page.wait_for_selector("#confirm-delete")
    with page.expect_navigation():
        page.click("#confirm-delete")
    assert page.url.endswith("/bots/")
    assert "Deleted" in page.inner_text(".bots-messages")
    assert page.locator("tr", has_text="Short-lived").count() == 0
