"""Attach a file and change a chat's settings in headless Chromium (issue 18, Deliver 4, 5)."""

from pathlib import Path

import httpx
import pytest

from tests.attachments.pdfs import pdf_bytes
from tests.browser.support import api_headers, create_bot, create_streamer, log_in, open_new_chat
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]


def test_attach_a_file_send_it_and_download_it(server_url, desktop, tmp_path):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Reader", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    notes = tmp_path / "notes.txt"
    notes.write_text("The spare key is under the blue flowerpot.\n")
    page.set_input_files("#attach-input", str(notes))
    chip = page.locator("#attach-list .attach-chip")
    chip.wait_for()
    assert chip.inner_text().startswith("notes.txt (43 B)")
    page.fill("#composer", "Where is the spare key?")
    page.press("#composer", "Enter")
    user = page.locator('#transcript article.msg[data-role="user"]').first
    link = user.locator(".attach-links a")
    link.wait_for()
    assert link.inner_text() == "📎 notes.txt"
    # the page shows the typed text and the file, not the file's text
    assert "flowerpot" not in user.locator(".msg-bubble").inner_text()
    assert user.locator(".msg-bubble").inner_text().startswith("Where is the spare key?")
    assert page.locator("#attach-list").is_hidden()
    reply = page.locator(
        '#transcript article.msg[data-role="assistant"][data-kind="chat"][data-status="complete"]'
    )
    reply.first.wait_for(timeout=20000)
    # the file is part of the conversation: builtin/recall quotes it from the history
    page.fill("#composer", "Which flowerpot hides the spare key?")
    page.press("#composer", "Enter")
    reply.nth(1).wait_for(timeout=20000)
    assert "under the blue flowerpot" in reply.nth(1).inner_text()
    with page.expect_download() as download:
        link.click()
    assert download.value.suggested_filename == "notes.txt"
    assert Path(download.value.path()).read_text() == "The spare key is under the blue flowerpot.\n"


def test_chat_settings_panel_saves_the_instruction(server_url, desktop):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Tuned", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    page.click("#chat-settings summary")
    page.wait_for_selector("#chat-settings-model option", state="attached")
    assert page.locator("#chat-settings-status").inner_text() == "This bot lists no other models."
    page.fill("#chat-settings-instruction", "Answer in one line.")
    page.click("#chat-settings-form button[type=submit]")
    status = page.locator("#chat-settings-status")
    status.filter(has_text="Saved").wait_for()
    session_id = page.url.rstrip("/").rsplit("/", 1)[1]
    stored = httpx.get(f"{server_url}/api/v1/sessions/{session_id}/", headers=headers).json()
    assert (stored["extra_instruction"], stored["model_override"]) == ("Answer in one line.", "")


def test_editing_a_message_with_a_file_keeps_the_file(server_url, desktop, tmp_path):
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="Editor", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    plan = tmp_path / "plan.md"
    plan.write_text("Step one: book the venue for 40 people.\n")
    page.set_input_files("#attach-input", str(plan))
    page.locator("#attach-list .attach-chip").wait_for()
    page.fill("#composer", "Read the plan.")
    page.press("#composer", "Enter")
    user = page.locator('#transcript article.msg[data-role="user"][data-status="complete"]').first
    user.locator(".attach-links a").wait_for()
    page.locator(
        '#transcript article.msg[data-role="assistant"][data-kind="chat"][data-status="complete"]'
    ).first.wait_for(timeout=20000)
    first_chat = page.url
    user.hover()
    user.locator("button.msg-edit").click()
    box = page.locator(".msg-edit-box")
    assert box.input_value() == "Read the plan."  # the typed text only, not the file's
    box.fill("Summarise the plan.")
    page.click(".msg-edit-save")
    page.wait_for_url(lambda url: url != first_chat)
    edited = page.locator('#transcript article.msg[data-role="user"]').first
    edited.locator(".attach-links a").wait_for()
    assert edited.locator(".attach-links a").inner_text() == "📎 plan.md"
    assert edited.locator(".msg-bubble").inner_text().startswith("Summarise the plan.")
    session_id = page.url.rstrip("/").rsplit("/", 1)[1]
    messages = httpx.get(
        f"{server_url}/api/v1/sessions/{session_id}/messages/", headers=headers
    ).json()
    content = [m for m in messages if m["role"] == "user"][-1]["content"]
    assert content.startswith("Summarise the plan.\n\n[Attached file #")
    assert content.endswith("Step one: book the venue for 40 people.\n\n[End of plan.md]")


def test_attach_by_paste_see_the_limits_and_the_bots_request_holds_the_text(
    server_url, desktop, fake, tmp_path
):
    page = desktop
    headers = api_headers(server_url)
    bot = create_streamer(server_url, headers, fake.url, name="Paster")
    fake.script(Reply(text="Got the list."))
    log_in(page, server_url)
    open_new_chat(page, bot)
    limits = page.locator("#attach-limits")
    assert limits.is_hidden()
    # paste a file into the message box (as a file manager's copy does)
    page.locator("#composer").evaluate(
        """(box) => {
            const data = new DataTransfer();
            data.items.add(new File(["Milk, eggs and 3 lemons.\\n"], "shopping.txt",
                                    {type: "text/plain"}));
            box.dispatchEvent(new ClipboardEvent("paste", {clipboardData: data, bubbles: true,
                                                          cancelable: true}));
        }"""
    )
    chip = page.locator("#attach-list .attach-chip")
    chip.wait_for()
    assert chip.inner_text().startswith("shopping.txt (25 B)")
    assert limits.is_visible()
    assert limits.inner_text() == (
        "Up to 10 MB per file, 10 files and 20 MB per message: text, Markdown, CSV, JSON, code "
        "and PDF files (the model reads their text), and images for models that accept them."
    )
    assert page.input_value("#composer") == ""  # a pasted file is not pasted as text
    page.fill("#composer", "What do I need?")
    page.press("#composer", "Enter")
    page.locator("#transcript .msg-text", has_text="Got the list.").wait_for()
    user = page.locator('#transcript article.msg[data-role="user"]').first
    assert user.locator(".attach-links a").inner_text() == "📎 shopping.txt"
    assert limits.is_hidden()
    asked = fake.requests[-1]["messages"][-1]
    assert asked["role"] == "user"
    assert asked["content"].startswith("What do I need?\n\n[Attached file #")
    assert asked["content"].endswith(
        ": shopping.txt]\nMilk, eggs and 3 lemons.\n\n[End of shopping.txt]"
    )


def test_refusals_are_shown_in_plain_words_and_nothing_waits(server_url, desktop, fake, tmp_path):
    page = desktop
    headers = api_headers(server_url)
    bot = create_streamer(server_url, headers, fake.url, name="Text only")
    log_in(page, server_url)
    open_new_chat(page, bot)
    banner = page.locator("#error-banner")
    # an image to a model that does not accept images: the server's refusal, as it words it
    photo = tmp_path / "photo.png"
    photo.write_bytes(b"\x89PNG\r\n\x1a\n" + b"\x00\x00\x00\rIHDR" + b"\x00" * 20)
    page.set_input_files("#attach-input", str(photo))
    banner.wait_for()
    assert banner.locator("#error-banner-text").inner_text() == (
        "photo.png: This chat's model (openai/fake-model) does not accept images. Pick a model "
        "that does in the chat's settings, or attach the image's content as text."
    )
    assert page.locator("#attach-list .attach-chip").count() == 0
    # a file over the per-file limit: refused in the page before a byte is sent
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (10 * 1024 * 1024 + 1))
    page.set_input_files("#attach-input", str(big))
    page.locator("#error-banner-text", has_text="big.txt").wait_for()
    assert banner.locator("#error-banner-text").inner_text() == (
        "big.txt: the file is larger than the 10,485,760 bytes a file may have."
    )
    assert page.locator("#attach-list .attach-chip").count() == 0
    session_id = page.url.rstrip("/").rsplit("/", 1)[1]
    messages = httpx.get(
        f"{server_url}/api/v1/sessions/{session_id}/messages/", headers=headers
    ).json()
    assert messages == []


def test_a_pdf_is_read_after_the_upload_and_the_send_waits_for_it(server_url, desktop, tmp_path):
    """Issue 30: a PDF's text is read by a task (202 "processing"); the chip says so, the page
    asks until it is ready, then it sends exactly like any file. A failed one is removed with
    the reason (here: a file that only claims to be a PDF)."""
    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(server_url, headers, name="PDF reader", model="builtin/recall")
    log_in(page, server_url)
    open_new_chat(page, bot)
    report = tmp_path / "report.pdf"
    report.write_bytes(pdf_bytes(["The vault code is 4711."]))
    page.set_input_files("#attach-input", str(report))
    chip = page.locator("#attach-list .attach-chip")
    chip.wait_for()
    page.wait_for_function(
        "() => !document.querySelector('#attach-list .attach-chip').textContent.includes('reading')"
    )
    assert chip.inner_text().startswith("report.pdf (")
    page.fill("#composer", "What is the vault code?")
    page.press("#composer", "Enter")
    user = page.locator('#transcript article.msg[data-role="user"]').first
    user.locator(".attach-links a").wait_for()
    assert user.locator(".attach-links a").inner_text() == "📎 report.pdf"
    session_id = page.url.rstrip("/").rsplit("/", 1)[1]
    stored = httpx.get(f"{server_url}/api/v1/sessions/{session_id}/messages/", headers=headers)
    content = stored.json()[0]["content"]
    assert content.startswith("What is the vault code?\n\n[Attached file #")
    assert content.endswith(": report.pdf]\nThe vault code is 4711.\n[End of report.pdf]")
    damaged = tmp_path / "damaged.pdf"
    damaged.write_bytes(b"%PDF-1.4 garbage")
    page.set_input_files("#attach-input", str(damaged))
    page.locator("#error-banner-text", has_text="damaged.pdf").wait_for()
    assert page.locator("#error-banner-text").inner_text() == (
        "damaged.pdf could not be read as a PDF (it may be damaged)."
    )
    page.wait_for_function("() => !document.querySelector('#attach-list .attach-chip')")


def test_an_attached_picture_shows_as_a_thumbnail(server_url, desktop, fake, tmp_path):
    """Issue 32, Deliver 11: the picture is in the transcript, served by the thumbnail address
    (the download's owner-only check), and loads; its download link stays under it."""
    from tests.attachments.test_thumbnails import png
    from tests.browser.support import FAKE_KEY_ENV

    page = desktop
    headers = api_headers(server_url)
    bot = create_bot(
        server_url,
        headers,
        name="Looker",
        model="openai/gpt-4o-mini",
        api_base=fake.url,
        api_key_env=FAKE_KEY_ENV,
    )
    fake.script(Reply(text="A small dark square."))
    log_in(page, server_url)
    open_new_chat(page, bot)
    photo = tmp_path / "square.png"
    photo.write_bytes(png(48, 32))
    page.set_input_files("#attach-input", str(photo))
    page.locator("#attach-list .attach-chip").wait_for()
    page.fill("#composer", "What is in the picture?")
    page.press("#composer", "Enter")
    user = page.locator('#transcript article.msg[data-role="user"]').first
    thumb = user.locator(".attach-links img.attach-thumb")
    thumb.wait_for()
    image_id = (
        httpx.get(
            f"{server_url}/api/v1/sessions/{page.url.rstrip('/').rsplit('/', 1)[-1]}/messages/",
            headers=headers,
        )
        .json()[0]["content"]
        .split("#", 1)[1]
        .split(":", 1)[0]
    )
    assert thumb.get_attribute("src") == f"/api/v1/attachments/{image_id}/thumbnail/"
    assert thumb.get_attribute("alt") == "square.png"
    page.wait_for_function(
        "(img) => img.complete && img.naturalWidth > 0", arg=thumb.element_handle()
    )
    assert thumb.evaluate("(img) => [img.naturalWidth, img.naturalHeight]") == [48, 32]
    assert user.locator(".attach-links a[download]:not(.attach-thumb-link)").inner_text() == (
        "🖼 square.png"
    )
    assert page.js_errors == []
