"""Shared pieces of the browser tests: Debian's Chromium, the embedded platform as a subprocess,
and small page helpers. Fixtures live in ``conftest.py`` (one server per test process)."""

import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest

from tests.integration.processes import ROOT, manage, process_env, sqlite_copy, web_server

# Generous: a loaded 2-core host (CI beside other work) can take seconds per page action.
TIMEOUT_MS = 30_000
FAKE_KEY_ENV = "BROWSER_FAKE_KEY"
ARTIFACTS = ROOT / "test-artifacts"
SCREENSHOTS = ROOT / "docs" / "screenshots"
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


def chromium_path() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            "Chromium is required for the browser tests but was not found on PATH or at "
            "/usr/bin/chromium (install Debian's `chromium` package).",
            pytrace=False,
        )
    return path


# The logs of the embedded servers running now (base URL -> log): a failing test's report
# carries their tails (tests/browser/conftest.py), so a CI failure says what the server did.
LIVE_SERVER_LOGS: dict[str, Path] = {}


@contextmanager
def embedded_platform(
    tmp_path_factory, name: str, *, seed: bool = True, setup=(), **env: str | None
) -> Iterator[tuple[str, Path]]:
    """The platform in embedded mode (uvicorn, SQLite, in-process tasks) on a database of its
    own, copied from the session's template, after the ``manage.py`` commands in ``setup``; yields
    its base URL and its log, whose tail is printed on the way out."""
    tmp = tmp_path_factory.mktemp(name)
    database = tmp / "browser.sqlite3"
    sqlite_copy(tmp_path_factory, database, seed=seed)
    env = process_env(
        **{
            "REDIS_URL": None,
            "SECRET_KEY": None,
            "DEBUG": "true",
            "DATABASE_URL": f"sqlite:///{database}",
            **env,
        }
    )
    for command in setup:
        manage(env, *command)
    log = tmp / "web.log"
    try:
        with web_server(env, log) as base:
            LIVE_SERVER_LOGS[base] = log
            try:
                yield base, log
            finally:
                LIVE_SERVER_LOGS.pop(base, None)
    finally:
        if log.exists():
            print(f"--- web server log (tail) ---\n{log.read_text(errors='replace')[-4000:]}")


def api_headers(base: str) -> dict[str, str]:
    response = httpx.post(
        f"{base}/api/v1/auth/token/", json={"username": "demo", "password": "demo"}
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Token {response.json()['token']}"}


def create_bot(base: str, headers: dict[str, str], **fields) -> dict:
    response = httpx.post(f"{base}/api/v1/bots/", json=fields, headers=headers)
    assert response.status_code == 201, response.text
    return response.json()


def create_streamer(base: str, headers: dict[str, str], api_base: str, name: str = "Streamer"):
    return create_bot(
        base,
        headers,
        name=name,
        model="openai/fake-model",
        api_base=api_base,
        api_key_env=FAKE_KEY_ENV,
    )


def log_in(
    page, base: str, password: str = "demo", next_path: str = "/", username: str = "demo"
) -> None:
    page.goto(base + next_path)
    page.wait_for_url("**/accounts/login/**")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    with page.expect_navigation():
        page.click("form button[type=submit]")


def open_new_chat(page, bot: dict) -> None:
    """Pick the bot, start a new chat and wait until the page is live. Picking a bot keeps the
    open chat open (it is for the next new chat), so the new chat is the one whose address
    differs from the page's before the click."""
    page.wait_for_selector(f"#bot-select option[value='{bot['id']}']", state="attached")
    page.select_option("#bot-select", value=str(bot["id"]))
    before = urlsplit(page.url).path
    page.click("#new-session")
    page.wait_for_url(
        lambda url: (
            bool(re.fullmatch(r"/chat/\d+/", urlsplit(url).path)) and urlsplit(url).path != before
        )
    )
    created = urlsplit(page.url).path.strip("/").rsplit("/", 1)[-1]
    # Attached, not visible: on a phone, opening the chat shuts the drawer that lists it.
    page.wait_for_selector(
        f"#session-list li.is-current[data-session-id='{created}']", state="attached"
    )
    page.wait_for_selector("#connection-status[data-state=live]", state="attached")
    page.wait_for_selector("#composer:enabled")


def wait_until_held(page, held: list, *, at_least: bool = False) -> None:
    """Until a route handler has held one request (it appends each it holds to ``held``); the
    page's event loop runs meanwhile. 30 s at most. ``at_least``: one or more."""
    for _ in range(600):
        if held:
            break
        page.wait_for_timeout(50)
    assert len(held) >= 1 if at_least else len(held) == 1


def let_handlers_run(page) -> None:
    """A moment for the page to handle what it just received, where a right handling changes
    nothing that could be waited for (a late answer that must not be drawn)."""
    page.evaluate("() => new Promise((done) => setTimeout(done, 200))")


def current_session_id(page) -> str:
    return page.locator("#session-list li.is-current").get_attribute("data-session-id")


def send(page, text: str) -> None:
    page.fill("#composer", text)
    page.press("#composer", "Enter")


def assistant(page):
    return page.locator('#transcript article.msg[data-role="assistant"][data-kind="chat"]')


def shoot(page, name: str, **kwargs) -> None:
    """A screenshot into test-artifacts/; with ``UPDATE_SCREENSHOTS=1`` also into
    docs/screenshots/ (the ones the README and docs show)."""
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{name}.png"), **kwargs)
    if os.environ.get("UPDATE_SCREENSHOTS") == "1":
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / f"{name}.png"), **kwargs)


def sign_out(page: Any) -> None:
    """Sign out and land on the login page. The logout's own navigation may be overtaken by the
    page's: once the session is gone, the chat page's open socket closes with 4401 and the page
    goes to the login page itself (static/chat/transport/socket.js), aborting the navigation a
    ``expect_navigation`` waits for (net::ERR_ABORTED, seen once in a loaded CI run). Either
    way the page ends on the login page, which only a signed-out session is sent to."""
    page.click(".logout-form button[type=submit]")
    page.wait_for_url("**/accounts/login/**")
