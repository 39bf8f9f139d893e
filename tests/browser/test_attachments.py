"""Attach a file and change a chat's settings in headless Chromium (issue 18, Deliver 4, 5)."""

from pathlib import Path

import httpx
import pytest

from tests.browser.support import api_headers, create_bot, log_in, open_new_chat

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
