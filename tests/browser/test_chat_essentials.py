"""Chat essentials of issue 18 in headless Chromium: the keyboard (composer focused on load, the
skip link, one tab stop for the transcript with roving focus, load to send in one key press),
Copy as markdown, the colour theme and the shortcuts dialog, a message too long for the context
(compact and retry, edit to shorten), memory note names and a superseded summary's heading.

Screenshots of the changed screens go to /tmp/ui-shots (not committed)."""

import json
import re
from pathlib import Path

import httpx
import pytest

from tests.browser.support import (
    api_headers,
    assistant,
    create_bot,
    create_streamer,
    current_session_id,
    log_in,
    open_new_chat,
    send,
)
from tests.fakeopenai import Reply

# Counts every chat or bot of the demo user: a platform of its own (tests/browser/conftest.py).
pytestmark = [pytest.mark.browser, pytest.mark.crossprocess, pytest.mark.own_platform]

SHOTS = Path("/tmp/ui-shots")
MARKDOWN = "Here is **the plan**:\n\n- pack the *tent*\n- check the `weather`\n"
DONE = '#transcript article.msg[data-role="assistant"][data-status="complete"]'


def shot(page, name: str) -> None:
    SHOTS.mkdir(exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"))


def active_id(page) -> str:
    return page.evaluate("document.activeElement && (document.activeElement.id || '')")


def active_seq(page):
    return page.evaluate("document.activeElement.dataset.seq || null")


def tab_stops_to_composer(page, limit: int = 60) -> list[str]:
    """Each element Tab reaches from the skip link (the page's first stop) up to the composer."""
    page.focus(".skip-link")
    stops = []
    for _ in range(limit):
        page.keyboard.press("Tab")
        stops.append(
            page.evaluate(
                """() => {
                    const n = document.activeElement;
                    return n.id || (n.getAttribute('aria-label') || n.textContent).trim();
                }"""
            )
        )
        if stops[-1] == "composer":
            return stops
    pytest.fail(f"the composer was not reached in {limit} Tab presses: {stops}")


def fill_chat(base: str, headers: dict, bot: dict, exchanges: int) -> int:
    session = httpx.post(
        f"{base}/api/v1/sessions/", json={"bot": bot["id"]}, headers=headers
    ).json()
    for i in range(exchanges):
        response = httpx.post(
            f"{base}/api/v1/sessions/{session['id']}/messages/",
            json={"content": f"Note {i}: the locker of room {100 + i} is blue.", "wait": True},
            headers=headers,
            timeout=120,
        )
        assert response.status_code == 201, response.text
    return session["id"]


def test_keyboard_from_load_to_send_in_a_70_message_chat(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Keyboard", model="builtin/recall")
    session_id = fill_chat(server_url, headers, bot, 35)

    log_in(page, server_url, next_path=f"/chat/{session_id}/")
    page.wait_for_selector('#transcript[aria-busy="false"]')
    page.wait_for_selector("#connection-status[data-state=live]", state="attached")
    assert page.locator("#transcript article.msg").count() == 70
    # Focus starts in the composer: zero presses from load.
    page.wait_for_function(
        "() => document.activeElement && document.activeElement.id === 'composer'"
    )
    # Nothing inside the transcript is in the tab order, however many messages it holds.
    assert (
        page.evaluate(
            "[...document.querySelectorAll('#transcript *')].filter(n => n.tabIndex >= 0).length"
        )
        == 0
    )
    # From the skip link: 32 presses, whatever the length of the chat (it was 84 with every
    # message's Pin button in the way); the transcript is one stop. "Add a bot" is the room
    # bar's (a one-bot chat: who answers is not a choice yet, so its select is disabled);
    # "Usage", "Settings" and, for staff such as demo, "Invitations" are in every page's header.
    assert tab_stops_to_composer(page) == [
        "chat-platform",
        "theme-toggle",
        "Bots",
        "Usage",
        "Settings",
        "Invitations",
        "Admin",
        "Log out",
        "chat-search",
        "bot-select",
        "new-session",
        # staff with only built-in bots: the open first-run card (its kind's radio group is one
        # stop, named by its label, not its text)
        "Connect a model provider",
        "",
        "first-run-url",
        "first-run-key",
        "first-run-connect",
        "session-search",
        "Note 0: the locker of room 100 is blue. (open)",
        "Delete chat “Note 0: the locker of room 100 is blue.”",
        # every chat is listed, each with its bot: the seeded demo room too
        "Demo room: two bots, two memories, Recall (built-in)",
        "Delete chat “Demo room: two bots, two memories”",
        "Export and import",
        "New bot",
        "rename-session",
        "export-markdown",
        "export-json",
        "Chat settings",
        "memory-toggle",
        "shortcuts-open",
        "Add a bot",
        "transcript",
        "composer",
    ]
    # The skip link goes to the composer.
    page.focus(".skip-link")
    assert page.evaluate("document.activeElement.textContent") == "Skip to the message box"
    page.keyboard.press("Enter")
    assert active_id(page) == "composer"

    # Roving focus: Shift+Tab to the transcript, arrows between messages, Enter for actions.
    page.keyboard.press("Shift+Tab")
    assert active_id(page) == "transcript"
    page.keyboard.press("ArrowUp")
    assert active_seq(page) == "70"
    page.keyboard.press("ArrowUp")
    page.keyboard.press("ArrowUp")
    assert active_seq(page) == "68"
    page.keyboard.press("Home")
    assert active_seq(page) == "1"
    page.keyboard.press("ArrowDown")
    assert active_seq(page) == "2"
    page.keyboard.press("Enter")
    assert page.evaluate("document.activeElement.textContent") == "Pin"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == "Regenerate"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == "What the model saw"
    page.keyboard.press("ArrowRight")
    assert page.evaluate("document.activeElement.textContent") == "Copy"
    page.keyboard.press("Escape")
    assert active_seq(page) == "2"
    page.keyboard.press("End")
    assert active_seq(page) == "70"
    page.keyboard.press("Tab")
    assert active_id(page) == "composer"
    shot(page, "keyboard-roving-1280")

    # Load to send is one key press: type, Enter.
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    page.wait_for_function(
        "() => document.activeElement && document.activeElement.id === 'composer'"
    )
    page.keyboard.type("Which room has the blue locker of note 3?")
    page.keyboard.press("Enter")
    page.wait_for_selector('#transcript article.msg[data-seq="72"][data-status="complete"]')
    assert page.locator("#transcript article.msg").count() == 72
    assert page.locator('#transcript article.msg[data-seq="71"] .msg-text').inner_text() == (
        "Which room has the blue locker of note 3?"
    )
    assert page.js_errors == []


def test_copy_a_message_as_markdown(server_url, desktop, fake):
    page = desktop
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    headers = api_headers(server_url)
    bot = create_streamer(server_url, headers, fake.url, name="Copier")
    fake.script(Reply(text=MARKDOWN))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Plan the *trip*, please")
    page.wait_for_selector(DONE)
    reply = assistant(page).last
    reply.locator("button.msg-copy").click()
    reply.locator("button.msg-copy:text('Copied')").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == MARKDOWN
    # The keyboard way: the user's message, focused, and c.
    user = page.locator('#transcript article.msg[data-role="user"]').last
    user.focus()
    page.keyboard.press("c")
    user.locator("button.msg-copy:text('Copied')").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == "Plan the *trip*, please"
    assert page.js_errors == []


def test_an_unknown_command_is_not_sent_and_a_leading_space_sends_it_as_text(
    server_url, desktop, fake
):
    """The hint said an unknown command needs a leading space to be sent as text, and Enter
    sent it all the same (a typo of /compact went to the bot and titled the chat)."""
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Slash")
    fake.script(Reply(text="Paths noted."))
    log_in(page, server_url)
    open_new_chat(page, bot)
    page.fill("#composer", "/compac")
    page.keyboard.press("Enter")
    hint = page.locator("#command-hint")
    hint.wait_for()
    assert hint.inner_text().startswith("Unknown command /compac: not sent.")
    assert page.input_value("#composer") == "/compac"
    assert page.locator("#transcript article.msg").count() == 0
    page.fill("#composer", " /etc is a folder")
    page.keyboard.press("Enter")
    page.wait_for_selector(DONE)
    assert fake.requests[-1]["messages"][-1]["content"].strip() == "/etc is a folder"
    assert page.js_errors == []


def body_background(page) -> str:
    return page.evaluate("getComputedStyle(document.body).backgroundColor")


LIGHT_BG = "rgb(246, 247, 249)"
DARK_BG = "rgb(21, 24, 29)"


def test_theme_toggle_is_remembered_and_applied_before_the_first_paint(server_url, chromium):
    context = chromium.new_context(viewport={"width": 1280, "height": 800}, color_scheme="dark")
    # Records the theme at the moment <body> is first parsed, before anything is painted.
    context.add_init_script(
        """new MutationObserver((_, observer) => {
             if (document.body) {
               window.__themeAtBody = document.documentElement.getAttribute('data-theme');
               observer.disconnect();
             }
           }).observe(document, {childList: true, subtree: true});"""
    )
    page = context.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    try:
        log_in(page, server_url)
        page.wait_for_selector("#composer:enabled")
        toggle = page.locator("#theme-toggle")
        # System (the emulated OS says dark), then light, then dark, then system again.
        assert toggle.text_content() == "Theme: System"
        assert body_background(page) == DARK_BG
        toggle.click()
        assert toggle.text_content() == "Theme: Light"
        assert page.evaluate("document.documentElement.dataset.theme") == "light"
        assert body_background(page) == LIGHT_BG
        assert page.evaluate("localStorage.getItem('chat-theme')") == "light"
        toggle.click()
        assert toggle.text_content() == "Theme: Dark"
        assert body_background(page) == DARK_BG

        page.reload()
        page.wait_for_selector("#composer:enabled")
        assert page.evaluate("window.__themeAtBody") == "dark"
        assert page.locator("#theme-toggle").text_content() == "Theme: Dark"
        shot(page, "theme-dark-1280")
        page.set_viewport_size({"width": 390, "height": 844})
        shot(page, "theme-dark-390")
        page.set_viewport_size({"width": 1280, "height": 800})

        # The d key (focus outside a text box) cycles on to system.
        page.locator("#theme-toggle").focus()
        page.keyboard.press("d")
        assert page.locator("#theme-toggle").text_content() == "Theme: System"
        assert page.evaluate("localStorage.getItem('chat-theme')") is None
        assert page.evaluate("document.documentElement.hasAttribute('data-theme')") is False
        # Typed into the composer, d is a letter.
        page.focus("#composer")
        page.keyboard.press("d")
        assert page.input_value("#composer") == "d"
        assert page.locator("#theme-toggle").text_content() == "Theme: System"

        # ? lists the shortcuts; Escape closes the list.
        page.fill("#composer", "")
        page.locator("#theme-toggle").focus()
        page.keyboard.press("?")
        dialog = page.locator("#shortcuts-dialog")
        dialog.wait_for()
        assert page.locator("#shortcuts-list dd").all_inner_texts() == [
            "Show this list",
            "Focus the message box",
            "Send the message (Shift Enter: a new line)",
            "Stop the reply being written",
            "New chat",
            "Search chats",
            "Change the theme (system, light, dark)",
            "Go to the messages (the newest)",
            "Move between messages",
            "Its actions (Copy, Pin…); ← → between them, Esc back",
            "Copy it as markdown",
        ]
        shot(page, "shortcuts-1280")
        page.keyboard.press("Escape")
        dialog.wait_for(state="hidden")
        # / searches the chats, i goes back to the composer.
        page.keyboard.press("/")
        assert active_id(page) == "session-search"
        page.keyboard.press("Escape")
        page.locator("#theme-toggle").focus()
        page.keyboard.press("i")
        assert active_id(page) == "composer"
        assert errors == []
    finally:
        context.close()


def test_a_message_too_long_offers_compact_and_retry_or_edit(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    # W 1024, R 256 -> a call may send 768 tokens.
    bot = create_bot(
        server_url,
        headers,
        name="Small window",
        model="builtin/recall",
        context_window=1024,
        max_output_tokens=256,
    )
    log_in(page, server_url)
    open_new_chat(page, bot)
    session_id = current_session_id(page)
    big = httpx.post(
        f"{server_url}/api/v1/sessions/{session_id}/messages/",
        # Small talk: what compaction keeps of it is short.
        json={
            "content": "We chatted about the weather for a while and moved on. " * 40,
            "wait": True,
        },
        headers=headers,
        timeout=30,
    ).json()["user_message"]
    pinned = httpx.post(f"{server_url}/api/v1/messages/{big['id']}/pin/", headers=headers)
    assert pinned.status_code == 200, pinned.text
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')

    text = "bravo " * 200  # fits alone, not beside the pinned message
    send(page, text.strip())
    failed = page.locator('#transcript article.msg[data-role="assistant"][data-status="failed"]')
    failed.wait_for()
    assert failed.locator(".msg-error").get_attribute("data-code") == "context_too_large"
    question = page.locator('#transcript article.msg[data-role="user"]').last
    question_id = question.get_attribute("data-message-id")
    fit = httpx.get(f"{server_url}/api/v1/messages/{question_id}/fit/", headers=headers).json()
    assert fit["fits"] is False and fit["budget_tokens"] == 768
    over = f"{fit['over_tokens']:,}"
    words = (
        f"{over} tokens over: with the system prompt, pinned messages and summaries it needs "
        f"{fit['required_tokens']:,} tokens, and a call may send 768."
    )
    failed.locator(".msg-error-fit").wait_for()
    assert failed.locator(".msg-error-fit").inner_text() == words
    # The fix, not a plain Retry.
    assert failed.locator(".msg-actions button").all_inner_texts() == [
        "Compact and retry",
        "Edit to shorten",
    ]
    shot(page, "too-long-1280")

    # Edit to shorten: the text back in the composer, with the numbers.
    failed.locator("button.msg-edit-shorten").click()
    assert page.input_value("#composer") == text.strip()
    assert active_id(page) == "composer"
    page.wait_for_selector(f"#composer-note:text('Shorten it by at least {over} tokens')")
    assert page.inner_text("#composer-note") == f"Shorten it by at least {over} tokens: {words}"
    page.fill("#composer", "")

    # Compacting cannot make room while the big message is pinned: said so, nothing re-sent.
    users_before = page.locator(
        '#transcript article.msg[data-role="user"][data-kind="chat"]'
    ).count()
    failed.locator("button.msg-compact-retry").click()
    page.wait_for_selector("#error-banner:not([hidden])")
    banner = page.inner_text("#error-banner-text")
    assert banner.startswith("Still too long after compacting: "), banner
    assert banner.endswith(" Edit it to shorten it."), banner
    assert page.locator('#transcript article.msg[data-role="user"][data-kind="chat"]').count() == (
        users_before
    )

    # Unpinned, the message fits once compacted: Compact and retry sends it again.
    httpx.post(f"{server_url}/api/v1/messages/{big['id']}/unpin/", headers=headers)
    page.click("#error-banner-dismiss")
    failed.locator("button.msg-compact-retry").click()
    page.wait_for_function(
        "n => document.querySelectorAll("
        '\'#transcript article.msg[data-role="user"][data-kind="chat"]\').length === n',
        arg=users_before + 1,
    )
    page.locator(DONE).last.wait_for()
    chats = page.locator('#transcript article.msg[data-role="user"][data-kind="chat"] .msg-text')
    assert chats.all_inner_texts()[-2:] == [text.strip(), text.strip()]
    notices = page.locator('#transcript article.msg-notice[data-role="system"] .msg-text')
    assert notices.count() >= 2
    assert page.js_errors == []


def test_memory_note_names_are_derived_and_errors_say_what_was_wrong(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Notes", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    page.click("#memory-toggle")
    page.click("#memory-add")
    page.fill("#memory-name", "Dentist Appointment")
    assert page.inner_text("#memory-name-hint") == "Saved as dentist_appointment"
    page.fill("#memory-description", "Dentist on Friday")
    long_body = "The dentist appointment is on Friday at 9:30." + " Bring the card." * 300
    page.fill("#memory-body", long_body)
    page.click("#memory-save")
    page.locator("#memory-record").wait_for()
    assert page.inner_text("#memory-record-name") == "dentist_appointment"
    # its size with a thousands separator (issue 32 item 9)
    assert re.fullmatch(
        r"Note · this chat · \d,\d{3} tokens", page.inner_text("#memory-record-meta")
    ), page.inner_text("#memory-record-meta")
    shot(page, "memory-note-1280")

    # The same name again: the panel says exactly what was wrong, and nothing is stored twice.
    page.click("#memory-back")
    page.click("#memory-add")
    page.fill("#memory-name", "dentist   APPOINTMENT!")
    assert page.inner_text("#memory-name-hint") == "Saved as dentist_appointment"
    page.fill("#memory-description", "Again")
    page.fill("#memory-body", "Again.")
    page.click("#memory-save")
    error = page.locator("#memory-form-error")
    error.wait_for()
    assert error.locator("p").all_inner_texts() == [
        "Not saved:",
        "Name: A record named 'dentist_appointment' already exists in this chat.",
    ]
    # A name with no letter a–z or digit is refused before any request, in words.
    page.fill("#memory-name", "日本")
    assert (
        page.inner_text("#memory-name-hint")
        == "Use at least one letter a–z or digit: “日本” has none."
    )
    page.click("#memory-save")
    assert error.locator("p").all_inner_texts() == [
        "Not saved:",
        "Name: Use at least one letter a–z or digit: “日本” has none.",
    ]
    session_id = current_session_id(page)
    records = httpx.get(
        f"{server_url}/api/v1/sessions/{session_id}/records/", headers=headers
    ).json()
    assert [r["name"] for r in records] == ["dentist_appointment"]
    assert page.js_errors == []


def test_a_superseded_summary_is_not_headed_as_what_the_bot_sees(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Summaries", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Hello there.")
    page.wait_for_selector(DONE)
    session_id = current_session_id(page)

    def summary(sid: int, status: str, first: int, last: int) -> dict:
        return {
            "id": sid, "session": int(session_id), "level": 1, "text": f"Summary {sid}.",
            "token_count": 10, "first_seq": first, "last_seq": last, "source_tokens": 100,
            "model": "builtin/extractive", "trigger": "soft", "status": status, "parents": [],
            "retention": 1.0, "missing_facts": [], "focus": "",
            "created_at": "2026-01-01T00:00:00Z",
        }  # fmt: skip

    # The page as it renders what the API says (a fusion leaves the parent superseded).
    listed = [summary(2, "active", 1, 2), summary(1, "superseded", 1, 1)]
    page.route(
        re.compile(r".*/api/v1/sessions/\d+/summaries/$"),
        lambda route: route.fulfill(
            status=200, content_type="application/json", body=json.dumps(listed)
        ),
    )
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    old = page.locator('.compaction-marker[data-summary-id="1"]')
    new = page.locator('.compaction-marker[data-summary-id="2"]')
    old.locator("summary").click()
    new.locator("summary").click()
    assert old.locator(".marker-summary h3").inner_text() == (
        "Earlier summary, merged into a later one (the bot no longer sees it)"
    )
    assert new.locator(".marker-summary h3").inner_text() == "Summary the bot now sees"
    assert page.js_errors == []
