"""A reply's text as it streams across its model calls (a tool or recall round between them):
each call's deltas count their ``offset`` from the start of that call's text, as the stored
reply does (the text said before tool calls goes with them). The page appended the second
call's text after the first's, cut by the offset: "Let me look.s 42." for "The answer is 42."
The frames are handed to the page's own frame handler, as the socket would."""

import contextlib

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeout

from tests.browser.support import api_headers, create_streamer, log_in, open_new_chat

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

FRAMES = """async (frames) => {
  const url = performance.getEntriesByType("resource")
    .map((entry) => entry.name)
    .find((name) => /\\/chat\\/controllers\\/frames(\\.[0-9a-f]+)?\\.js/.test(name));
  const module = await import(url);
  for (const frame of frames) module.handleFrame(frame);
}"""


def _reply_text(page, reply_id: int, expected: str) -> str:
    """The reply's shown text, once it reads ``expected`` or after 5 s (rendering is batched)."""
    selector = f'#transcript article.msg[data-message-id="{reply_id}"] .msg-text'
    with contextlib.suppress(PlaywrightTimeout):
        page.wait_for_function(
            "([sel, want]) => { const n = document.querySelector(sel);"
            " return n && n.innerText.trim() === want; }",
            arg=[selector, expected],
            timeout=5000,
        )
    return page.locator(selector).inner_text().strip()


def test_a_second_model_call_s_text_replaces_the_first_s_while_streaming(server_url, desktop, fake):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Rounds")
    log_in(page, server_url)
    open_new_chat(page, bot)
    reply = 987654
    created = {
        "type": "message.created",
        "message": {
            "id": reply,
            "seq": 2,
            "role": "assistant",
            "kind": "chat",
            "content": "",
            "status": "streaming",
        },
    }

    def delta(text: str, offset: int) -> dict:
        return {"type": "message.delta", "message_id": reply, "delta": text, "offset": offset}

    page.evaluate(FRAMES, [created, delta("Let me look.", 0)])
    assert _reply_text(page, reply, "Let me look.") == "Let me look."
    # A tool round ran; the next call's text starts at 0 again.
    page.evaluate(FRAMES, [delta("The answer", 0), delta(" is 42.", 10)])
    assert _reply_text(page, reply, "The answer is 42.") == "The answer is 42."
    # Within a call, a delta that overlaps what is shown still adds only what follows it,
    # and one past it (a frame lost) still leaves the text as it is.
    page.evaluate(FRAMES, [delta("42. Sure.", 14), delta(" Lost?", 40)])
    assert _reply_text(page, reply, "The answer is 42. Sure.") == "The answer is 42. Sure."
    assert page.js_errors == []
