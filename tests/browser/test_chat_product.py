"""The chat page as a product, in headless Chromium against the embedded platform: markdown,
failures in plain words with Retry, the context gauge, compaction markers, the memory panel,
URLs with Back/Forward, and the 390 px layout.

Screenshots of the main screens go to test-artifacts/; with ``UPDATE_SCREENSHOTS=1`` they also
replace the ones in docs/screenshots/ that the README shows.
"""

import contextlib
import json
import os
import re
from urllib.parse import urlsplit

import httpx
import pytest

from tests.browser.support import (
    ARTIFACTS,
    SCREENSHOTS,
    api_headers,
    assistant,
    create_bot,
    create_streamer,
    current_session_id,
    let_handlers_run,
    log_in,
    open_new_chat,
    send,
    shoot,
    wait_until_held,
)
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

MARKDOWN = (
    "Here is **the plan**:\n\n"
    "- pack the *tent*\n"
    "- check the `weather`\n\n"
    "```python\n"
    "def hello(name):\n"
    "    return f'Hello, {name}!'\n"
    "```\n\n"
    "> Bring water."
)


# Long enough that a summary is shorter than the messages it replaces.
FILLER = (
    " We talked about it for a while, went back and forth over the details, compared a few"
    " options, looked at what had gone wrong last time, and agreed to write it all down so that"
    " nobody would have to ask again next week."
    # Enough that /compact lowers the context (docs/compaction.md "/compact").
    " It took longer than it should have, as these things do, but everyone was fairly relaxed"
    " about it and the coffee was good."
)
CHATTY = [
    "My sister Ada lives in Lisbon and works as a marine biologist." + FILLER,
    "Our team meets every Tuesday at 10:00 in room 4B." + FILLER,
    "The launch date for project Falcon is 14 March." + FILLER,
    "The budget for the offsite is 4,000 euros." + FILLER,
]


def answer(page, text: str) -> None:
    page.locator("#transcript article.msg .msg-text", has_text=text).wait_for()


def gauge_pressure(page) -> int:
    return int(page.locator("#context-gauge").get_attribute("data-pressure"))


def chunked(text: str, size: int = 12) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def test_markdown_reply_renders_while_streaming_with_gauge_and_title(server_url, desktop, fake):
    page = desktop
    headers = api_headers(server_url)
    bot = create_streamer(server_url, headers, fake.url, name="Markdown")
    fake.script(Reply(text=MARKDOWN, chunks=chunked(MARKDOWN), delay_between_chunks=0.05))

    log_in(page, server_url)
    open_new_chat(page, bot)
    gauge = page.locator("#context-gauge")
    gauge.wait_for()
    # Every part and every mark is on screen with its number, no hover needed.
    for part in ("system", "pinned", "summaries", "memory_index", "history"):
        item = page.locator(f'#gauge-legend [data-part="{part}"]')
        assert item.is_visible(), part
        assert re.fullmatch(r"\D+\s+[\d,]+", item.inner_text().strip()), item.inner_text()
    # The marks in a person's words (issue 18, defect 7), each with its exact number.
    words = {
        "target": "Compaction lands at",
        "soft": "Compacts in the background at",
        "hard": "Compacts before replying at",
    }
    for mark, label in words.items():
        item = page.locator(f'#gauge-legend [data-mark="{mark}"]')
        assert item.is_visible(), mark
        assert re.fullmatch(re.escape(label) + r"\s+[\d,]+", item.inner_text().strip()), mark
        assert page.locator(f'#gauge-bar [data-mark="{mark}"]').count() == 1
    assert not re.search(r"\b(soft|hard|target)\b", page.inner_text("#context-gauge"))
    before = gauge_pressure(page)

    send(page, "Plan a camping trip for Saturday\nwith two friends")
    reply = assistant(page).last
    # Rendered while it streams: the bold text appears before the reply is complete.
    reply.locator(".msg-text strong").first.wait_for()
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    text = reply.locator(".msg-text")
    assert text.locator("strong").inner_text() == "the plan"
    assert text.locator("li").all_inner_texts() == ["pack the tent", "check the weather"]
    assert text.locator("blockquote").inner_text().strip() == "Bring water."
    code = text.locator(".code-block")
    assert code.locator(".code-lang").inner_text() == "python"
    assert code.locator("pre code").inner_text().strip() == (
        "def hello(name):\n    return f'Hello, {name}!'"
    )
    assert code.locator("pre code .hljs-keyword").count() >= 1  # highlighted
    assert "**" not in text.inner_text()
    copy = code.locator("button.code-copy")
    copy.click()
    page.wait_for_function("() => document.querySelector('.code-copy').textContent === 'Copied'")

    # The gauge moved, and the chat took its title from the first line of the first message.
    page.wait_for_function(
        f"() => +document.getElementById('context-gauge').dataset.pressure > {before}"
    )
    page.wait_for_selector("#conversation-title:text('Plan a camping trip for Saturday')")
    current = page.locator("#session-list li.is-current .session-title")
    assert current.inner_text() == "Plan a camping trip for Saturday"
    shoot(page, "chat-markdown")
    page.locator("#context-gauge").screenshot(path=str(ARTIFACTS / "gauge.png"))
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        page.locator("#context-gauge").screenshot(path=str(SCREENSHOTS / "gauge.png"))

    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    assert assistant(page).last.locator(".msg-text strong").inner_text() == "the plan"
    assert assistant(page).last.locator(".code-copy").is_visible()
    assert page.js_errors == []


def test_with_compaction_off_the_gauge_shows_no_compaction_marks(server_url, desktop):
    """Issue 32, Deliver 5: with compaction off no threshold acts, so the gauge draws no marks
    and never says compaction is due, even past where it would be (W 3,000, R 500: B 2,500,
    whose soft mark would be 1,250)."""
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(
        server_url,
        headers,
        name="Uncompacted",
        model="builtin/recall",
        context_window=3000,
        max_output_tokens=500,
        compaction_enabled=False,
    )
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, " ".join(CHATTY * 4))
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    page.wait_for_function(
        "() => +document.getElementById('context-gauge').dataset.pressure > 1250"
    )
    total = page.locator("#gauge-total").inner_text()
    assert re.fullmatch(r"[\d,]+ of 2,500 tokens \(\d+%\)", total), total
    assert page.locator("#context-gauge").get_attribute("data-level") == "ok"
    assert page.locator("#gauge-bar [data-mark]").count() == 0
    assert page.locator("#gauge-legend [data-mark]").count() == 0
    assert "ompaction" not in page.inner_text("#context-gauge")
    assert page.js_errors == []


def test_a_context_read_that_answers_after_the_frame_does_not_draw_older_numbers(
    server_url, desktop
):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Gauged", model="builtin/recall")
    listed = httpx.get(f"{server_url}/api/v1/sessions/", headers=headers).json()
    chats_before = {f"/api/v1/sessions/{chat['id']}/context/" for chat in listed}
    # The new chat's own context read is answered with the empty chat's numbers, but only after
    # the reply's context.updated frame has drawn the newer ones.
    held = []

    def hold_first_read(route):
        if held or urlsplit(route.request.url).path in chats_before:
            route.continue_()
        else:
            held.append((route, route.fetch()))

    def is_context_read(url):
        return urlsplit(url).path.endswith("/context/")

    # The pressure of each context.updated frame the page receives, in order: under load a
    # context read during the turn can draw a passing number (its recall round in the request)
    # before the reply's frame draws the settled one; the test reads the gauge after the frame.
    frames = []

    def on_frame(payload):
        with contextlib.suppress(ValueError, KeyError, TypeError):
            frame = json.loads(payload)
            if frame.get("type") == "context.updated":
                frames.append(frame["context"]["pressure"])

    page.on("websocket", lambda ws: ws.on("framereceived", on_frame))
    page.route(is_context_read, hold_first_read)
    log_in(page, server_url)
    open_new_chat(page, bot)
    wait_until_held(page, held)
    sent = len(frames)
    send(page, " ".join(CHATTY))
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    for _ in range(600):
        if len(frames) > sent:
            break
        page.wait_for_timeout(50)
    assert len(frames) > sent, "no context.updated frame after the reply"
    page.wait_for_function(
        f"() => document.getElementById('context-gauge').dataset.pressure === '{frames[-1]}'"
    )
    after_reply = gauge_pressure(page)
    route, older = held[0]
    assert older.json()["pressure"] < after_reply
    with page.expect_response(lambda response: is_context_read(response.url)) as late:
        route.fulfill(response=older)
    late.value.finished()
    page.unroute(is_context_read)
    let_handlers_run(page)
    assert gauge_pressure(page) == after_reply
    assert page.js_errors == []


def test_empty_stopped_reply_says_so(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Slow")
    fake.script(Reply(text="never shown", chunks=["never ", "shown"], stall_after=0, stall=60))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Take your time.")
    # Not yet a word of it: "pending" from its frame, or "streaming" when a read of the chat
    # landed after the worker took it (a CI run under load saw only that).
    page.wait_for_selector(
        '#transcript article.msg[data-role="assistant"]'
        ':is([data-status="pending"], [data-status="streaming"])'
    )
    page.click("#stop")
    reply = page.locator('#transcript article.msg[data-finish-reason="stopped"]')
    reply.wait_for()
    assert reply.locator(".msg-status").inner_text() == "Stopped"
    assert reply.locator(".msg-note").inner_text() == "Stopped before any text."
    assert page.js_errors == []


def test_a_reply_with_no_text_says_so(server_url, desktop, fake):
    """A model that answers with no text at all (finish_reason stop, empty content): the reply
    says so instead of showing a bare author line."""
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Mute")
    fake.script(Reply(text="", chunks=[]))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Say nothing.")
    reply = page.locator('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    reply.wait_for()
    assert reply.locator(".msg-note").inner_text() == "The model answered with no text."
    assert page.js_errors == []


def test_right_to_left_text_reads_right_to_left(server_url, desktop, fake):
    """Hebrew or Arabic in a message and in the composer take their own direction (dir=auto):
    they were laid out left to right, punctuation at the wrong end."""
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Echo RTL")
    fake.script(Reply(text="\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd!"))
    log_in(page, server_url)
    open_new_chat(page, bot)
    page.fill("#composer", "\u0645\u0631\u062d\u0628\u0627")
    assert page.evaluate("getComputedStyle(document.getElementById('composer')).direction") == "rtl"
    send(page, "\u0645\u0631\u062d\u0628\u0627!")
    reply = page.locator('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    reply.wait_for()
    directions = page.evaluate(
        "[...document.querySelectorAll('#transcript .msg-text')]"
        ".map(n => getComputedStyle(n).direction)"
    )
    assert directions == ["rtl", "rtl"]
    assert page.js_errors == []


MATH = (
    "Euler: $e^{i\\pi} + 1 = 0$, though it costs $5 and $10.\n\n"
    "$$\n\\int_0^1 x^2\\,dx = \\frac{1}{3}\n$$\n\n"
    "In code it stays as typed: `$x$`."
)


def test_latex_math_in_a_reply_is_drawn_by_the_vendored_katex(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Math")
    fake.script(Reply(text=MATH))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Some math, please")
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    text = assistant(page).last.locator(".msg-text")
    inline = text.locator(".math-inline")
    display = text.locator(".math-display")
    assert (inline.count(), display.count()) == (1, 1)
    # KaTeX drew both (its MathML keeps the TeX as written, for screen readers and copying).
    assert inline.locator(".katex annotation").text_content() == "e^{i\\pi} + 1 = 0"
    assert display.locator(".katex-display annotation").text_content() == (
        "\\int_0^1 x^2\\,dx = \\frac{1}{3}"
    )
    assert display.locator(".katex-html .mfrac").count() == 1
    # Dollars that are money, and math in code, stay text.
    assert "though it costs $5 and $10." in text.inner_text()
    assert text.locator("code").inner_text() == "$x$"
    assert page.js_errors == []
    shoot(page, "chat-math")


def test_failed_reply_in_plain_words_then_retry(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Flaky")
    fake.script(Reply(status=500, error_message="upstream exploded"))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Are you there?")

    failed = page.locator('#transcript article.msg[data-role="assistant"][data-status="failed"]')
    failed.wait_for()
    host = fake.url.split("//")[1].split("/")[0]
    assert failed.locator(".msg-error-title").inner_text() == (
        f"Could not get a reply from the model openai/fake-model at {host}."
    )
    assert "Check that it is running" in failed.locator(".msg-error-advice").inner_text()
    # The code is there for whoever needs it, but not shouted.
    code = failed.locator(".msg-error-code")
    assert code.is_hidden()
    failed.locator(".msg-error-details summary").click()
    assert code.inner_text() == "model_unavailable"
    assert page.locator("#error-banner").is_hidden()
    shoot(page, "failed-reply")

    fake.script(Reply(text="Yes, here now."))
    failed.locator("button.msg-retry").click()
    done = page.locator(
        '#transcript article.msg[data-role="assistant"][data-status="complete"] .msg-text'
    )
    done.filter(has_text="Yes, here now.").wait_for()
    # The reply ran again in place: the question is not sent a second time, on the page, in
    # the store, or to the model.
    users = page.locator('#transcript article.msg[data-role="user"] .msg-text').all_inner_texts()
    assert users == ["Are you there?"]
    assert page.locator("#transcript article.msg").count() == 2
    stored = httpx.get(
        f"{server_url}/api/v1/sessions/{current_session_id(page)}/messages/",
        headers=api_headers(server_url),
    ).json()
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "Are you there?", "complete"),
        ("assistant", "Yes, here now.", "complete"),
    ]
    sent = [m["content"] for m in fake.requests[-1]["messages"] if m["role"] == "user"]
    assert sent == ["Are you there?"]
    assert page.js_errors == []


def test_retry_of_an_earlier_failed_reply_says_why_it_cannot(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Earlier")
    fake.script(Reply(status=500, error_message="upstream exploded"), Reply(text="Second."))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "First?")
    failed = page.locator('#transcript article.msg[data-role="assistant"][data-status="failed"]')
    failed.wait_for()
    send(page, "Second?")
    answer(page, "Second.")
    calls = len(fake.requests)
    failed.locator("button.msg-retry").click()
    page.locator("#error-banner-text", has_text="last reply").wait_for()
    assert page.inner_text("#error-banner-text") == (
        "Only the chat's last reply can be retried; regenerate an earlier one."
    )
    assert failed.locator("button.msg-retry").is_enabled()
    assert len(fake.requests) == calls  # the refused Retry called no model
    assert page.js_errors == []


def test_oversized_message_shows_context_guidance(server_url, desktop, fake):
    page = desktop
    headers = api_headers(server_url)
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
    page.fill("#composer", "lorem ipsum dolor " * 600)
    page.press("#composer", "Enter")
    failed = page.locator('#transcript article.msg[data-role="assistant"][data-status="failed"]')
    failed.wait_for()
    error = failed.locator(".msg-error")
    assert error.get_attribute("data-code") == "context_too_large"
    assert failed.locator(".msg-error-title").inner_text() == (
        "This message is too long for the bot's context."
    )
    advice = failed.locator(".msg-error-advice").inner_text()
    for words in ("Shorten the message", "unpin", "/compact"):
        assert words in advice, advice
    assert fake.requests == [] or all("lorem ipsum" not in str(r) for r in fake.requests), (
        "no model call for a message that cannot fit"
    )
    assert page.js_errors == []


def test_compact_command_hint_and_marker(server_url, desktop):
    page = desktop
    log_in(page, server_url)
    page.wait_for_selector("#bot-select option", state="attached")
    bots = httpx.get(f"{server_url}/api/v1/bots/", headers=api_headers(server_url)).json()
    recall = next(b for b in bots if b["name"] == "Recall (built-in)")
    open_new_chat(page, recall)
    done = page.locator('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    for count, text in enumerate(CHATTY):
        send(page, text)
        done.nth(count).wait_for()

    page.fill("#composer", "/")
    hint = page.locator("#command-hint")
    hint.wait_for()
    assert "/compact [focus]" in hint.inner_text()
    page.fill("#composer", "/compact keep names and dates")
    page.press("#composer", "Enter")
    hint.wait_for(state="hidden")

    notice = page.locator('#transcript article.msg-notice[data-role="system"] .msg-text').last
    notice.wait_for()
    assert notice.inner_text().startswith("Context compacted:"), notice.inner_text()
    marker = page.locator(".compaction-marker").first
    marker.wait_for()
    assert marker.get_attribute("data-trigger") == "manual"
    assert re.match(
        r"Compacted messages 1–\d+ · [\d,]+ → [\d,]+ tokens",
        marker.locator(".marker-title").inner_text(),
    )
    marker.locator("summary").click()
    body = marker.locator(".marker-body")
    body.wait_for()
    assert body.locator(".marker-summary-text").inner_text().strip()
    assert "keep names and dates" in body.locator(".marker-facts").inner_text()
    assert re.search(
        r"Retention\s+(\d+% of the checked facts survived|not scored)", body.inner_text()
    )
    assert body.locator(".marker-missing h3").inner_text().startswith("Facts the summary missed")
    marker.scroll_into_view_if_needed()
    shoot(page, "compaction-marker")
    assert page.js_errors == []


def test_a_marker_redrawn_between_press_and_release_still_opens(server_url, desktop):
    """The markers are read again after a compaction notice (and up to three times after a
    compaction); a redraw that lands while the reader presses a marker keeps that element, so
    the click still opens it. Before, the redraw put a new, closed element under the release:
    no click, the marker stayed shut (a CI failure of the test above)."""
    page = desktop
    log_in(page, server_url)
    page.wait_for_selector("#bot-select option", state="attached")
    bots = httpx.get(f"{server_url}/api/v1/bots/", headers=api_headers(server_url)).json()
    open_new_chat(page, next(b for b in bots if b["name"] == "Recall (built-in)"))
    done = page.locator('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    for count, text in enumerate(CHATTY):
        send(page, text)
        done.nth(count).wait_for()
    notices = page.locator('#transcript article.msg-notice[data-role="system"]')
    send(page, "/compact")
    notices.nth(0).wait_for()
    marker = page.locator(".compaction-marker").first
    marker.wait_for()
    page.wait_for_load_state("networkidle")  # the compaction's own reads of the markers are done
    # Count the page's reads of the summaries as they are answered (the redraw follows each).
    page.evaluate(
        """() => {
        window.summariesRead = 0;
        const fetch = window.fetch;
        window.fetch = (...args) => fetch(...args).then((response) => {
          if (String(args[0]).includes("/summaries/")) {
            response.clone().text().then(() => setTimeout(() => window.summariesRead++, 0));
          }
          return response;
        });
        window.pressed = document.querySelector(".compaction-marker");
    }"""
    )
    held = []
    page.route("**/summaries/**", lambda route: held.append(route))
    send(page, "/compact")  # nothing left to compact: its notice reads the markers again
    notices.nth(1).wait_for()
    while not held:
        page.wait_for_timeout(50)
    head = marker.locator("summary")
    head.evaluate("(e) => e.scrollIntoView({ block: 'center' })")  # clear of the sticky header
    box = head.bounding_box()
    page.mouse.move(box["x"] + 10, box["y"] + box["height"] / 2)
    page.mouse.down()
    for route in held:
        route.continue_()
    page.unroute("**/summaries/**")
    page.wait_for_function("() => window.summariesRead > 0")  # redrawn while pressed
    page.evaluate("() => new Promise((done) => setTimeout(done, 100))")
    assert page.evaluate("() => document.querySelector('.compaction-marker') === window.pressed")
    page.mouse.up()

    marker.locator(".marker-body").wait_for(timeout=5_000)
    assert page.js_errors == []


def test_automatic_compaction_marker_survives_reload(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bots = httpx.get(f"{server_url}/api/v1/bots/", headers=headers).json()
    tight = next(b for b in bots if b["name"] == "Recall, tight budget (built-in)")
    log_in(page, server_url)
    open_new_chat(page, tight)
    session_id = current_session_id(page)

    # Long-ish messages over REST while the page watches: soon the context passes the soft mark.
    for i in range(12):
        text = f"Note {i}: " + " ".join(f"fact{i}_{j} is value{j}" for j in range(60))
        response = httpx.post(
            f"{server_url}/api/v1/sessions/{session_id}/messages/",
            json={"content": text, "wait": True},
            headers=headers,
            timeout=30,
        )
        assert response.status_code in (201, 422), response.text
        events = httpx.get(
            f"{server_url}/api/v1/compaction-events/?session={session_id}", headers=headers
        ).json()
        if any(e["outcome"] == "compacted" and e["trigger"] != "manual" for e in events):
            break
    else:
        pytest.fail(f"no automatic compaction after 12 messages: {events}")

    auto = page.locator('.compaction-marker:not([data-trigger="manual"])').first
    auto.wait_for()
    title = auto.locator(".marker-title").inner_text()
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    again = page.locator('.compaction-marker:not([data-trigger="manual"])').first
    again.wait_for()
    assert again.locator(".marker-title").inner_text() == title
    # Placed right after the last message it covers.
    last_seq = int(re.search(r"–(\d+)", title).group(1))
    # Its neighbours in the transcript: whatever precedes it is at or before the last message it
    # covers, whatever follows comes after (the page may hold only the newest messages).
    before, after = again.evaluate(
        """n => {
            const seq = (m) => (m && m.dataset.seq ? parseFloat(m.dataset.seq) : null);
            return [seq(n.previousElementSibling), seq(n.nextElementSibling)];
        }"""
    )
    assert before is not None or after is not None
    assert before is None or before <= last_seq
    assert after is None or after > last_seq
    assert page.js_errors == []


def test_memory_panel_add_search_read_and_looked_up_chip(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bots = httpx.get(f"{server_url}/api/v1/bots/", headers=headers).json()
    recall = next(b for b in bots if b["name"] == "Recall (built-in)")
    log_in(page, server_url)
    open_new_chat(page, recall)
    send(page, "Hello there.")
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')

    # "Add a note" stays where it is while the index loads: below the status, it moved 37 px
    # down when "Loading…" became three lines, and a click aimed at it landed on the status
    # (the form never opened: a flake of this test and of test_chat_essentials'). The index's
    # read is held until the button's place is read.
    held: list = []
    page.route("**/records/", lambda route: held.append(route))
    page.click("#memory-toggle")
    panel = page.locator("#memory-panel")
    panel.wait_for()
    wait_until_held(page, held)
    loading = page.locator("#memory-add").bounding_box()
    assert page.inner_text("#memory-status") == "Loading…"
    held[0].continue_()
    page.unroute("**/records/")
    page.locator("#memory-status", has_text="Nothing remembered yet.").wait_for()
    assert page.locator("#memory-add").bounding_box() == loading
    page.click("#memory-add")
    page.fill("#memory-name", "wifi_password")
    page.fill("#memory-description", "The office wifi password")
    page.fill("#memory-body", "The office wifi password is tangerine-42.")
    page.click("#memory-save")
    record = page.locator("#memory-record")
    record.wait_for()
    assert page.locator("#memory-record-name").inner_text() == "wifi_password"
    assert page.locator("#memory-record-body").inner_text() == (
        "The office wifi password is tangerine-42."
    )
    page.click("#memory-back")
    item = page.locator('#memory-list [data-name="wifi_password"]')
    item.wait_for()

    page.fill("#memory-search", "tangerine")
    page.press("#memory-search", "Enter")
    page.wait_for_selector("#memory-status:text('1 record matches')")
    assert page.locator("#memory-list .memory-item").count() == 1
    page.click('#memory-list [data-name="wifi_password"] button')
    record.wait_for()
    assert "tangerine-42" in page.locator("#memory-record-body").inner_text()
    shoot(page, "memory-panel")

    # Escape closes the panel; the bot then looks the note up to answer, and says so.
    page.keyboard.press("Escape")
    page.keyboard.press("Escape")
    panel.wait_for(state="hidden")
    send(page, "What is the office wifi password?")
    chip = page.locator("#transcript article.msg .tag-recall").last
    chip.wait_for()
    assert "wifi_password" in chip.inner_text() or "tangerine" in chip.inner_text()
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    page.locator("#transcript article.msg .tag-recall").last.wait_for()
    rows = page.locator('#transcript article.msg-tool[data-role="assistant"] .msg-text')
    assert rows.first.inner_text().startswith("Looked up: ")
    assert page.js_errors == []


def test_urls_back_forward_rename_and_search(server_url, desktop, fake):
    page = desktop
    headers = api_headers(server_url)
    bot = create_streamer(server_url, headers, fake.url, name="Navigator")
    fake.script(Reply(text="First answer."), Reply(text="Second answer."))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Alpha question")
    answer(page, "First answer.")
    first = current_session_id(page)
    open_new_chat(page, bot)
    send(page, "Beta question")
    answer(page, "Second answer.")
    second = current_session_id(page)
    assert page.url.endswith(f"/chat/{second}/")

    page.go_back()
    page.wait_for_url(f"**/chat/{first}/")
    answer(page, "First answer.")
    assert current_session_id(page) == first
    page.go_forward()
    page.wait_for_url(f"**/chat/{second}/")
    answer(page, "Second answer.")

    # Rename with the keyboard, then find it by searching the list.
    page.click("#rename-session")
    page.fill("#rename-input", "Beta renamed")
    page.press("#rename-input", "Enter")
    page.wait_for_selector("#conversation-title:text('Beta renamed')")
    page.fill("#session-search", "renamed")
    visible = page.locator("#session-list li.session-item:not([hidden]) .session-title")
    assert visible.all_inner_texts() == ["Beta renamed"]
    page.fill("#session-search", "")

    # A bookmark opens that chat directly.
    page.goto(f"{server_url}/chat/{first}/")
    answer(page, "First answer.")
    assert current_session_id(page) == first
    stored = httpx.get(f"{server_url}/api/v1/sessions/{second}/", headers=headers).json()
    assert stored["title"] == "Beta renamed"
    assert page.js_errors == []


def test_phone_layout_drawer_and_no_horizontal_scroll(server_url, phone, fake):
    page = phone
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Pocket")
    fake.script(Reply(text=MARKDOWN))
    # The chat list's first read is held until the drawer is open: the chat the page then opens
    # by itself must leave the drawer open (closing it under the user's finger failed this test
    # in a CI run where that read came late).
    held = []

    def hold_first_list_read(route):
        if route.request.method == "GET" and not held:
            held.append(route)
        else:
            route.continue_()

    def is_chat_list(url):
        return urlsplit(url).path == "/api/v1/sessions/"

    page.route(is_chat_list, hold_first_list_read)
    log_in(page, server_url)
    page.wait_for_selector("#bot-select:enabled", state="attached")
    wait_until_held(page, held)
    page.click("#drawer-toggle")
    held[0].continue_()
    page.unroute(is_chat_list)
    page.wait_for_selector("#session-list li.is-current", state="attached")
    page.wait_for_selector('#transcript:not([aria-busy="true"])')
    assert page.locator("#drawer-toggle").get_attribute("aria-expanded") == "true"
    assert page.locator("#sidebar").is_visible()
    open_new_chat(page, bot)
    # Choosing a chat closes the drawer and the chat starts at the top of the screen.
    page.wait_for_selector("#sidebar", state="hidden")
    send(page, "Show me the plan")
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    box = page.locator("#transcript").bounding_box()
    assert box["y"] < 260, box
    shoot(page, "mobile-chat")

    # The header's links are one menu on a phone; a one-bot chat's bar is the header's "+ Bot".
    assert page.locator(".app-nav").is_hidden()
    assert page.locator("#room-bar").is_hidden()
    page.click("#app-menu > summary")
    assert page.locator(".app-menu-nav a").all_inner_texts() == [
        "Bots",
        "Usage",
        "Settings",
        "Invitations",
        "Admin",
    ]
    assert page.locator(".app-menu-nav button[type=submit]").inner_text() == "Log out"
    page.click("#app-menu > summary")
    page.locator(".app-menu-nav").wait_for(state="hidden")
    page.click("#room-add-compact")
    page.locator("#room-add-form").wait_for()
    # The focus moves on the details' toggle event, which fires after the form is shown.
    page.wait_for_function("() => document.activeElement.id === 'room-add-bot'")
    assert page.locator("#room-participants").is_hidden()
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    page.click("#room-add > summary")
    page.locator("#room-bar").wait_for(state="hidden")
    page.wait_for_function("() => document.activeElement.id === 'room-add-compact'")
    assert page.locator("#transcript").bounding_box()["y"] < 260

    toggle = page.locator("#drawer-toggle")
    assert toggle.get_attribute("aria-expanded") == "false"
    toggle.click()
    sidebar = page.locator("#sidebar")
    sidebar.wait_for()
    page.wait_for_function(
        "() => document.getElementById('sidebar').getBoundingClientRect().left >= 0"
    )
    assert toggle.get_attribute("aria-expanded") == "true"
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    shoot(page, "mobile-drawer")
    page.keyboard.press("Escape")
    sidebar.wait_for(state="hidden")
    assert page.evaluate("document.activeElement.id") == "drawer-toggle"
    assert page.js_errors == []
