"""The chat at 390 px and the demo room on a desktop, in headless Chromium against the embedded
platform (issue 32, Deliver 9): on a phone the room bar and the context gauge fold into one line
that opens on a tap and folds again on the next; nothing runs past the screen's edge, open or
folded ("Reply as" included); the seeded demo room's first "hello" reads as two plain answers."""

import contextlib
import re

import httpx
import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from chat_platform.llm.builtin.recall import NO_MATCH_TEXT
from tests.browser.support import api_headers, create_bot, log_in, send, shoot
from tests.browser.test_chat_product import CHATTY

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

REPLIES = '#transcript article.msg[data-role="assistant"][data-kind="chat"]'
# Every control the chat column shows, and each child of the header, the fold's line, the room
# bar, the gauge and the composer's row: none may reach past the viewport (nothing clipped).
OUT_OF_VIEW = """() => {
  const width = window.innerWidth;
  const picked = document.querySelectorAll(
    '.app-header *, .conversation-header *, #bars-fold, #bars-fold *, #room-bar > *,'
    + ' #room-bar .room-mode *, #context-gauge *, .composer *, #transcript article.msg');
  const out = [];
  for (const node of picked) {
    const box = node.getBoundingClientRect();
    // Not shown: no box, or inside a closed <details> (laid out, never painted).
    const shown = node.checkVisibility({ visibilityProperty: true });
    if (box.width === 0 || box.height === 0 || !shown) continue;
    if (node.closest('.visually-hidden, #room-participants, #app-menu .app-menu-nav')) continue;
    if (box.left < -0.5 || box.right > width + 0.5) {
      out.push(`${node.tagName}#${node.id}.${node.className} ${box.left}..${box.right}`);
    }
  }
  return out;
}"""
NUMBER = r"\d{1,3}(?:,\d{3})*"
# The folded line and the gauge's total, read in one evaluation (the gauge may move between two).
BOTH = """() => [document.getElementById('bars-fold-summary').innerText,
                document.getElementById('gauge-total').textContent]"""
# Every total the gauge drew, in order (a failing comparison says how the gauge moved).
GAUGE_SEEN = """document.addEventListener('DOMContentLoaded', () => {
  const total = document.getElementById('gauge-total');
  window.__gaugeSeen = [];
  if (!total) return;  // the sign-in page
  new MutationObserver(() => window.__gaugeSeen.push(
    Math.round(performance.now()) + ' ms: ' + total.textContent)).observe(
    total, {childList: true, characterData: true, subtree: true});
});"""


def _room(base, headers):
    """A chat with two built-in bots where the person picks who answers ("Reply as" shows)."""
    planner = create_bot(base, headers, name="Pocket planner", model="builtin/recall")
    critic = create_bot(base, headers, name="Pocket critic", model="builtin/recall")
    made = httpx.post(
        f"{base}/api/v1/sessions/",
        json={"bot": planner["id"], "title": "Pocket room"},
        headers=headers,
    )
    assert made.status_code == 201, made.text
    sid = made.json()["id"]
    added = httpx.post(
        f"{base}/api/v1/sessions/{sid}/participants/", json={"bot": critic["id"]}, headers=headers
    )
    assert added.status_code == 201, added.text
    mode = httpx.patch(
        f"{base}/api/v1/sessions/{sid}/", json={"reply_mode": "manual"}, headers=headers
    )
    assert mode.status_code == 200, mode.text
    return sid


def _height(page, selector):
    box = page.locator(selector).bounding_box()
    return 0 if box is None else round(box["height"])


def test_on_a_phone_the_room_bar_and_gauge_fold_into_one_line(server_url, phone):
    page = phone
    page.add_init_script(GAUGE_SEEN)
    sid = _room(server_url, api_headers(server_url))
    log_in(page, server_url, next_path=f"/chat/{sid}/")
    page.wait_for_selector("#composer:enabled")
    page.locator("#reply-as-box").wait_for()
    send(page, "hello")
    page.wait_for_selector(f'{REPLIES}[data-status="complete"]')
    page.wait_for_function("() => document.getElementById('gauge-total').textContent !== ''")

    fold = page.locator("#bars-fold")
    # Folded: one line, saying what it holds; neither the bar nor the gauge is shown. The gauge
    # may still move after the reply (a later report: 35, then 92 tokens in one CI-like run), so
    # wait for the line to say what the gauge says, then read both in one go: two reads, one
    # after the other, saw the gauge at 101 and then the line at 40 in a CI run.
    with contextlib.suppress(PlaywrightTimeoutError):  # then the assertion says what it read
        page.wait_for_function(
            f"() => (([line, total]) => line === '2 bots · Context ' + total)(({BOTH})())"
        )
    line, total = page.evaluate(BOTH)
    assert re.fullmatch(rf"{NUMBER} of {NUMBER} tokens \(\d+%\)", total), total
    assert fold.get_attribute("aria-expanded") == "false"
    assert line == f"2 bots · Context {total}", page.evaluate("() => window.__gaugeSeen")
    assert (fold.is_visible(), page.is_visible("#room-bar"), page.is_visible("#context-gauge")) == (
        True,
        False,
        False,
    )
    assert (_height(page, "#room-bar"), _height(page, "#context-gauge")) == (0, 0)
    folded = _height(page, "#bars-fold")
    assert folded <= 44, folded
    assert page.evaluate(OUT_OF_VIEW) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    # "Reply as" and its select are whole on the screen, beside Send.
    for selector in ("#reply-as", "#send", "#attach-button"):
        box = page.locator(selector).bounding_box()
        assert box["x"] >= 0 and box["x"] + box["width"] <= 390, (selector, box)
    shoot(page, "mobile-room-folded")

    fold.click()
    page.locator("#context-gauge").wait_for()
    assert fold.get_attribute("aria-expanded") == "true"
    assert (page.is_visible("#room-bar"), page.is_visible("#context-gauge")) == (True, True)
    assert _height(page, "#room-bar") > 0 and _height(page, "#context-gauge") > 0
    assert page.locator("#room-participants > li").count() == 2
    # Numbers read with thousands separators: the budget, the marks.
    assert total.endswith(" of 198,976 tokens (0%)"), total
    assert page.locator("#gauge-legend .gauge-item-mark .gauge-num").all_inner_texts() == [
        "79,590",
        "99,488",
        "149,232",
    ]
    assert page.evaluate(OUT_OF_VIEW) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "mobile-room-open")

    # The chat's settings (the header's ⚙) open within the screen too.
    page.click("#chat-settings > summary")
    page.locator("#chat-settings-form").wait_for()
    assert page.evaluate(OUT_OF_VIEW) == []
    page.click("#chat-settings > summary")
    page.locator("#chat-settings-form").wait_for(state="hidden")

    fold.click()
    page.locator("#context-gauge").wait_for(state="hidden")
    assert fold.get_attribute("aria-expanded") == "false"
    assert (page.is_visible("#room-bar"), _height(page, "#bars-fold")) == (False, folded)
    assert page.js_errors == []


def test_the_demo_room_after_a_first_hello_on_a_desktop(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    sessions = httpx.get(f"{server_url}/api/v1/sessions/", headers=headers).json()
    sessions = sessions["results"] if isinstance(sessions, dict) else sessions
    demo = next(s for s in sessions if s["title"] == "Demo room: two bots, two memories")
    log_in(page, server_url, next_path=f"/chat/{demo['id']}/")
    page.wait_for_selector("#composer:enabled")
    send(page, "hello")
    page.wait_for_function(
        """(sel) => {
          const all = document.querySelectorAll(sel);
          return all.length === 2 && Array.from(all).every((m) => m.dataset.status === "complete");
        }""",
        arg=REPLIES,
        # Two built-in replies one after the other (~1 s). This once timed out at 30 s and then at
        # 90 s: "hello" went to a new chat, typed before the page had opened the demo room
        # (the composer now waits for it: test_chat_list.py).
        timeout=90_000,
    )
    # No fold on a wide screen: the bar and the gauge are shown as they are.
    assert (page.is_visible("#bars-fold"), page.is_visible("#room-bar")) == (False, True)
    page.wait_for_function("() => document.getElementById('gauge-total').textContent !== ''")
    texts = page.locator("#transcript article.msg .msg-text").all_inner_texts()
    assert [t.strip() for t in texts] == ["hello", NO_MATCH_TEXT, NO_MATCH_TEXT]
    assert page.locator('#transcript article.msg[data-kind="notice"]').count() == 0
    # The conversation column with the header above it (the sidebar is the first-run card's):
    # the room alone, and a PNG under ~150 KB for docs/screenshots.
    column = page.locator(".conversation").bounding_box()
    shoot(
        page, "demo-room", clip={"x": column["x"], "y": 0, "width": column["width"], "height": 800}
    )
    assert page.js_errors == []


# A title far longer than a phone's header, with one word longer than the screen too.
LONG_TITLE = (
    "Planning the whole family's summer trip to Lisbon, Porto and the Algarve with everyone's "
    "flights, trains and hotels: Supercalifragilisticexpialidocious-itinerary-version-7"
)
# The header's title and every control beside it, as the page lays them out.
HEADER_BOXES = """() => {
  const title = document.getElementById('conversation-title');
  const style = getComputedStyle(title);
  const box = (n) => {
    const b = n.getBoundingClientRect();
    return [b.left, b.right, b.top, b.bottom];
  };
  const controls = Array.from(document.querySelectorAll(
    '.conversation-header button, .conversation-header summary, .conversation-header a'))
    .filter((n) => n.checkVisibility({ visibilityProperty: true }))
    .map((n) => [n.id || n.closest('[id]').id, ...box(n)]);
  return {
    text: title.textContent,
    overflow: style.overflowX,
    textOverflow: style.textOverflow,
    whiteSpace: style.whiteSpace,
    clipped: title.scrollWidth > title.clientWidth,
    title: box(title),
    lineHeight: parseFloat(style.lineHeight) || parseFloat(style.fontSize) * 1.5,
    controls: controls,
  };
}"""


def test_on_a_phone_a_long_chat_title_ends_in_an_ellipsis_beside_its_buttons(server_url, phone):
    page = phone
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Titled", model="builtin/recall")
    made = httpx.post(
        f"{server_url}/api/v1/sessions/",
        json={"bot": bot["id"], "title": LONG_TITLE},
        headers=headers,
    )
    assert made.status_code == 201, made.text
    log_in(page, server_url, next_path=f"/chat/{made.json()['id']}/")
    page.wait_for_selector("#composer:enabled")
    page.wait_for_function(
        "(t) => document.getElementById('conversation-title').textContent === t", arg=LONG_TITLE
    )
    page.locator("#chat-settings > summary").wait_for()

    laid = page.evaluate(HEADER_BOXES)
    # The whole title is in the page (for screen readers and the tooltip), shown cut short with
    # an ellipsis on one line, not wrapped and not clipped mid-letter.
    assert laid["text"] == LONG_TITLE
    assert (laid["overflow"], laid["textOverflow"], laid["whiteSpace"]) == (
        "hidden",
        "ellipsis",
        "nowrap",
    )
    assert laid["clipped"] is True
    left, right, top, bottom = laid["title"]
    assert left >= 0 and right <= 390, laid["title"]
    assert bottom - top <= laid["lineHeight"] + 1, laid
    # Rename is its pencil on a phone, so the title keeps some room (it had 60 px beside
    # "Rename", "+ Bot", ⚙ and Memory: "Plan…").
    assert right - left >= 90, laid["title"]
    # Every button of the header (the drawer toggle, Rename, the chat settings) is whole on the
    # screen and beside the title, not pushed off it or under it.
    ids = {control[0] for control in laid["controls"]}
    assert {"drawer-toggle", "chat-settings"} <= ids, laid["controls"]
    for name, c_left, c_right, c_top, c_bottom in laid["controls"]:
        assert c_left >= 0 and c_right <= 390, (name, c_left, c_right)
        assert c_right <= left + 0.5 or c_left >= right - 0.5, (name, c_left, c_right, left, right)
    assert page.evaluate(OUT_OF_VIEW) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "mobile-long-title")

    # A compaction's chip ("Context compacted: 1,234 → 567 tokens") joins the header's row: the
    # title still gives way, and no button leaves the screen.
    for text in CHATTY:
        sent = httpx.post(
            f"{server_url}/api/v1/sessions/{made.json()['id']}/messages/",
            json={"content": text, "wait": True},
            headers=headers,
            timeout=60,
        )
        assert sent.status_code == 201, sent.text
    page.wait_for_selector(f'{REPLIES}[data-status="complete"] >> nth=3')
    send(page, "/compact")
    chip = page.locator("#compaction-status")
    page.wait_for_function(
        "() => { const c = document.getElementById('compaction-status');"
        " return !c.hidden && c.textContent.startsWith('Context compacted:'); }"
    )
    with_chip = page.evaluate(HEADER_BOXES)
    left, right, _, _ = with_chip["title"]
    assert left >= 0 and right <= 390, with_chip["title"]
    for name, c_left, c_right, _, _ in with_chip["controls"]:
        assert c_left >= 0 and c_right <= 390, (name, c_left, c_right)
    chip_box = chip.bounding_box()
    assert chip_box["x"] >= 0 and chip_box["x"] + chip_box["width"] <= 390, chip_box
    assert page.evaluate(OUT_OF_VIEW) == []
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "mobile-long-title-compacted")
    assert page.js_errors == []


def test_on_a_phone_the_other_pages_show_the_menu_and_scroll_no_table_sideways(server_url, phone):
    """The bot, settings and usage pages at 390 px: the header's links live in its menu, as on
    the chat (the bots sheet showed them beside the menu, in a header three lines high), and the
    API keys table keeps its bots and access columns and scrolls in its own box, never the page
    (its narrow-screen rule hid those two, and the page scrolled sideways)."""
    headers = api_headers(server_url)
    made = httpx.post(
        f"{server_url}/api/v1/api-keys/",
        json={"name": "phone layout key", "access": "read", "daily_token_limit": 100_000},
        headers=headers,
    )
    assert made.status_code == 201, made.text
    log_in(phone, server_url)
    for path in ("/bots/", "/bots/new/", "/settings/", "/usage/"):
        phone.goto(server_url + path)
        shown = phone.evaluate(
            """() => [getComputedStyle(document.querySelector('.app-nav')).display,
                      getComputedStyle(document.querySelector('.app-menu')).display,
                      document.documentElement.scrollWidth]"""
        )
        assert shown == ["none", "block", 390], path
    phone.goto(server_url + "/settings/")
    columns = phone.evaluate(
        """() => [...document.querySelectorAll('.settings-keys thead th')]
              .filter(th => getComputedStyle(th).display !== 'none')
              .map(th => th.textContent.trim())"""
    )
    assert columns[:4] == ["Name", "Bots", "Access", "Daily limit"]
