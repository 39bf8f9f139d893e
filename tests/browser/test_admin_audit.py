"""The summary audit in headless Chromium: chat through the API, /compact, then open the admin as
the demo user (staff in embedded mode) and see the snapshot and the summary side by side."""

import os

import httpx
import pytest

from tests.browser import test_bot_pages as bot_pages
from tests.browser.test_bot_pages import SCREENSHOTS, sign_in

# The same embedded platform and browser as the bot pages' e2e tests.
embedded_site = bot_pages.embedded_site
chromium_page = bot_pages.chromium_page

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

FACTS = [
    "My sister Maria Santos lands in Lisbon on 14 March at 09:40.",
    "The hotel booking code is QX7-4471 and it costs 380 euros.",
    "Remind me that Joao Silva prefers the window seat in row 12.",
    "We agreed to meet at Rossio station at 18:30 on Friday.",
    "What time does Maria land?",
]


def make_summary(base: str) -> int:
    """A real compaction through the public API: a few turns with builtin/recall, /compact."""
    with httpx.Client(base_url=base, timeout=60) as http:
        token = http.post("/api/v1/auth/token/", json={"username": "demo", "password": "demo"})
        headers = {"Authorization": f"Token {token.json()['token']}"}
        bots = http.get("/api/v1/bots/", headers=headers).json()
        bot = next(b for b in bots if b["model"] == "builtin/recall")
        session = http.post(
            "/api/v1/sessions/", json={"bot": bot["id"], "title": "Lisbon trip"}, headers=headers
        ).json()
        for text in FACTS:
            sent = http.post(
                f"/api/v1/sessions/{session['id']}/messages/",
                json={"content": text, "wait": True},
                headers=headers,
            )
            assert sent.status_code == 201, sent.text
        compacted = http.post(
            f"/api/v1/sessions/{session['id']}/compact/", json={}, headers=headers
        )
        assert compacted.status_code == 200, compacted.text
        assert compacted.json()["outcome"] == "compacted", compacted.json()
        return compacted.json()["summary"]["id"]


def test_admin_summary_audit_shows_snapshot_beside_summary(embedded_site, chromium_page):
    summary_id = make_summary(embedded_site)
    page = chromium_page

    sign_in(page, embedded_site, "/bots/")
    # One click from the app: the demo user is staff in embedded mode.
    with page.expect_navigation():
        page.click(".app-nav >> text=Admin")
    assert "/admin/" in page.url
    page.goto(embedded_site + "/admin/compaction/summary/?trigger__exact=manual")
    with page.expect_navigation():
        page.click(f'#result_list a[href*="/summary/{summary_id}/change/"]')

    side = page.locator("#audit-side-by-side")
    side.wait_for()
    snapshot = page.locator("#audit-snapshot")
    summary = page.locator("#audit-summary")
    assert "Maria Santos" in snapshot.inner_text()
    assert summary.locator(".audit-text").inner_text().strip()
    # Side by side: same row, snapshot on the left.
    left, right = snapshot.bounding_box(), summary.bounding_box()
    assert left["x"] + left["width"] <= right["x"] + 1
    assert abs(left["y"] - right["y"]) < 2
    assert "messages 1–" in page.inner_text("#audit-coverage")
    assert "builtin/extractive" in page.inner_text("#audit-model")
    assert "→" in page.inner_text("#audit-tokens")
    assert "%" in page.inner_text("#audit-retention")
    # Every line is classified; missing facts, if any, are highlighted in place.
    statuses = snapshot.locator("ol.audit-lines li").evaluate_all(
        "items => items.map(li => li.dataset.status)"
    )
    assert statuses and set(statuses) <= {"plain", "kept", "partial", "dropped"}
    missing = page.locator("#audit-missing mark.missing-fact").all_inner_texts()
    marked = snapshot.locator("mark.missing-fact").all_inner_texts()
    assert {m.lower() for m in missing} <= {m.lower() for m in marked} | set(missing)
    # Read-only for the demo user: nothing to save.
    assert page.locator('input[name="_save"]').count() == 0

    height = page.evaluate("document.documentElement.scrollHeight")
    page.set_viewport_size({"width": 1400, "height": min(3000, height)})
    # docs/screenshots/ is refreshed on request only (a test run leaves the tree clean)
    if os.environ.get("UPDATE_SCREENSHOTS"):
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / "admin-summary-audit.png"))
    assert page.js_errors == []
