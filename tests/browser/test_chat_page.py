"""The real chat page in headless Chromium, against the platform running in embedded mode.

The platform runs as a subprocess (uvicorn, SQLite, no Redis, in-process tasks) exactly as in
``tests/integration/test_embedded.py``; model calls go to the scriptable ``fake_openai`` server.
Chromium is Debian's (``playwright install`` is not used); a missing browser fails the tests.
"""

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from tests.fakeopenai import Reply
from tests.integration.processes import ROOT, process_env, web_server

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

TIMEOUT_MS = 15_000
FAKE_KEY_ENV = "BROWSER_FAKE_KEY"
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-quic",
    "--no-first-run",
    "--disable-component-update",
    "--disable-sync",
]

STREAM_CHUNKS = [
    "Streaming ",
    "replies ",
    "arrive ",
    "piece ",
    "by ",
    "piece, ",
    "so ",
    "the ",
    "reader ",
    "sees ",
    "progress ",
    "early.",
]
STREAM_TEXT = "".join(STREAM_CHUNKS)
LONG_CHUNKS = [f"word{i:02d} " for i in range(60)]
LONG_TEXT = "".join(LONG_CHUNKS)

# Records the assistant bubble's text length every time the transcript changes.
OBSERVE_ASSISTANT = """
() => {
  window.__assistantLengths = [];
  const transcript = document.getElementById("transcript");
  const record = () => {
    const bubbles = transcript.querySelectorAll('article.msg[data-role="assistant"] .msg-text');
    if (!bubbles.length) return;
    const length = bubbles[bubbles.length - 1].textContent.length;
    const seen = window.__assistantLengths;
    if (!seen.length || seen[seen.length - 1] !== length) seen.push(length);
  };
  new MutationObserver(record).observe(transcript, {
    childList: true,
    subtree: true,
    characterData: true,
  });
}
"""


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            "Chromium is required for the browser tests but was not found on PATH or at "
            "/usr/bin/chromium (install Debian's `chromium` package).",
            pytrace=False,
        )
    return path


@pytest.fixture
def embedded_env(tmp_path, fake_openai) -> dict[str, str]:
    env = process_env(
        REDIS_URL=None,
        SECRET_KEY=None,
        DEBUG="true",
        DATABASE_URL=f"sqlite:///{tmp_path / 'browser.sqlite3'}",
        # The demo user is not staff: its bots may call only listed provider addresses.
        PROVIDER_API_BASES=fake_openai.url,
        **{FAKE_KEY_ENV: "sk-fake"},
    )
    for command in (["migrate", "--noinput"], ["seed_demo"]):
        done = subprocess.run(  # noqa: S603
            [sys.executable, "manage.py", *command],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"manage.py {' '.join(command)} failed:\n{done.stderr[-3000:]}"
    return env


@pytest.fixture
def base_url(embedded_env, tmp_path) -> Iterator[str]:
    log = tmp_path / "web.log"
    try:
        with web_server(embedded_env, log) as base:
            yield base
    finally:
        # Shown by pytest only when the test fails.
        if log.exists():
            print(f"--- web server log (tail) ---\n{log.read_text(errors='replace')[-4000:]}")


@pytest.fixture
def browser():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 800})
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.js_errors = []
    page.on("pageerror", lambda error: page.js_errors.append(str(error)))
    try:
        yield page
    finally:
        context.close()


def api_headers(base: str) -> dict[str, str]:
    response = httpx.post(
        f"{base}/api/v1/auth/token/", json={"username": "demo", "password": "demo"}
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Token {response.json()['token']}"}


def create_streamer(base: str, headers: dict[str, str], api_base: str) -> dict:
    response = httpx.post(
        f"{base}/api/v1/bots/",
        json={
            "name": "Streamer",
            "model": "openai/fake-model",
            "api_base": api_base,
            "api_key_env": FAKE_KEY_ENV,
        },
        headers=headers,
    )
    assert response.status_code == 201, response.text
    return response.json()


def log_in(page, base: str, password: str = "demo") -> None:
    page.goto(base + "/")
    page.wait_for_url("**/accounts/login/**")
    page.fill("input[name=username]", "demo")
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("form button[type=submit]")


def open_new_chat(page, bot: dict) -> None:
    """Pick the bot, start a new chat and wait until the page is live."""
    page.wait_for_selector(f"#bot-select option[value='{bot['id']}']", state="attached")
    page.select_option("#bot-select", label=f"{bot['name']} — {bot['model']}")
    page.click("#new-session")
    page.wait_for_selector("#session-list li.is-current")
    page.wait_for_selector("#connection-status[data-state=live]")
    page.wait_for_selector("#composer:enabled")


def send(page, text: str) -> None:
    page.fill("#composer", text)
    page.press("#composer", "Enter")


def assistant(page):
    return page.locator('#transcript article.msg[data-role="assistant"]')


def test_reply_streams_into_the_page_and_survives_a_reload(base_url, page, fake_openai):
    headers = api_headers(base_url)
    bot = create_streamer(base_url, headers, fake_openai.url)
    fake_openai.script(Reply(text=STREAM_TEXT, chunks=STREAM_CHUNKS, delay_between_chunks=0.15))

    log_in(page, base_url)
    assert urlsplit(page.url).path == "/", page.url
    open_new_chat(page, bot)
    page.evaluate(OBSERVE_ASSISTANT)

    send(page, "Tell me about streaming.")

    user = page.locator('#transcript article.msg[data-role="user"]')
    user.locator(".msg-text").filter(has_text="Tell me about streaming.").wait_for()
    page.wait_for_selector('#transcript article.msg[data-role="user"][data-message-id]')

    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    reply = assistant(page)
    assert reply.count() == 1
    assert reply.locator(".msg-text").text_content() == STREAM_TEXT
    assert page.locator("#stop").is_hidden()
    assert page.locator("#error-banner").is_hidden()

    lengths = page.evaluate("window.__assistantLengths")
    assert lengths[-1] == len(STREAM_TEXT)
    partial = [n for n in lengths[:-1] if 0 < n < len(STREAM_TEXT)]
    assert len(set(partial)) >= 3, f"the reply did not stream visibly: lengths {lengths}"
    assert partial == sorted(set(partial)), f"partial text shrank while streaming: {lengths}"

    assert fake_openai.headers[0].get("authorization") == "Bearer sk-fake"

    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "chat-page.png"), full_page=True)

    session_id = page.locator("#session-list li.is-current").get_attribute("data-session-id")
    stored = httpx.get(f"{base_url}/api/v1/sessions/{session_id}/messages/", headers=headers).json()
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "Tell me about streaming.", "complete"),
        ("assistant", STREAM_TEXT, "complete"),
    ]

    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    page.wait_for_selector("#transcript article.msg[data-message-id]")
    shown = page.locator("#transcript article.msg").evaluate_all(
        """nodes => nodes.map(n => [n.dataset.messageId, n.dataset.role, n.dataset.status,
                                     n.querySelector('.msg-text').textContent])"""
    )
    assert shown == [[str(m["id"]), m["role"], m["status"], m["content"]] for m in stored]
    assert page.locator("#session-list li.is-current").get_attribute("data-session-id") == (
        session_id
    )
    assert page.js_errors == []


def test_stop_keeps_the_partial_reply(base_url, page, fake_openai):
    headers = api_headers(base_url)
    bot = create_streamer(base_url, headers, fake_openai.url)
    fake_openai.script(Reply(text=LONG_TEXT, chunks=LONG_CHUNKS, delay_between_chunks=0.1))

    log_in(page, base_url)
    open_new_chat(page, bot)
    send(page, "Talk for a long time.")

    reply = assistant(page)
    reply.locator(".msg-text").filter(has_text="word00").wait_for()
    stop = page.locator("#stop")
    assert stop.is_visible()
    stop.click()

    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    stop.wait_for(state="hidden")
    text = reply.locator(".msg-text").text_content()
    assert text, "the stopped reply lost its partial text"
    assert LONG_TEXT.startswith(text) and text != LONG_TEXT, text

    session_id = page.locator("#session-list li.is-current").get_attribute("data-session-id")
    stored = httpx.get(f"{base_url}/api/v1/sessions/{session_id}/messages/", headers=headers).json()
    assert [(m["role"], m["status"]) for m in stored] == [
        ("user", "complete"),
        ("assistant", "complete"),
    ]
    assert stored[1]["content"] == text
    # Stopping also ends the model call rather than letting it run on unseen.
    assert fake_openai.client_went_away.wait(15), "the model stream was not closed on stop"
    assert page.js_errors == []


def test_wrong_password_stays_on_the_login_page(base_url, page):
    log_in(page, base_url, password="not-the-password")

    error = page.locator("#login-error")
    error.wait_for()
    assert error.inner_text().strip()
    assert urlsplit(page.url).path == "/accounts/login/", page.url
    assert page.locator("#chat-app").count() == 0

    page.goto(base_url + "/")
    page.wait_for_url("**/accounts/login/**")
    assert page.locator("#chat-app").count() == 0
