"""One embedded platform (uvicorn + SQLite, in-process tasks), one fake provider and one
Chromium per test process, shared by every module that does not need a platform configured
otherwise (those start their own, module-scoped); each test gets a fresh browser context (its own
cookies) and makes its own bots and chats, so tests stay independent while the suite stays
fast (docs/testing.md)."""

import time
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial

import httpx
import pytest

from tests.browser.support import (
    CHROMIUM_ARGS,
    FAKE_KEY_ENV,
    LIVE_SERVER_LOGS,
    TIMEOUT_MS,
    chromium_path,
    embedded_platform,
)
from tests.fakeopenai import FakeOpenAI

# httpx waits 5 s by default. On CI's two shared cores the embedded server's first answer
# (a password hash for the token, a cold import) can take longer than that, and a test then
# fails on a ReadTimeout that says nothing about the page. The tests' own REST calls wait up to
# a minute unless they say otherwise.
REST_TIMEOUT_SECONDS = 60


# How much of each running server's log a failing test's report carries.
SERVER_LOG_TAIL_CHARS = 6000
# How many of a page's last events (requests, socket frames, console lines) it carries.
PAGE_JOURNAL_EVENTS = 120

# The journals of the pages opened by the running test (reset before each test).
_journals: list[tuple[str, deque]] = []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A failing browser test's report ends with the tail of every embedded server's log: the
    page only shows what did not happen; the server says why."""
    report = yield
    if report.failed and report.when == "call":
        for base, log in list(LIVE_SERVER_LOGS.items()):
            if log.exists():
                tail = log.read_text(errors="replace")[-SERVER_LOG_TAIL_CHARS:]
                report.sections.append((f"web server log ({base}, tail)", tail))
        for name, journal in _journals:
            report.sections.append((f"page journal ({name}, last events)", "\n".join(journal)))
    return report


@pytest.fixture(autouse=True)
def _fresh_journals() -> None:
    _journals.clear()


@pytest.fixture(autouse=True)
def _patient_rest_calls(monkeypatch) -> None:
    for verb in ("get", "post", "patch", "put", "delete"):
        call = getattr(httpx, verb)
        monkeypatch.setattr(httpx, verb, partial(_with_timeout, call))


def _with_timeout(call, *args, **kwargs):
    kwargs.setdefault("timeout", REST_TIMEOUT_SECONDS)
    return call(*args, **kwargs)


@pytest.fixture(scope="session")
def fake_llm() -> Iterator[FakeOpenAI]:
    server = FakeOpenAI().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def fake(fake_llm) -> FakeOpenAI:
    """The process's fake provider, with nothing left queued or recorded by an earlier test."""
    with fake_llm._lock:
        fake_llm._queue.clear()
        fake_llm.served.clear()
    fake_llm.client_went_away.clear()
    return fake_llm


@contextmanager
def _default_platform(fake_llm, tmp_path_factory) -> Iterator[str]:
    with embedded_platform(
        tmp_path_factory,
        "browser",
        # The demo user is not staff: its bots may call only listed provider addresses.
        PROVIDER_API_BASES=fake_llm.url,
        # A provider error is final at once (no retries, no backoff) so failure tests are quick.
        LLM_MAX_RETRIES="0",
        LLM_RETRY_BACKOFF_SECONDS="0",
        **{FAKE_KEY_ENV: "sk-fake"},
    ) as (base, _log):
        yield base


@pytest.fixture(scope="session")
def shared_server_url(fake_llm, tmp_path_factory) -> Iterator[str]:
    with _default_platform(fake_llm, tmp_path_factory) as base:
        yield base


@pytest.fixture(scope="module")
def server_url(request, fake_llm, tmp_path_factory) -> Iterator[str]:
    """The process's shared platform; a module marked ``own_platform`` (it counts every chat or
    bot of the demo user, which other modules add to) gets one of its own."""
    if request.node.get_closest_marker("own_platform"):
        with _default_platform(fake_llm, tmp_path_factory) as base:
            yield base
    else:
        yield request.getfixturevalue("shared_server_url")


@pytest.fixture(scope="session")
def chromium():
    executable = chromium_path()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _new_page(browser, **context_args):
    context = browser.new_context(**context_args)
    context.set_default_timeout(TIMEOUT_MS)
    page = context.new_page()
    page.js_errors = []
    page.on("pageerror", lambda error: page.js_errors.append(str(error)))
    _watch_static_loads(page)
    _keep_journal(page)
    return context, page


def _keep_journal(page) -> None:
    """What the page asked and heard, with seconds since it opened: a failing test's report
    carries the last of it, so a reply that never showed says whether its frames came."""
    journal: deque = deque(maxlen=PAGE_JOURNAL_EVENTS)
    start = time.monotonic()
    _journals.append((f"page {len(_journals) + 1}", journal))

    def note(*parts) -> None:
        journal.append(f"{time.monotonic() - start:7.2f}s " + " ".join(str(p) for p in parts))

    def websocket(ws) -> None:
        note("ws open", ws.url)
        ws.on("framereceived", lambda payload: note("ws <", str(payload)[:160]))
        ws.on("framesent", lambda payload: note("ws >", str(payload)[:160]))
        ws.on("close", lambda _ws: note("ws closed", ws.url))

    def request(r) -> None:
        if "/static/" not in r.url:  # the files a page loads; a missing one fails the test
            note(">", r.method, r.url)

    def response(r) -> None:
        if "/static/" not in r.url:
            note("<", r.status, r.request.method, r.url)

    page.on("request", request)
    page.on("response", response)
    page.on("requestfailed", lambda r: note("failed", r.failure, r.method, r.url))
    page.on("websocket", websocket)
    page.on("console", lambda m: note("console", m.type, m.text[:160]))
    page.on("pageerror", lambda error: note("page error", str(error)[:300]))


def _watch_static_loads(page) -> None:
    """A script, module or stylesheet under /static/ that does not load raises no page error
    (the module graph just never runs, the styles are just missing), so every page records it
    here and the fixture fails the test with it (docs/architecture.md, "The browser code")."""
    page.static_errors = []

    def response(response) -> None:
        if "/static/" in response.url and response.status >= 400:
            page.static_errors.append(f"{response.status} {response.url}")

    def failed(request) -> None:
        # A navigation cancels what the old page was still loading: not a missing file.
        if "/static/" in request.url and request.failure != "net::ERR_ABORTED":
            page.static_errors.append(f"{request.failure} {request.url}")

    def console(message) -> None:
        # A stylesheet answered with an error page is refused without a response event; a
        # module that fails to load is named in its console error's location.
        where = f"{message.text} {message.location.get('url', '')}"
        if message.type == "error" and "/static/" in where:
            page.static_errors.append(where)

    page.on("response", response)
    page.on("requestfailed", failed)
    page.on("console", console)


@pytest.fixture
def desktop(chromium):
    context, page = _new_page(chromium, viewport={"width": 1280, "height": 800})
    try:
        yield page
    finally:
        context.close()
    assert page.static_errors == []


@pytest.fixture
def phone(chromium):
    context, page = _new_page(
        chromium, viewport={"width": 390, "height": 844}, is_mobile=True, has_touch=True
    )
    try:
        yield page
    finally:
        context.close()
    assert page.static_errors == []
