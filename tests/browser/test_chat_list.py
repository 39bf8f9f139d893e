"""The chat list lists every chat (issue 32, Deliver 8), in headless Chromium against the
embedded platform: chats with two bots (and the seeded demo room) are all listed, each with its
bot's avatar and name; choosing a bot in the Bot picker keeps the open chat and the list as they
are, and is the bot the next new chat starts with (opening chats leaves that choice alone until
the new chat is made; then the picker offers the open chat's bot again)."""

from urllib.parse import urlsplit

import httpx
import pytest

from tests.browser.support import api_headers, create_bot, current_session_id, log_in, send

# Counts every chat or bot of the demo user: a platform of its own (tests/browser/conftest.py).
pytestmark = [pytest.mark.browser, pytest.mark.crossprocess, pytest.mark.own_platform]


def _rows(page):
    return page.locator("#session-list li.session-item").evaluate_all(
        """nodes => nodes.map(n => [
          n.querySelector('.session-title').textContent,
          n.querySelector('.session-bot').textContent,
          n.querySelector('.avatar').textContent,
          n.classList.contains('is-current'),
        ])"""
    )


def test_every_chat_is_listed_and_the_bot_picker_keeps_the_open_chat(desktop, server_url):
    page, base = desktop, server_url
    headers = api_headers(base)
    alpha = create_bot(base, headers, name="Alpha", model="builtin/recall")
    beta = create_bot(base, headers, name="Beta", model="builtin/recall")
    made = {}
    for bot, title in ((alpha, "Alpha chat"), (beta, "Beta chat")):
        response = httpx.post(
            f"{base}/api/v1/sessions/", json={"bot": bot["id"], "title": title}, headers=headers
        )
        assert response.status_code == 201, response.text
        made[title] = str(response.json()["id"])

    log_in(page, base, next_path=f"/chat/{made['Alpha chat']}/")
    page.wait_for_selector("#session-list li.is-current")
    page.wait_for_function("() => document.querySelectorAll('#session-list li').length === 3")
    assert _rows(page) == [
        ["Beta chat", "Beta", "BE", False],
        ["Alpha chat", "Alpha", "AL", True],
        ["Demo room: two bots, two memories", "Recall (built-in) + room", "R", False],
    ]
    # the picker offers the open chat's bot for the next one
    assert page.locator("#bot-select").input_value() == str(alpha["id"])

    page.select_option("#bot-select", value=str(beta["id"]))
    page.wait_for_selector("#bot-info .bot-model")
    assert urlsplit(page.url).path == f"/chat/{made['Alpha chat']}/"
    assert current_session_id(page) == made["Alpha chat"]
    assert page.locator("#conversation-title").inner_text() == "Alpha chat"
    assert [row[:2] for row in _rows(page)] == [
        ["Beta chat", "Beta"],
        ["Alpha chat", "Alpha"],
        ["Demo room: two bots, two memories", "Recall (built-in) + room"],
    ]

    # the choice stands while other chats are opened, until a new chat is made with it
    page.click(f"#session-list li[data-session-id='{made['Beta chat']}'] .session-open")
    page.wait_for_url(f"**/chat/{made['Beta chat']}/")
    page.click(f"#session-list li[data-session-id='{made['Alpha chat']}'] .session-open")
    page.wait_for_url(f"**/chat/{made['Alpha chat']}/")
    page.wait_for_selector(f"#session-list li.is-current[data-session-id='{made['Alpha chat']}']")
    assert page.locator("#bot-select").input_value() == str(beta["id"])

    page.click("#new-session")
    page.wait_for_url(lambda url: urlsplit(url).path not in {f"/chat/{made['Alpha chat']}/"})
    page.wait_for_function("() => document.querySelectorAll('#session-list li').length === 4")
    created = current_session_id(page)
    fresh = httpx.get(f"{base}/api/v1/sessions/{created}/", headers=headers).json()
    assert (fresh["bot"], fresh["bot_info"]["name"]) == (beta["id"], "Beta")
    assert _rows(page)[0][1:] == ["Beta", "BE", True]
    # made: opening a chat offers its bot again
    page.click(f"#session-list li[data-session-id='{made['Alpha chat']}'] .session-open")
    page.wait_for_url(f"**/chat/{made['Alpha chat']}/")
    page.wait_for_function(
        "(id) => document.getElementById('bot-select').value === id", arg=str(alpha["id"])
    )
    assert page.js_errors == []


def test_the_composer_waits_for_the_chat_the_address_names(desktop, server_url):
    """Typing with no chat open starts a new chat with the selected bot: while the first list
    read is under way the bot is chosen but the address's chat not yet open, so the composer
    stays disabled until it is (a fast first "hello" in the demo room once went to a new chat)."""
    page, base = desktop, server_url
    headers = api_headers(base)
    bot = create_bot(base, headers, name="Waiter", model="builtin/recall")
    made = httpx.post(
        f"{base}/api/v1/sessions/", json={"bot": bot["id"], "title": "Named"}, headers=headers
    ).json()
    chats_before = len(httpx.get(f"{base}/api/v1/sessions/", headers=headers).json())
    held = []

    def hold_the_list(route):
        if route.request.method == "GET" and not held:
            held.append(route)  # answered below, once the composer was looked at
        else:
            route.continue_()

    page.route("**/api/v1/sessions/", hold_the_list)
    log_in(page, base, next_path=f"/chat/{made['id']}/")
    page.wait_for_selector(f"#bot-select option[value='{bot['id']}']", state="attached")
    while not held:
        page.wait_for_timeout(50)
    assert page.locator("#bot-select").input_value() != ""  # a bot is chosen…
    assert page.is_disabled("#composer")  # …and still nothing can be typed
    held[0].continue_()
    page.wait_for_selector("#composer:enabled")
    send(page, "hello")
    page.wait_for_function(
        "() => document.querySelectorAll('#transcript article.msg[data-role=user]').length === 1"
    )
    assert current_session_id(page) == str(made["id"])
    assert len(httpx.get(f"{base}/api/v1/sessions/", headers=headers).json()) == chats_before
    messages = httpx.get(f"{base}/api/v1/sessions/{made['id']}/messages/", headers=headers).json()
    messages = messages["results"] if isinstance(messages, dict) else messages
    assert [(m["role"], m["content"]) for m in messages][:1] == [("user", "hello")]
