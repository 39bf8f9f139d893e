"""A message sent while a reply is being written is queued, shown as such, and answered after
that reply, in headless Chromium against the embedded platform (issue 18, defect 1)."""

import pytest

from tests.browser.support import api_headers, create_streamer, log_in, open_new_chat, send
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

FIRST = ["The first ", "answer, ", "written ", "slowly ", "enough ", "to queue."]


def test_a_message_sent_while_a_reply_streams_is_queued_then_answered_after_it(
    server_url, desktop, fake
):
    page = desktop
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Queue")
    fake.script(
        Reply(text="".join(FIRST), chunks=FIRST, delay_between_chunks=0.4),
        Reply(text="The second answer."),
    )
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Question one")
    page.wait_for_selector('#transcript article.msg[data-seq="2"][data-status="streaming"]')
    send(page, "Question two")

    queued = page.locator('#transcript article.msg[data-role="assistant"][data-seq="4"]')
    queued.wait_for()
    assert queued.locator(".msg-status").inner_text() == "Queued — answers after the reply above"

    page.locator(
        '#transcript article.msg[data-seq="4"] .msg-text', has_text="The second answer."
    ).wait_for()
    texts = page.locator("#transcript article.msg .msg-text").all_inner_texts()
    assert [t.strip() for t in texts] == [
        "Question one",
        "".join(FIRST),
        "Question two",
        "The second answer.",
    ]
    second_request = fake.requests[-1]["messages"]
    assert second_request[-3:] == [
        {"role": "user", "content": "Question one"},
        {"role": "assistant", "content": "".join(FIRST)},
        {"role": "user", "content": "Question two"},
    ]
    assert page.js_errors == []
