"""Tool steps in the page (issue 34, docs/tools.md), in headless Chromium against the embedded
platform: staff register the test MCP server, a bot uses its tools, and the transcript shows
each call collapsed (name, arguments in short, how it went), live while it runs and from the
stored round after; "what the model saw" shows the round's calls collapsed the same way."""

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.browser.support import (
    FAKE_KEY_ENV,
    create_bot,
    embedded_platform,
    log_in,
    open_new_chat,
    send,
    shoot,
)
from tests.fakeopenai import Reply
from tests.mcpserver import TestMCPServer

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

ADMIN_PASSWORD = "admin-pw-for-tool-steps"


@pytest.fixture(scope="module")
def mcp() -> Iterator[TestMCPServer]:
    server = TestMCPServer().start()
    try:
        yield server
    finally:
        server.release.set()
        server.stop()


@pytest.fixture(scope="module")
def site(fake_llm, tmp_path_factory) -> Iterator[str]:
    admin = ("createsuperuser", "--noinput", "--username", "admin", "--email", "a@x.test")
    with embedded_platform(
        tmp_path_factory,
        "toolsteps",
        setup=[admin],
        PROVIDER_API_BASES=fake_llm.url,
        LLM_MAX_RETRIES="0",
        LLM_RETRY_BACKOFF_SECONDS="0",
        DJANGO_SUPERUSER_PASSWORD=ADMIN_PASSWORD,
        **{FAKE_KEY_ENV: "sk-fake"},
    ) as (base, _log):
        yield base


def _token(base: str, username: str, password: str) -> dict[str, str]:
    response = httpx.post(
        f"{base}/api/v1/auth/token/", json={"username": username, "password": password}
    )
    assert response.status_code == 200, response.text
    return {"Authorization": f"Token {response.json()['token']}"}


def _calc_server(base: str, mcp: TestMCPServer) -> None:
    """Register the test server as ``calc`` (once: the module's tests share the site)."""
    staff = _token(base, "admin", ADMIN_PASSWORD)
    listed = httpx.get(f"{base}/api/v1/tool-servers/", headers=staff)
    if any(server["name"] == "calc" for server in listed.json()):
        return
    made = httpx.post(
        f"{base}/api/v1/tool-servers/",
        json={"name": "calc", "url": mcp.url, "public": True},
        headers=staff,
    )
    assert made.status_code == 201, made.text
    refreshed = httpx.post(
        f"{base}/api/v1/tool-servers/{made.json()['id']}/refresh-tools/", headers=staff
    )
    assert refreshed.status_code == 200, refreshed.text


def _call(call_id: str, name: str, arguments: dict) -> dict:
    return {
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(arguments)},
    }


def _context_record(base: str, headers: dict[str, str], message_id: int) -> dict:
    url = f"{base}/api/v1/messages/{message_id}/context/?payload=1"
    for _ in range(60):
        response = httpx.get(url, headers=headers)
        if response.status_code == 200:
            return response.json()
        time.sleep(0.5)
    pytest.fail(f"no context record for message {message_id}")


def test_tool_steps_are_collapsed_live_and_stored_and_in_what_the_model_saw(
    site, mcp, fake_llm, desktop
):
    page = desktop
    _calc_server(site, mcp)
    headers = _token(site, "demo", "demo")
    bot = create_bot(
        site,
        headers,
        name="Calculator",
        model="openai/fake-model",
        api_base=fake_llm.url,
        api_key_env=FAKE_KEY_ENV,
        tools=["calc/add", "calc/slow"],
    )
    fake_llm.script(
        Reply(
            text="",
            tool_calls=[
                _call("call_add", "calc__add", {"a": 2, "b": 3}),
                _call("call_slow", "calc__slow", {"seconds": 60}),
            ],
        ),
        Reply(text="2 + 3 = 5, and the slow one slept."),
    )
    log_in(page, site)
    open_new_chat(page, bot)
    send(page, "Add 2 and 3, then take your time.")

    # Live: the round's calls as blocks on the reply being written; add ends, slow runs.
    live = page.locator("#transcript .tool-steps-live")
    live.locator('details.tool-step[data-call-id="call_slow"][data-state="running"]').wait_for()
    live.locator('details.tool-step[data-call-id="call_add"][data-state="done"]').wait_for()
    running = live.locator('details.tool-step[data-call-id="call_slow"]')
    assert running.get_attribute("open") is None
    assert running.locator("summary").inner_text() == "calc__slow (seconds: 60) — running…"
    shoot(page, "tool-steps-live")
    mcp.release.set()  # the slow call answers now

    # Stored: the call message draws one collapsed block per call; the result rows are hidden.
    page.locator('#transcript article.msg[data-kind="chat"][data-status="complete"]').wait_for()
    stored = page.locator('#transcript article.msg-tool[data-role="assistant"] details.tool-step')
    stored.nth(1).wait_for()
    assert stored.count() == 2
    assert page.locator("#transcript .tool-steps-live details").count() == 0
    assert page.locator('#transcript article.msg-tool[data-role="tool"]:visible').count() == 0
    add = stored.nth(0)
    assert add.get_attribute("data-call-id") == "call_add"
    assert add.get_attribute("data-state") == "done"
    assert add.get_attribute("open") is None
    assert add.locator("summary").inner_text() == "calc__add (a: 2, b: 3) — done · 5 tokens"
    assert not add.locator(".tool-step-arguments").is_visible()
    add.locator("summary").click()
    assert add.locator(".tool-step-arguments").inner_text() == '{\n  "a": 2,\n  "b": 3\n}'
    assert add.locator(".tool-step-result").inner_text() == "5"
    assert stored.nth(1).locator("summary").inner_text() == (
        "calc__slow (seconds: 60) — done · 7 tokens"
    )
    shoot(page, "tool-steps")

    # What the model saw, for the answer: the tool round's part, each call collapsed in it.
    reply = page.locator('#transcript article.msg[data-kind="chat"][data-role="assistant"]')
    record = _context_record(site, headers, int(reply.get_attribute("data-message-id")))
    assert [p["kind"] for p in record["calls"][-1]["parts"]].count("tool") == 1
    reply.locator(".msg-context").click()
    page.locator('.ctx-view[aria-busy="false"]').wait_for()
    part = page.locator('.ctx-call >> nth=-1 >> .ctx-part[data-kind="tool"]')
    assert part.get_attribute("open") is None
    assert part.locator(".ctx-part-name").inner_text() == "Tool round 1: calc__add, calc__slow"
    part.locator("> summary").click()
    calls = part.locator("details.ctx-tool-call")
    assert calls.count() == 2
    first = calls.nth(0)
    assert first.get_attribute("open") is None
    assert first.locator("summary").inner_text() == "calc__add (a: 2, b: 3)"
    first.locator("summary").click()
    assert first.locator(".ctx-tool-arguments").inner_text() == '{"a": 2, "b": 3}'
    assert first.locator(".ctx-tool-result").inner_text() == "5"
    first.locator(".ctx-tool-result").scroll_into_view_if_needed()
    shoot(page, "tool-steps-what-the-model-saw")
    assert page.js_errors == []


def test_the_built_in_model_calls_a_tool_the_user_names(site, mcp, desktop):
    """No provider: a built-in bot with tools says how to call one, and a message that starts
    with a tool's name runs it as a collapsed step and quotes the result (docs/models.md)."""
    page = desktop
    _calc_server(site, mcp)
    headers = _token(site, "demo", "demo")
    bot = create_bot(
        site, headers, name="Built-in with tools", model="builtin/recall", tools=["calc/add"]
    )
    log_in(page, site)
    open_new_chat(page, bot)
    assert (
        page.locator("#bot-info .builtin-note")
        .inner_text()
        .endswith("; start a message with one of its tools' names to call it")
    )
    send(page, "add 2 40")

    answer = page.locator(
        '#transcript article.msg[data-role="assistant"][data-kind="chat"][data-status="complete"]'
    )
    answer.wait_for()
    assert answer.locator(".msg-text").inner_text().split() == ["add", "returned:", "42"]
    step = page.locator('#transcript article.msg-tool[data-role="assistant"] details.tool-step')
    assert step.count() == 1
    assert step.locator("summary").inner_text().startswith("calc__add (a: 2, b: 40) — done")
    assert page.js_errors == []
