"""Search all my chats, and export/import, in headless Chromium (issue 18, Deliver 2 and 3)."""

import json
import re
import zipfile
from urllib.parse import urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from tests.browser.support import api_headers, create_bot, log_in

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

# An import job starts a child interpreter that loads Django (seconds on two shared cores).
IMPORT_MS = 60_000


def _chat_with(base, headers, bot, title, texts):
    session = httpx.post(
        f"{base}/api/v1/sessions/", json={"bot": bot["id"], "title": title}, headers=headers
    ).json()
    for text in texts:
        sent = httpx.post(
            f"{base}/api/v1/sessions/{session['id']}/messages/",
            json={"content": text, "wait": True},
            headers=headers,
            timeout=30,
        )
        assert sent.status_code == 201, sent.text
    return session


# The page reads the POST's answer as a queued job (the embedded server ran the job before it
# answered): the page then has to poll the job's status URL until it ends. (Playwright cannot
# replay the POST itself: Chromium does not hand it a file's bytes.)
_QUEUED_ANSWER = """
(() => {
  const open = XMLHttpRequest.prototype.open;
  XMLHttpRequest.prototype.open = function (method, url, ...rest) {
    this.importPost = method === "POST" && /\\/api\\/v1\\/import\\/$/.test(url);
    return open.call(this, method, url, ...rest);
  };
  const text = Object.getOwnPropertyDescriptor(XMLHttpRequest.prototype, "responseText");
  Object.defineProperty(XMLHttpRequest.prototype, "responseText", {
    get() {
      const body = text.get.call(this);
      if (!this.importPost || this.status !== 202) return body;
      const job = JSON.parse(body);
      return JSON.stringify({ ...job, status: "queued", result: null, error: null, bytes_read: 0 });
    },
  });
})();
"""


def _answer_as_queued(page) -> list[str]:
    """Show the page each import job as still queued; the job status URLs it then polls are
    listed in the returned list (a job still running on embedded mode's task threads is polled
    again until it ends)."""
    polled: list[str] = []

    def status(route):
        polled.append(urlsplit(route.request.url).path)
        route.continue_()

    page.add_init_script(_QUEUED_ANSWER)
    page.route(re.compile(r".*/api/v1/import/jobs/\d+/$"), status)
    return polled


def test_search_across_chats_opens_the_chat_at_the_message(desktop, server_url):
    page, base = desktop, server_url
    headers = api_headers(base)
    bot = create_bot(base, headers, name="Finder", model="builtin/recall")
    other_bot = create_bot(base, headers, name="Other finder", model="builtin/recall")
    _chat_with(base, headers, bot, "Gym", ["My gym locker is number 12."])
    target = _chat_with(
        base,
        headers,
        other_bot,
        "Teeth",
        ["The dentist appointment is on Friday at nine."]
        + [f"Filler message number {i} about the weather." for i in range(12)],
    )
    log_in(page, base)
    page.fill("#chat-search", "dentist")
    hit = page.locator("#chat-search-results .chat-search-hit").first
    hit.wait_for()
    assert page.locator("#chat-search-results .chat-search-hit").count() == 1
    assert hit.locator(".chat-search-title").inner_text() == "Teeth"
    assert hit.locator("mark").all_inner_texts() == ["dentist"]
    assert page.locator("#chat-search-status").inner_text() == "1 message found"
    hit.locator("a").click()
    page.wait_for_url(f"**/chat/{target['id']}/#m1")
    found = page.locator("#transcript article.msg[data-found]")
    found.wait_for()
    assert found.get_attribute("data-seq") == "1"
    assert "dentist appointment" in found.inner_text()
    in_view = found.evaluate(
        "n => { const r = n.getBoundingClientRect(), t = document.getElementById('transcript')"
        ".getBoundingClientRect(); return r.top >= t.top && r.top < t.bottom; }"
    )
    assert in_view
    # the sidebar shows the hit's chat with its own bot
    assert page.locator("#bot-select").input_value() == str(other_bot["id"])
    assert page.js_errors == []


def test_export_and_import_from_the_page(desktop, server_url, tmp_path):
    page, base = desktop, server_url
    headers = api_headers(base)
    bot = create_bot(base, headers, name="Porter", model="builtin/recall")
    session = _chat_with(base, headers, bot, "Moving day", ["The van comes at eight on Monday."])
    # The POST answers 202 with the import job. This embedded server runs the job before it
    # answers; shown to the page as still queued, the page must poll the job until it ends.
    polled = _answer_as_queued(page)
    log_in(page, base, next_path=f"/chat/{session['id']}/")
    page.wait_for_selector("#export-links:not([hidden])")
    with page.expect_download() as info:
        page.click("#export-json")
    exported = tmp_path / "moving.json"
    info.value.save_as(exported)
    data = json.loads(exported.read_text())
    assert data["format"] == "chat-platform.session"
    assert [m["content"] for m in data["messages"]][0] == "The van comes at eight on Monday."
    with page.expect_download() as md:
        page.click("#export-markdown")
    assert md.value.suggested_filename == f"chat-{session['id']}-moving-day.md"

    page.click("#transfer-panel summary")
    page.set_input_files("#import-file", str(exported))
    page.click("#import-submit")
    expect(page.locator("#import-status")).to_have_text("Imported 1 chat.", timeout=IMPORT_MS)
    assert page.locator("#import-progress").evaluate("p => p.value") == 100
    jobs = sorted(set(polled))
    assert len(jobs) == 1 and re.fullmatch(r"/api/v1/import/jobs/\d+/", jobs[0])
    # the imported chat opens, with the same history
    page.wait_for_url(re.compile(rf"/chat/(?!{session['id']}/)\d+/$"))
    page.wait_for_selector("#transcript article.msg[data-seq='1']")
    assert (
        "The van comes at eight"
        in page.locator("#transcript article.msg[data-seq='1']").inner_text()
    )
    # the same file again: nothing new
    page.click("#import-submit")
    expect(page.locator("#import-status")).to_have_text(
        "Imported 0 chats; 1 already imported before, skipped.", timeout=IMPORT_MS
    )
    # a bad file says what was wrong
    bad = tmp_path / "bad.json"
    bad.write_text('{"format": "chat-platform.session", "version": 1, "session": ')
    page.set_input_files("#import-file", str(bad))
    page.click("#import-submit")
    expect(page.locator("#import-status")).to_have_text(
        re.compile(r"^Import failed: The file ends early, after \d+ bytes"), timeout=IMPORT_MS
    )
    assert len(set(polled)) == 3  # the failure, too, came from its job's status
    assert page.locator("#import-progress").is_hidden()
    assert page.locator("#import-submit").is_enabled()
    assert page.js_errors == []


def test_a_chatgpt_import_from_the_page_flips_to_its_other_branch_and_exports_all(
    desktop, server_url, tmp_path
):
    from tests.transfer.test_import_export import chatgpt_conversation

    page, base = desktop, server_url
    headers = api_headers(base)
    bot = create_bot(base, headers, name="Importer", model="builtin/recall")
    log_in(page, base)
    page.wait_for_selector(f"#bot-select option[value='{bot['id']}']", state="attached")
    page.select_option("#bot-select", value=str(bot["id"]))
    exported = tmp_path / "conversations.json"
    exported.write_text(json.dumps([chatgpt_conversation()]))
    page.click("#transfer-panel summary")
    page.set_input_files("#import-file", str(exported))
    before = page.url  # the page may already show a chat: wait for the imported one
    page.click("#import-submit")
    expect(page.locator("#import-status")).to_have_text("Imported 1 chat.", timeout=IMPORT_MS)
    page.wait_for_url(lambda url: url != before and re.search(r"/chat/\d+/$", url) is not None)
    main = page.url.rstrip("/").rsplit("/", 1)[1]
    # the regenerated reply (a2b) is the other version of the last message
    last = page.locator("#transcript article.msg[data-seq='6']")
    last.locator(".msg-branches .branch-count").wait_for()
    assert last.locator(".branch-count").inner_text() == "1/2"
    assert "Back at 19:00." in last.inner_text()
    last.locator(".branch-next").click()
    page.wait_for_url(lambda url: f"/chat/{main}/" not in url)
    flipped = page.locator("#transcript article.msg[data-seq='6']")
    flipped.filter(has_text="Return 7pm.").wait_for()
    assert flipped.locator(".branch-count").inner_text() == "2/2"
    # all my chats in one zip: the transcript and both branches, each as JSON and Markdown
    with page.expect_download() as info:
        page.click("#export-all")
    archive = tmp_path / "all.zip"
    info.value.save_as(archive)
    with zipfile.ZipFile(archive) as z:
        names = z.namelist()
    points = httpx.get(f"{base}/api/v1/sessions/{main}/branches/", headers=headers).json()
    chats = sorted({v for p in points["points"] for v in p["versions"]})
    assert len(chats) == 3 and int(main) in chats
    for chat in chats:
        assert {f"chat-{chat}-ferry-plans.json", f"chat-{chat}-ferry-plans.md"} <= set(names)
    assert page.js_errors == []
