"""Two-factor sign-in (allauth.mfa TOTP) through the login page, the admin login and the token
endpoint; password reset by email through the console backend's outbox."""

import os
import re
import subprocess
import sys
import time

import pytest
from allauth.mfa.totp.internal.auth import (
    TOTP,
    format_hotp_value,
    generate_totp_secret,
    hotp_value,
)
from django.core import mail
from django.test import Client
from rest_framework.authtoken.models import Token
from rest_framework.test import APIClient

from tests.factories import UserFactory

pytestmark = pytest.mark.django_db
PASSWORD = "pw-123456"  # the factories' password


def _code(secret):
    return format_hotp_value(hotp_value(secret, int(time.time()) // 30))


@pytest.fixture
def totp_user():
    user = UserFactory(username="ann", email="ann@example.com", is_staff=True)
    secret = generate_totp_secret()
    TOTP.activate(user, secret)
    return user, secret


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_a_password_alone_does_not_sign_in_an_account_with_totp(totp_user, path):
    user, secret = totp_user
    client = Client()
    response = client.post(path, {"username": "ann", "password": PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/2fa/authenticate/"
    assert "_auth_user_id" not in client.session
    wrong = client.post("/accounts/2fa/authenticate/", {"code": "000000"})
    assert wrong.status_code == 200
    assert "_auth_user_id" not in client.session
    done = client.post("/accounts/2fa/authenticate/", {"code": _code(secret)})
    assert done.status_code == 302
    assert client.session["_auth_user_id"] == str(user.pk)


def test_a_right_password_before_the_code_does_not_count_as_a_failed_sign_in(totp_user, settings):
    settings.LOGIN_RATE_PER_ACCOUNT = "2/min"
    for _ in range(3):
        response = Client().post("/accounts/login/", {"username": "ann", "password": PASSWORD})
        assert response.status_code == 302


def test_the_token_endpoint_refuses_a_password_alone_for_an_account_with_totp(totp_user):
    user, _secret = totp_user
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": "ann", "password": PASSWORD}, format="json"
    )
    # The code goes with the password (tests/accounts/test_api_ways_in.py has the rest).
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "mfa_required"
    assert not Token.objects.filter(user=user).exists()


def test_an_account_without_totp_still_gets_its_token(owner):
    response = APIClient().post(
        "/api/v1/auth/token/", {"username": "owner", "password": PASSWORD}, format="json"
    )
    assert response.status_code == 200
    assert response.json() == {"token": Token.objects.get(user=owner).key}
    assert response["Cache-Control"] == "no-store"  # a secret: no cache keeps it


def test_a_signed_in_user_sets_up_totp_after_confirming_their_password(owner):
    client = Client()
    login = client.post("/accounts/login/", {"username": "owner", "password": PASSWORD})
    assert login.status_code == 302
    asked = client.get("/accounts/2fa/totp/activate/")
    assert asked.status_code == 302
    assert asked["Location"].startswith("/accounts/reauthenticate/")
    confirmed = client.post(asked["Location"], {"password": PASSWORD})
    assert confirmed.status_code == 302
    page = client.get("/accounts/2fa/totp/activate/")
    assert page.status_code == 200
    assert 'name="code"' in page.content.decode()
    secret = client.session["mfa.totp.secret"]
    activated = client.post("/accounts/2fa/totp/activate/", {"code": _code(secret)})
    assert activated.status_code == 302
    assert owner.authenticator_set.filter(type="totp").count() == 1


@pytest.mark.django_db(transaction=True)
def test_turning_on_totp_revokes_the_token_and_keys_made_with_the_password_alone(owner):
    from openai_api.keys import key_create

    token = APIClient().post(
        "/api/v1/auth/token/", {"username": "owner", "password": PASSWORD}, format="json"
    )
    key, _raw = key_create(user=owner, name="laptop")
    client = Client()
    client.post("/accounts/login/", {"username": "owner", "password": PASSWORD})
    asked = client.get("/accounts/2fa/totp/activate/")
    client.post(asked["Location"], {"password": PASSWORD})
    client.get("/accounts/2fa/totp/activate/")
    secret = client.session["mfa.totp.secret"]
    # allauth announces the new authenticator once its transaction commits (a real commit here).
    activated = client.post("/accounts/2fa/totp/activate/", {"code": _code(secret)})
    assert activated.status_code == 302
    page = client.get("/accounts/2fa/")
    assert (
        "Two-factor authentication is on. The API token and API keys made before it were "
        "revoked (2 ended): make new ones if you need them."
    ) in page.content.decode()
    assert not Token.objects.filter(key=token.json()["token"]).exists()
    key.refresh_from_db()
    assert key.revoked is True


# --- password reset -----------------------------------------------------------------------------


def test_password_reset_by_email_sets_a_new_password(settings):
    user = UserFactory(username="bob", email="bob@example.com")
    client = Client()
    asked = client.post("/accounts/password/reset/", {"email": "bob@example.com"})
    assert asked.status_code == 302
    [message] = mail.outbox
    assert message.to == ["bob@example.com"]
    link = re.search(r"http://testserver(/accounts/password/reset/key/\S+/)", message.body)
    assert link, message.body
    form = client.get(link.group(1), follow=True)
    assert form.status_code == 200
    new = "a-brand-new-pass-77"
    done = client.post(form.redirect_chain[-1][0], {"password1": new, "password2": new})
    assert done.status_code == 302
    user.refresh_from_db()
    assert user.check_password(new)
    signed_in = Client()
    assert (
        signed_in.post("/accounts/login/", {"username": "bob", "password": new}).status_code == 302
    )
    # The link is single use.
    again = client.get(link.group(1), follow=True)
    assert 'name="password1"' not in again.content.decode()


def test_password_reset_for_an_unknown_address_sends_nothing_and_tells_nothing():
    UserFactory(username="bob", email="bob@example.com")
    response = Client().post("/accounts/password/reset/", {"email": "nobody@example.com"})
    assert response.status_code == 302
    assert response["Location"] == "/accounts/password/reset/done/"
    assert len(mail.outbox) <= 1
    assert all("/accounts/password/reset/key/" not in m.body for m in mail.outbox)


@pytest.mark.parametrize(
    ("env", "backend"),
    [
        ({}, "django.core.mail.backends.console.EmailBackend"),
        ({"REDIS_URL": "redis://127.0.0.1:6379/9"}, "django.core.mail.backends.smtp.EmailBackend"),
        (
            {
                "REDIS_URL": "redis://127.0.0.1:6379/9",
                "EMAIL_URL": "smtp+tls://u:p@mail.example:587",
            },
            "django.core.mail.backends.smtp.EmailBackend mail.example 587 True",
        ),
    ],
)
def test_mail_goes_to_the_console_in_embedded_mode_and_to_smtp_in_real_mode(env, backend):
    """Read from a fresh process: the settings module reads the environment once."""
    clean = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "EMAIL_URL")}
    code = (
        "from chat_platform import settings as s; "
        "print(s.EMAIL_BACKEND, *([s.EMAIL_HOST, s.EMAIL_PORT, s.EMAIL_USE_TLS] "
        "if getattr(s, 'EMAIL_HOST', None) != 'localhost' and s.EMAIL_HOST else []))"
    )
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", code],
        env={**clean, "DEBUG": "true", "DJANGO_SETTINGS_MODULE": "chat_platform.settings", **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    assert done.stdout.strip().splitlines()[-1] == backend


def test_the_admin_login_still_refuses_a_non_staff_account(owner):
    client = Client()
    page = client.get("/admin/login/")
    assert page.status_code == 200
    assert 'name="username"' in page.content.decode()
    refused = client.post("/admin/login/", {"username": "owner", "password": PASSWORD})
    assert refused.status_code == 200
    assert "_auth_user_id" not in client.session
    assert "staff account" in refused.content.decode()


def test_wrong_totp_codes_are_limited_by_allauth_and_the_right_one_then_waits(totp_user):
    _user, secret = totp_user
    client = Client()
    client.post("/accounts/login/", {"username": "ann", "password": PASSWORD})
    pages = [
        client.post("/accounts/2fa/authenticate/", {"code": "000000"}).content.decode()
        for _ in range(5)
    ]
    assert all("Too many failed login attempts" not in page for page in pages)
    # allauth's own limit on codes (5 per account per 5 minutes): even the right code waits.
    right = client.post("/accounts/2fa/authenticate/", {"code": _code(secret)})
    assert right.status_code == 200
    assert "Too many failed login attempts. Try again later." in right.content.decode()
    assert "_auth_user_id" not in client.session


@pytest.mark.parametrize(
    ("issuer", "debug", "ok"),
    [
        ("https://id.example.com", "false", True),
        ("http://id.example.com", "false", False),
        ("http://127.0.0.1:9000", "true", True),
        ("ftp://id.example.com", "true", False),
    ],
)
def test_the_issuer_must_be_https_unless_debug(issuer, debug, ok):
    env = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")}
    done = subprocess.run(  # noqa: S603
        [sys.executable, "-c", "import chat_platform.settings"],
        env={
            **env,
            "DEBUG": debug,
            "SECRET_KEY": "x" * 50,
            "OIDC_ISSUER": issuer,
            "OIDC_CLIENT_ID": "chat",
        },
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert (done.returncode == 0) is ok, done.stderr[-2000:]
    if not ok:
        assert "OIDC_ISSUER must be an https:// URL (http:// only with DEBUG)" in done.stderr


def test_a_password_reset_revokes_the_accounts_token_and_keys_and_says_so():
    user, token, key, raw = _bob_with_credentials()
    client = Client()
    client.post("/accounts/password/reset/", {"email": "bob@example.com"})
    link = re.search(r"http://testserver(/accounts/password/reset/key/\S+/)", mail.outbox[0].body)
    form = client.get(link.group(1), follow=True)
    new = "a-brand-new-pass-77"
    done = client.post(
        form.redirect_chain[-1][0], {"password1": new, "password2": new}, follow=True
    )
    assert done.status_code == 200
    assert (
        "Your password was reset. The account&#x27;s API token and API keys were revoked "
        "(2 ended): make new ones if you need them."
    ) in done.content.decode()
    _ended(token, key, raw)


def test_a_changed_password_revokes_the_accounts_token_and_keys_and_says_so():
    """A person changing a leaked password kept the token and keys made with it working."""
    user, token, key, raw = _bob_with_credentials()
    client = Client()
    client.post("/accounts/login/", {"username": "bob", "password": PASSWORD})
    new = "a-brand-new-pass-78"
    done = client.post(
        "/accounts/password/change/",
        {"oldpassword": PASSWORD, "password1": new, "password2": new},
        follow=True,
    )
    assert done.status_code == 200
    assert (
        "Your password was changed. The account&#x27;s API token and API keys were revoked "
        "(2 ended): make new ones if you need them."
    ) in done.content.decode()
    _ended(token, key, raw)


def test_a_password_staff_set_in_the_admin_revokes_the_accounts_token_and_keys_and_says_so():
    """Staff setting a person's password in the admin (a lost or leaked one) left the token and
    keys made with the old one working."""
    user, token, key, raw = _bob_with_credentials()
    admin = _admin_signed_in()
    new = "a-brand-new-pass-78"
    done = admin.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": new, "password2": new, "usable_password": "true"},
        follow=True,
    )
    assert done.status_code == 200
    assert (
        "The password of bob was changed. The account&#x27;s API token and API keys were revoked "
        "(2 ended)."
    ) in done.content.decode()
    _ended(token, key, raw)
    user.refresh_from_db()
    assert user.check_password(new)


def test_a_refused_password_in_the_admin_revokes_nothing():
    user, token, key, _raw = _bob_with_credentials()
    admin = _admin_signed_in()
    refused = admin.post(
        f"/admin/auth/user/{user.pk}/password/",
        {"password1": "a-brand-new-pass-78", "password2": "another", "usable_password": "true"},
    )
    assert refused.status_code == 200  # the form again, with its error
    assert Token.objects.filter(pk=token.pk).exists()
    key.refresh_from_db()
    assert key.revoked is False


def _bob_with_credentials():
    """Bob, with a DRF token and an API key made before the change: (user, token, key, raw)."""
    from openai_api.keys import key_create

    user = UserFactory(username="bob", email="bob@example.com")
    token = Token.objects.create(user=user)
    key, raw = key_create(user=user, name="laptop")
    return user, token, key, raw


def _admin_signed_in() -> Client:
    UserFactory(username="root", is_staff=True, is_superuser=True)
    admin = Client()
    admin.post("/admin/login/", {"username": "root", "password": PASSWORD})
    return admin


def _ended(token, key, raw):
    """The token is gone, the key revoked, and neither reaches the API any more."""
    assert not Token.objects.filter(pk=token.pk).exists()
    key.refresh_from_db()
    assert key.revoked is True
    by_key = APIClient()
    by_key.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert by_key.get("/api/v1/bots/").status_code == 401
    by_token = APIClient()
    by_token.credentials(HTTP_AUTHORIZATION=f"Token {token.key}")
    assert by_token.get("/api/v1/bots/").status_code == 401


# --- a mail server that does not answer ----------------------------------------------------------


class RefusingBackend:
    """An SMTP server that is down: every send raises, as smtplib does."""

    def __init__(self, *args, **kwargs):
        pass

    def send_messages(self, messages):
        raise ConnectionRefusedError(111, "Connection refused")


@pytest.fixture
def mail_down(settings):
    settings.EMAIL_BACKEND = "tests.accounts.test_mfa_and_reset.RefusingBackend"


def test_a_reset_asked_while_mail_is_down_answers_as_usual_and_logs_it(mail_down, caplog):
    """It answered 500. The page says what it says for any address (it never tells whether an
    account exists); the failure is an ERROR in the log, for the operator."""
    UserFactory(username="bob", email="bob@example.com")
    response = Client().post("/accounts/password/reset/", {"email": "bob@example.com"})

    assert response.status_code == 302
    assert response["Location"] == "/accounts/password/reset/done/"
    failed = [r for r in caplog.records if "account_email_send_failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].levelname == "ERROR" and failed[0].exc_info


def test_an_address_added_while_mail_is_down_says_the_mail_was_not_sent(mail_down, caplog):
    user = UserFactory(username="dave")
    client = Client()
    client.force_login(user)

    response = client.post(
        "/accounts/email/", {"email": "dave@example.com", "action_add": ""}, follow=True
    )

    assert response.status_code == 200
    page = response.content.decode()
    assert "The confirmation email could not be sent" in page
    assert "Confirmation email sent" not in page
    # The address is kept, unconfirmed: "Re-send verification" sends it once mail is back.
    assert list(user.emailaddress_set.values_list("email", "verified")) == [
        ("dave@example.com", False)
    ]
    assert any("account_email_send_failed" in r.getMessage() for r in caplog.records)


def test_a_used_code_is_refused_by_another_web_process(totp_user, settings):
    """allauth marks a TOTP code used in Django's default cache. In real mode that cache is
    Redis, shared by every web process: replayed against another process (one whose memory
    holds nothing of this one's: the in-process caches emptied) the code is still refused."""
    from django.core.cache.backends import locmem

    _user, secret = totp_user
    code = _code(secret)
    sign_in = {"username": "ann", "password": PASSWORD, "code": code}
    first = APIClient().post("/api/v1/auth/token/", sign_in, format="json")
    assert first.status_code == 200
    assert settings.REDIS_URL  # the suite runs in real mode
    assert settings.CACHES["default"]["BACKEND"] == "django.core.cache.backends.redis.RedisCache"
    for memory in (*locmem._caches.values(), *locmem._expire_info.values()):
        memory.clear()
    replay = APIClient().post("/api/v1/auth/token/", sign_in, format="json")
    assert replay.status_code == 401
    assert replay.json()["error"]["code"] == "mfa_invalid"
