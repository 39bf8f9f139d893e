"""Issue 7, item 10: ``manage.py check --deploy`` is clean with production settings from the
environment, and the defaults still serve plain http on localhost (embedded mode, tests)."""

import os
import secrets
import subprocess
import sys

from tests.integration.processes import ROOT


def _manage(*args: str, **env: str | None) -> subprocess.CompletedProcess:
    merged = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "REDIS_URL")}
    for key, value in env.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return subprocess.run(  # noqa: S603
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=merged,
        capture_output=True,
        text=True,
        timeout=120,
    )


PRODUCTION = {
    "DEBUG": "false",
    "SECRET_KEY": secrets.token_urlsafe(50),
    "ALLOWED_HOSTS": "chat.example.com",
    "HTTPS": "true",
    "SECURE_PROXY_SSL_HEADER": "HTTP_X_FORWARDED_PROTO,https",
}


def test_check_deploy_is_clean_with_production_settings():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **PRODUCTION)
    assert done.returncode == 0, done.stderr
    assert "System check identified no issues (0 silenced)." in done.stdout


def test_check_deploy_without_https_names_each_missing_protection():
    done = _manage("check", "--deploy", "--fail-level", "WARNING", **{**PRODUCTION, "HTTPS": None})
    assert done.returncode == 1
    found = {code for code in ("W004", "W008", "W012", "W016") if f"security.{code}" in done.stderr}
    assert found == {"W004", "W008", "W012", "W016"}


def _setting_values(**env: str | None) -> list[str]:
    code = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_SSL_REDIRECT, "
        "s.SECURE_HSTS_SECONDS, s.SECURE_HSTS_INCLUDE_SUBDOMAINS, s.SECURE_HSTS_PRELOAD, "
        "s.SECURE_PROXY_SSL_HEADER)"
    )
    merged = {**os.environ, "DJANGO_SETTINGS_MODULE": "chat_platform.settings"}
    for key, value in env.items():
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code], env=merged, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split(" ", 6)


def test_defaults_serve_plain_http_and_https_true_turns_everything_on():
    assert _setting_values(HTTPS=None) == [
        "False", "False", "False", "0", "False", "False", "None\n"
    ]  # fmt: skip
    proxied = _setting_values(HTTPS="true", SECURE_PROXY_SSL_HEADER="HTTP_X_FORWARDED_PROTO,https")
    assert proxied == [
        "True", "True", "True", "31536000", "True", "True", "('HTTP_X_FORWARDED_PROTO', 'https')\n"
    ]  # fmt: skip
    # each one stays configurable on its own
    assert _setting_values(HTTPS="true", SECURE_HSTS_PRELOAD="false", SECURE_HSTS_SECONDS="60")[
        3:6
    ] == ["60", "True", "False"]


def test_a_malformed_proxy_header_stops_start_up():
    done = _manage("check", SECURE_PROXY_SSL_HEADER="X-Forwarded-Proto")
    assert done.returncode == 1
    assert (
        "ImproperlyConfigured: SECURE_PROXY_SSL_HEADER must be '<HTTP_HEADER_NAME>,<value>', "
        "e.g. HTTP_X_FORWARDED_PROTO,https"
    ) in done.stderr
