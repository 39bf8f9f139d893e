"""Edit a sent message, regenerate a reply and flip between the versions, in headless Chromium
against the embedded platform (issue 18, Deliver 1)."""

import contextlib
import re

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError

from tests.browser.support import (
    api_headers,
    create_streamer,
    current_session_id,
    log_in,
    open_new_chat,
    send,
)
from tests.fakeopenai import Reply

# Counts every chat or bot of the demo user: a platform of its own (tests/browser/conftest.py).
pytestmark = [pytest.mark.browser, pytest.mark.crossprocess, pytest.mark.own_platform]


def _texts(page):
    return [
        t.strip()
        for t in page.locator(
            '#transcript article.msg[data-kind="chat"] .msg-text'
        ).all_inner_texts()
    ]


def _shows(page, texts):
    """Wait until the transcript's chat messages read ``texts``, in order. A new branch's reply
    can be drawn from its frames before the chat's first read has drawn the question (CI runs
    under load read the page in between): both come, in either order."""
    with contextlib.suppress(PlaywrightTimeoutError):  # then the assertion says what it read
        page.wait_for_function(
            """(want) => {
                const got = [...document.querySelectorAll(
                    '#transcript article.msg[data-kind="chat"] .msg-text'
                )].map((node) => node.innerText.trim());
                return JSON.stringify(got) === JSON.stringify(want);
            }""",
            arg=texts,
        )
    assert _texts(page) == texts


def _flip(page):
    return page.locator("#transcript .msg-branches .branch-count")


def test_edit_regenerate_and_flip_between_versions(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Brancher")
    fake.script(
        Reply(text="Paris is lovely."),
        Reply(text="Rome is lovely."),
        Reply(text="Rome is ancient."),
        Reply(text="Back in Paris."),
    )
    log_in(page, server_url)
    open_new_chat(page, bot)
    original = current_session_id(page)
    send(page, "Tell me about Paris")
    page.locator("#transcript .msg-text", has_text="Paris is lovely.").wait_for()

    # Edit the question: a new version, answered; the old one is one flip away.
    question = page.locator('#transcript article.msg[data-role="user"][data-seq="1"]')
    question.locator(".msg-edit").click()
    page.fill("#transcript .msg-edit-box", "Tell me about Rome")
    page.click("#transcript .msg-edit-save")
    _shows(page, ["Tell me about Rome", "Rome is lovely."])
    edited = current_session_id(page)
    assert edited != original
    _flip(page).wait_for()
    assert _flip(page).inner_text() == "2/2"
    asked = [
        (m["role"], m["content"]) for m in fake.requests[-1]["messages"] if m["role"] != "system"
    ]
    assert asked == [("user", "Tell me about Rome")]

    # Regenerate the reply on the new branch: versions of the reply, not of the question.
    reply = page.locator('#transcript article.msg[data-role="assistant"][data-seq="2"]')
    reply.locator(".msg-regenerate").click()
    _shows(page, ["Tell me about Rome", "Rome is ancient."])
    page.wait_for_function(
        "() => document.querySelectorAll('#transcript .msg-branches').length === 2"
    )
    assert _flip(page).all_inner_texts() == ["2/2", "2/2"]

    # Flip the question back to the first version and continue that one.
    page.locator('#transcript article.msg[data-seq="1"] .branch-prev').click()
    _shows(page, ["Tell me about Paris", "Paris is lovely."])
    assert current_session_id(page) == original
    _flip(page).first.wait_for()  # the versions are read after the messages
    assert _flip(page).all_inner_texts() == ["1/2"]
    send(page, "And the food?")
    page.locator("#transcript .msg-text", has_text="Back in Paris.").wait_for()
    asked = [
        (m["role"], m["content"]) for m in fake.requests[-1]["messages"] if m["role"] != "system"
    ]
    assert asked == [
        ("user", "Tell me about Paris"),
        ("assistant", "Paris is lovely."),
        ("user", "And the food?"),
    ]
    # One chat per family of branches in the list: the open one (beside the seeded demo room,
    # another bot's: every chat is listed).
    listed = page.locator("#session-list li.session-item .session-bot").all_inner_texts()
    assert listed.count(bot["name"]) == 1
    assert len(listed) == 2
    assert page.js_errors == []


def test_a_new_branchs_reply_waits_for_its_question(server_url, desktop, fake):
    """A chat opened while its reply streams draws nothing before its first read: the reply's
    frames can come first (they did in CI runs under load), and a reply alone, its question
    popping in above it a moment later, is not the conversation. The branch's first read is held
    until the reply's frames have drawn it; it stays hidden until the read lands, then both show,
    question first."""
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Early frames")
    slow = ["Rome ", "is ", "lovely ", "in ", "the ", "spring."]
    fake.script(Reply(text="Paris is lovely."), Reply(chunks=slow, delay_between_chunks=0.4))
    log_in(page, server_url)
    open_new_chat(page, bot)
    original = current_session_id(page)
    send(page, "Tell me about Paris")
    page.locator("#transcript .msg-text", has_text="Paris is lovely.").wait_for()

    held, released = [], []
    branch_read = re.compile(r".*/api/v1/sessions/(\d+)/messages/(\?.*)?$")

    def is_branch_read(url):
        match = branch_read.match(url)
        return bool(match) and match.group(1) != original

    def hold(route):
        if route.request.method != "GET" or released:
            route.continue_()
            return
        held.append(route)

    page.route(is_branch_read, hold)
    page.locator('#transcript article.msg[data-seq="1"] .msg-edit').click()
    page.fill("#transcript .msg-edit-box", "Tell me about Rome")
    page.click("#transcript .msg-edit-save")
    # The first read and the socket's resync on open: each is held.
    for _ in range(600):
        if held:
            break
        page.wait_for_timeout(50)
    assert held
    reply = page.locator('#transcript article.msg[data-role="assistant"]')
    reply.wait_for(state="attached")  # drawn from its frames: the read is still held
    assert page.locator('#transcript article.msg[data-role="user"]').count() == 0
    assert reply.is_hidden()
    released.append(True)
    for route in held:
        route.continue_()
    _shows(page, ["Tell me about Rome", "Rome is lovely in the spring."])
    question = page.locator('#transcript article.msg[data-role="user"]')
    assert question.is_visible() and reply.is_visible()
    assert page.js_errors == []
