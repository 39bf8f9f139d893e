"""Remote content in replies, in headless Chromium: a model reply that names a remote image (as
markdown or as a raw ``<img>``) must not make the browser fetch it — the URL could carry anything
the model saw. The reply shows a link instead; ``data:`` images and images from an origin the
operator allowed (``CSP_IMG_SRC_EXTRA``) still render. The Content-Security-Policy stops the
fetch even where the renderer is bypassed, and no page of the platform breaks under it.

Two local listeners stand in for remote hosts: one whose images must never be fetched, one the
operator allowed. Both answer any GET with a 1x1 PNG and record the path.
"""

import base64
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from tests.browser.support import (
    FAKE_KEY_ENV,
    api_headers,
    assistant,
    create_streamer,
    embedded_platform,
    log_in,
    open_new_chat,
    send,
)
from tests.fakeopenai import Reply

pytestmark = [pytest.mark.browser, pytest.mark.crossprocess]

PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
)
DATA_PNG = "data:image/png;base64," + base64.b64encode(PNG).decode()
LINK_REL = "noopener noreferrer nofollow"

# Every Content-Security-Policy violation the page reports, from its first script on.
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push({directive: e.effectiveDirective, blocked: e.blockedURI});
}, true);
"""


class Listener:
    """A stand-in remote host: answers every GET with a PNG and records the path."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        listener = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802
                listener.paths.append(self.path)
                self.send_response(200)
                self.send_header("Content-Type", "image/png")
                self.send_header("Content-Length", str(len(PNG)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(PNG)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.origin = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def remote() -> Iterator[Listener]:
    """The host whose images must never be fetched."""
    listener = Listener()
    try:
        yield listener
    finally:
        listener.stop()


@pytest.fixture(scope="module")
def allowed() -> Iterator[Listener]:
    """The host the operator listed in CSP_IMG_SRC_EXTRA."""
    listener = Listener()
    try:
        yield listener
    finally:
        listener.stop()


@pytest.fixture(scope="module")
def server_url(fake_llm, allowed, tmp_path_factory) -> Iterator[str]:
    """As tests/browser/conftest.py's, with one image origin allowed by the operator."""
    with embedded_platform(
        tmp_path_factory,
        "remote-content",
        PROVIDER_API_BASES=fake_llm.url,
        LLM_MAX_RETRIES="0",
        LLM_RETRY_BACKOFF_SECONDS="0",
        CSP_IMG_SRC_EXTRA=allowed.origin,
        **{FAKE_KEY_ENV: "sk-fake"},
    ) as (base, _log):
        yield base


@pytest.fixture
def page(desktop):
    desktop.add_init_script(RECORD_VIOLATIONS)
    return desktop


def images_settled(page) -> None:
    """Every <img> on the page has finished (loaded or failed): a fetch it caused is over."""
    page.wait_for_function("() => [...document.images].every((img) => img.complete)")


def test_remote_images_in_a_reply_are_links_and_never_fetched(
    server_url, page, fake, remote, allowed
):
    pixel = f"{remote.origin}/pixel.png"
    raw = f"{remote.origin}/p2.png"
    ok = f"{allowed.origin}/ok.png"
    reply_text = (
        f"Here is the chart: ![x]({pixel})\n\n"
        f'And another: <img src="{raw}">\n\n'
        f"Inline: ![dot]({DATA_PNG})\n\n"
        f"Allowed: ![fine]({ok})\n\n"
        "Done."
    )
    bot = create_streamer(server_url, api_headers(server_url), fake.url, name="Pictures")
    fake.script(Reply(text=reply_text))
    log_in(page, server_url)
    open_new_chat(page, bot)
    send(page, "Show me the pictures.")
    page.wait_for_selector('#transcript article.msg[data-role="assistant"][data-status="complete"]')
    text = assistant(page).last.locator(".msg-text")
    text.filter(has_text="Done.").wait_for()
    images_settled(page)
    assert remote.paths == []  # (before the fix: ["/pixel.png", "/p2.png"])

    # The remote images are links, with the alt text (or the URL) as their text.
    links = text.locator(f'a[href^="{remote.origin}/"]')
    assert [
        (a.get_attribute("href"), a.inner_text(), a.get_attribute("rel"), a.get_attribute("target"))
        for a in links.all()
    ] == [(pixel, "x", LINK_REL, "_blank"), (raw, raw, LINK_REL, "_blank")]
    # The data: image and the allowed origin's image are images, and loaded.
    images = text.locator("img")
    assert [img.get_attribute("src") for img in images.all()] == [DATA_PNG, ok]
    assert [img.get_attribute("alt") for img in images.all()] == ["dot", "fine"]
    assert images.evaluate_all("(imgs) => imgs.map((img) => img.naturalWidth)") == [1, 1]
    assert page.locator(f'img[src^="{remote.origin}"]').count() == 0

    # Still so after a reload (rendered from the stored reply this time).
    page.reload()
    page.wait_for_selector('#transcript[aria-busy="false"]')
    text = assistant(page).last.locator(".msg-text")
    text.filter(has_text="Done.").wait_for()
    images_settled(page)
    assert text.locator(f'a[href^="{remote.origin}/"]').count() == 2
    assert [img.get_attribute("src") for img in text.locator("img").all()] == [DATA_PNG, ok]

    # The renderer never even asked: no violation was reported, nothing reached the host.
    assert page.evaluate("window.__csp") == []
    assert remote.paths == []
    # The control is live: an image the policy allows is fetched from that very kind of host.
    assert allowed.paths and set(allowed.paths) == {"/ok.png"}
    assert page.js_errors == []


def test_the_policy_blocks_a_remote_image_the_renderer_did_not_make(server_url, page, remote):
    """Defence in depth: an <img> put on the page some other way is refused by the policy."""
    log_in(page, server_url)
    page.wait_for_selector("#composer")
    url = f"{remote.origin}/bypass.png"
    page.evaluate(
        """(url) => new Promise((resolve) => {
             const img = document.createElement("img");
             img.onload = () => resolve("loaded");
             img.onerror = () => resolve("refused");
             img.src = url;
             document.body.append(img);
           })""",
        url,
    )
    images_settled(page)
    assert page.evaluate("window.__csp") == [{"directive": "img-src", "blocked": url}]
    assert remote.paths == []


@pytest.mark.parametrize(
    ("path", "ready"),
    [
        ("/accounts/login/", "form button[type=submit]"),
        ("/", "#connection-status[data-state=live]"),
        ("/bots/", "main"),
        ("/bots/new/", "form"),
        ("/admin/", "#content"),
        ("/admin/compaction/summary/", "#changelist"),
        ("/api/docs/", ".opblock"),
    ],
)
def test_pages_work_under_the_policy(server_url, page, path, ready):
    """The pages run their scripts and styles under the policy and report no violation:
    nothing is inline, the websocket connects (connect-src), Swagger UI renders."""
    if path != "/accounts/login/":
        log_in(page, server_url)  # the demo user is staff: the admin opens too
    response = page.goto(server_url + path)
    assert response.status == 200
    assert "Content-Security-Policy" in {k.title(): v for k, v in response.headers.items()}
    page.wait_for_selector(ready, state="attached")
    page.wait_for_load_state("load")
    assert page.evaluate("window.__csp") == []
    assert page.js_errors == []
