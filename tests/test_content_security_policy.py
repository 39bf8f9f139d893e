"""Every answer carries one strict Content-Security-Policy: scripts, styles, fonts, frames and
connections from this server only, images from this server and ``data:`` (plus the origins an
operator lists in ``CSP_IMG_SRC_EXTRA``), nothing may frame the pages. A model reply that names a
remote image can then not make the browser fetch it (an exfiltration channel for anything the
model saw); the browser side is ``tests/browser/test_remote_content.py``."""

import os
import subprocess
import sys

import pytest
from django.test import Client, override_settings

from tests.factories import BotFactory, SessionFactory, UserFactory
from tests.integration.processes import ROOT

# The policy, directive by directive. The header's directive order is not part of the contract
# (django-csp builds it from a dict), so headers are compared parsed, each directive's sources in
# order.
POLICY = {
    "default-src": ["'self'"],
    "script-src": ["'self'"],
    "style-src": ["'self'"],
    "img-src": ["'self'", "data:"],
    "connect-src": ["'self'", "ws://testserver"],
    "object-src": ["'none'"],
    "base-uri": ["'self'"],
    "form-action": ["'self'"],
    "frame-ancestors": ["'none'"],
}


def parsed(header: str) -> dict[str, list[str]]:
    directives: dict[str, list[str]] = {}
    for part in header.split(";"):
        name, *sources = part.split()
        assert name not in directives, f"{name} twice in {header!r}"
        directives[name] = sources
    return directives


def policy_of(response) -> dict[str, list[str]]:
    assert "Content-Security-Policy" in response, (response.status_code, dict(response.headers))
    return parsed(response["Content-Security-Policy"])


@pytest.fixture
def member(db):
    user = UserFactory(username="member")
    client = Client()
    client.force_login(user)
    client.bot = BotFactory(owner=user, name="Mine")
    return client


@pytest.fixture
def superuser_client(db):
    client = Client()
    client.force_login(UserFactory(username="root", is_staff=True, is_superuser=True))
    return client


def test_chat_and_bot_pages_carry_the_policy(member):
    session = SessionFactory(bot=member.bot, user=member.bot.owner)
    bot = member.bot.pk
    for path in [
        "/",
        "/chat/new/",
        f"/chat/{session.pk}/",
        "/bots/",
        "/bots/new/",
        f"/bots/{bot}/",
        f"/bots/{bot}/delete/",
    ]:
        response = member.get(path, follow=True)
        assert response.status_code == 200, path
        assert response["Content-Type"].startswith("text/html"), path
        assert policy_of(response) == POLICY, path


def test_login_page_and_its_failure_carry_the_policy(db):
    client = Client()
    page = client.get("/accounts/login/")
    assert page.status_code == 200
    assert policy_of(page) == POLICY
    refused = client.post("/accounts/login/", {"username": "nobody", "password": "wrong"})
    assert refused.status_code == 200
    assert policy_of(refused) == POLICY
    # A page that needs a login answers with a redirect, with the policy too.
    redirect = client.get("/bots/")
    assert redirect.status_code == 302
    assert policy_of(redirect) == POLICY


def test_admin_pages_carry_the_policy(superuser_client):
    bot = BotFactory(owner=UserFactory(username="someone"))
    for path in [
        "/admin/",
        "/admin/bots/bot/",
        f"/admin/bots/bot/{bot.pk}/change/",
        "/admin/compaction/summary/",
        "/admin/memory/memoryrecord/",
    ]:
        response = superuser_client.get(path)
        assert response.status_code == 200, path
        assert policy_of(response) == POLICY, path
    login = Client().get("/admin/login/")
    assert login.status_code == 200
    assert policy_of(login) == POLICY


def test_api_answers_and_not_found_carry_the_policy(member):
    api = member.get("/api/v1/bots/")
    assert api.status_code == 200
    assert policy_of(api) == POLICY
    missing = member.get("/no/such/page/")
    assert missing.status_code == 404
    assert policy_of(missing) == POLICY
    api_missing = member.get("/api/v1/nope/")
    assert api_missing.status_code == 404
    assert policy_of(api_missing) == POLICY


def test_swagger_ui_alone_may_use_inline_styles_and_its_script_is_a_file(member):
    """drf-spectacular's Swagger UI page has one inline <style>: /api/docs/ (and only it) adds
    'unsafe-inline' to style-src. Its start-up script is served from the same URL
    (``?script=``), so script-src stays 'self'."""
    docs = member.get("/api/docs/")
    assert docs.status_code == 200
    assert policy_of(docs) == {**POLICY, "style-src": ["'self'", "'unsafe-inline'"]}
    body = docs.content.decode()
    assert "<script>" not in body
    assert '<script src="/api/docs/?script="></script>' in body
    script = member.get("/api/docs/?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert b"SwaggerUIBundle" in script.content


def test_over_https_the_websocket_source_is_wss(member):
    response = member.get("/chat/new/", secure=True)
    assert policy_of(response) == {**POLICY, "connect-src": ["'self'", "wss://testserver"]}


@override_settings(ALLOWED_HOSTS=["chat.example.com", "testserver"])
def test_the_websocket_source_names_the_host_and_port_the_page_came_from(member):
    response = member.get("/chat/new/", HTTP_HOST="chat.example.com:8443")
    assert response.status_code == 200
    assert policy_of(response)["connect-src"] == ["'self'", "ws://chat.example.com:8443"]


def test_a_refused_host_gets_the_policy_without_naming_that_host(member):
    response = member.get("/chat/new/", HTTP_HOST="evil.example.net")
    assert response.status_code == 400
    assert policy_of(response) == {**POLICY, "connect-src": ["'self'"]}


def test_chat_page_tells_the_renderer_which_image_origins_are_allowed(member):
    page = member.get("/chat/new/")
    assert 'data-image-origins=""' in page.content.decode()
    with override_settings(CSP_IMG_SRC_EXTRA=["https://img.example.com", "http://a.test:8080"]):
        page = member.get("/chat/new/")
    assert 'data-image-origins="https://img.example.com http://a.test:8080"' in (
        page.content.decode()
    )


# --- CSP_IMG_SRC_EXTRA, read at start-up ---------------------------------------------------------
def _settings(**env: str) -> subprocess.CompletedProcess:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.CSP_IMG_SRC_EXTRA); "
        "print(s.CONTENT_SECURITY_POLICY['DIRECTIVES']['img-src'])"
    )
    merged = {**os.environ, "DJANGO_SETTINGS_MODULE": "chat_platform.settings", **env}
    return subprocess.run(  # noqa: S603
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=merged,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_img_src_extra_is_empty_by_default():
    env = {k: v for k, v in os.environ.items() if k != "CSP_IMG_SRC_EXTRA"}
    done = subprocess.run(  # noqa: S603
        [
            sys.executable,
            "-c",
            "import django; django.setup(); from django.conf import settings as s; "
            "print(s.CSP_IMG_SRC_EXTRA, s.CONTENT_SECURITY_POLICY['DIRECTIVES']['img-src'])",
        ],
        cwd=ROOT,
        env={**env, "DJANGO_SETTINGS_MODULE": "chat_platform.settings"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[] [\"'self'\", 'data:']"]


def test_img_src_extra_adds_origins_an_operator_lists():
    done = _settings(CSP_IMG_SRC_EXTRA="https://img.example.com, http://cdn.example.org:8080")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "['https://img.example.com', 'http://cdn.example.org:8080']",
        "[\"'self'\", 'data:', 'https://img.example.com', 'http://cdn.example.org:8080']",
    ]


@pytest.mark.parametrize(
    "value",
    [
        "https://img.example.com/path",  # an origin, not a URL
        "img.example.com",  # no scheme
        "*",  # everything: that is no policy
        "https:",  # a whole scheme
        "https://img.example.com; script-src *",  # a second directive smuggled in
        "https://img.example.com 'unsafe-inline'",
        "ftp://img.example.com",
        "data:",  # already there
    ],
)
def test_img_src_extra_refuses_anything_but_http_origins(value):
    done = _settings(CSP_IMG_SRC_EXTRA=value)
    assert done.returncode == 1
    assert "ImproperlyConfigured: CSP_IMG_SRC_EXTRA" in done.stderr, done.stderr[-2000:]
